"""The optional packages a configuration needs, checked when an app is initialised.

A setting that needs a package which is not installed is refused by ``init_app`` with a
:class:`~flask_authflow.errors.ConfigurationError` that names the pip extra to install,
so a missing package is found when the app starts, never as a 500 inside a request.
Federation's packages (Authlib and requests) are ordinary dependencies; they are still
checked, since an environment can lose them (the ``[oidc]`` extra installs them again).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from flask_authflow.errors import ConfigurationError

__all__ = ["check_extras", "require_extra"]

#: The modules each extra provides, as they are imported.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "oidc": ("authlib", "requests"),
    "webauthn": ("webauthn",),
    "postgres": ("psycopg",),
    "redis": ("redis",),
    "zxcvbn": ("zxcvbn",),
    "cedar": ("cedarpy",),
    "accounts": ("email_validator",),
    "legacy": ("passlib", "bcrypt"),
}


def require_extra(extra: str, setting: str) -> None:
    """Import the modules of ``extra``; raise :class:`ConfigurationError` naming ``setting``
    and the extra when one is missing."""
    for module in EXTRA_MODULES[extra]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigurationError(
                f"{setting} needs the {module!r} package, which is not installed: "
                f"install it with  pip install 'flask-authflow[{extra}]'"
            ) from exc


def _needed(config: Mapping[str, Any], federation: bool) -> list[tuple[str, str]]:
    """``(extra, setting)`` for every optional package the settings in ``config`` use."""
    needed: list[tuple[str, str]] = []
    if federation:
        needed.append(("oidc", "federated login (AUTHFLOW_OAUTH_PROVIDERS or register_provider)"))
    if config.get("AUTHFLOW_WEBAUTHN_RP_ID") is not None:
        needed.append(("webauthn", "AUTHFLOW_WEBAUTHN_RP_ID"))
    url = config.get("AUTHFLOW_DATABASE_URL")
    if isinstance(url, str) and url.startswith("postgresql+psycopg:"):
        needed.append(("postgres", "AUTHFLOW_DATABASE_URL"))
    if config.get("AUTHFLOW_SESSION_STORE") == "redis":
        needed.append(("redis", "AUTHFLOW_SESSION_STORE='redis'"))
    if config.get("AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE") is not None:
        needed.append(("zxcvbn", "AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE"))
    if config.get("AUTHFLOW_REGISTRATION"):
        needed.append(("accounts", "AUTHFLOW_REGISTRATION"))
    if config.get("AUTHFLOW_AUTHZ_POLICIES"):
        needed.append(("cedar", "AUTHFLOW_AUTHZ_POLICIES"))
    if config.get("AUTHFLOW_LEGACY_PASSWORD_SCHEMES"):
        needed.append(("legacy", "AUTHFLOW_LEGACY_PASSWORD_SCHEMES"))
    return needed


def check_extras(config: Mapping[str, Any], *, federation: bool) -> None:
    """Refuse settings in ``config`` (an app's config) whose optional package is missing;
    ``federation``: providers are configured or registered in code.

    :raises ConfigurationError: a needed package is not installed (the message names the
        setting, the package and the extra).
    """
    for extra, setting in _needed(config, federation):
        require_extra(extra, setting)
