"""An app's validated configuration: every feature's settings, read once at ``init_app``.

The keys, their types, defaults and checks are one table (:mod:`flask_authflow._settings`);
each feature reads its own keys into its own frozen settings (``session/settings.py``,
``authn/settings.py``, ...). :class:`AuthFlowConfig` is what the web layer keeps for an app
(``get_state(app).config``): those settings side by side, plus the few keys that only the
wiring reads. Domain modules never import it; they are given the values they need.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from flask_authflow._mail import SmtpSettings
from flask_authflow._settings import (
    DEFAULTS,
    MIN_SIGNING_KEY_BYTES,
    Settings,
    apply_defaults,
    coerce_key,
    setting,
)
from flask_authflow._throttle import ThrottleSettings
from flask_authflow._web.next_url import safe_next
from flask_authflow.audit._settings import AuditSettings
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._settings import FederationSettings
from flask_authflow.issuer._settings import IssuerSettings
from flask_authflow.login._account_settings import AccountSettings
from flask_authflow.login._settings import (
    HashingSettings,
    LockoutSettings,
    LoginSettings,
    PasswordPolicySettings,
)
from flask_authflow.mfa._settings import FactorSettings
from flask_authflow.sessions._settings import SessionSettings

__all__ = [
    "DEFAULTS",
    "MIN_SIGNING_KEY_BYTES",
    "AuthFlowConfig",
    "WebSettings",
    "check_destination",
    "coerce_key",
    "load_config",
]

#: An endpoint name: ``index``, ``main.dashboard`` (dotted blueprint names).
_ENDPOINT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def check_destination(name: str, value: str | None) -> None:
    """``value`` is ``None``, an endpoint name, or a same-site path that ``next`` would accept
    (the rule of :func:`~flask_authflow._web.next_url.safe_next`).

    :raises ConfigurationError: anything else (``https://...``, ``//host``, ``/\\host`` ...).
    """
    if value is None or _ENDPOINT.fullmatch(value):
        return
    if value.startswith("/") and safe_next(value) == value:
        return
    raise ConfigurationError(
        f"{name} must be an endpoint name ('index', 'main.dashboard') or a path on this site "
        f"('/home'), got {value!r}: another site's address is refused, as for ?next="
    )


@dataclass(frozen=True, slots=True)
class WebSettings(Settings):
    """The keys only the wiring reads: the database, the default tenant, the ready views."""

    #: The default store's database (``None``: SQLite in the instance folder).
    database_url: str | None = field(metadata=setting("AUTHFLOW_DATABASE_URL"))
    #: Where mailed links start (``https://app.example.com``; ``None``: Flask's ``SERVER_NAME``).
    external_url: str | None = field(metadata=setting("AUTHFLOW_EXTERNAL_URL"))
    default_tenant: str = field(metadata=setting("AUTHFLOW_DEFAULT_TENANT"))
    login_view: str | None = field(metadata=setting("AUTHFLOW_LOGIN_VIEW"))
    step_up_view: str | None = field(metadata=setting("AUTHFLOW_STEP_UP_VIEW"))
    views: bool = field(metadata=setting("AUTHFLOW_VIEWS"))
    #: Where ``POST .../logout`` is mounted (``None``: no logout route).
    logout_url_prefix: str | None = field(metadata=setting("AUTHFLOW_LOGOUT_URL_PREFIX"))
    #: The template every ready page extends (``authflow/base.html``: the package's own).
    views_layout: str = field(metadata=setting("AUTHFLOW_VIEWS_LAYOUT"))
    #: Where a completed sign-in lands without a safe ``next`` (``None``: the account page).
    post_login_view: str | None = field(metadata=setting("AUTHFLOW_POST_LOGIN_VIEW"))
    #: Where a form logout lands (``None``: the sign-in page, or ``/`` without the ready views).
    post_logout_view: str | None = field(metadata=setting("AUTHFLOW_POST_LOGOUT_VIEW"))
    #: The headless JSON API (``None``: registered when ``views`` is on).
    headless: bool | None = field(metadata=setting("AUTHFLOW_HEADLESS"))
    #: Where the headless API is mounted (its routes are under ``<prefix>/v1``).
    headless_url_prefix: str = field(metadata=setting("AUTHFLOW_HEADLESS_URL_PREFIX"))
    #: The events whose security notice is mailed to the account's owner (all by default).
    security_notices: frozenset[str] = field(metadata=setting("AUTHFLOW_SECURITY_NOTICES"))

    def __post_init__(self) -> None:
        if not self.views_layout.strip():
            raise ConfigurationError("AUTHFLOW_VIEWS_LAYOUT must name a template, such as 'layout.html'")
        check_destination("AUTHFLOW_POST_LOGIN_VIEW", self.post_login_view)
        check_destination("AUTHFLOW_POST_LOGOUT_VIEW", self.post_logout_view)

    @property
    def headless_on(self) -> bool:
        """Whether ``init_app`` registers the headless API (``AUTHFLOW_HEADLESS``, by default
        the same as ``AUTHFLOW_VIEWS``)."""
        return self.views if self.headless is None else self.headless


@dataclass(frozen=True, slots=True)
class AuthFlowConfig:
    """The validated configuration of one app (``get_state(app).config``), by feature."""

    web: WebSettings
    session: SessionSettings
    audit: AuditSettings
    login: LoginSettings
    lockout: LockoutSettings
    throttle: ThrottleSettings
    hashing: HashingSettings
    passwords: PasswordPolicySettings
    factors: FactorSettings
    issuer: IssuerSettings
    federation: FederationSettings
    #: Sign-up, password reset and their mails (read here once, not at each request).
    accounts: AccountSettings
    #: The SMTP server e-mailed codes go out through (``None`` without ``AUTHFLOW_SMTP_HOST``).
    mail: SmtpSettings | None

    @property
    def default_tenant(self) -> str:
        """``AUTHFLOW_DEFAULT_TENANT``: the tenant of a login that names none."""
        return self.web.default_tenant

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> AuthFlowConfig:
        """Every feature's settings from ``config`` (``app.config``); sessions first, so that a
        missing signing key is the first thing reported.

        :raises ConfigurationError: a value is malformed or unsafe; the message names the key.
        """
        session = SessionSettings.from_config(config)
        return cls(
            web=WebSettings.from_config(config),
            session=session,
            audit=AuditSettings.from_config(config),
            login=LoginSettings.from_config(config),
            lockout=LockoutSettings.from_config(config),
            throttle=ThrottleSettings.from_config(config),
            hashing=HashingSettings.from_config(config),
            passwords=PasswordPolicySettings.from_config(config),
            factors=FactorSettings.from_config(config),
            issuer=IssuerSettings.from_config(config),
            federation=FederationSettings.from_config(config),
            accounts=AccountSettings.from_config(config),  # refuses an unsafe sign-up, with what to set
            mail=SmtpSettings.from_config(config) if config.get("AUTHFLOW_SMTP_HOST") is not None else None,
        )


def load_config(config: MutableMapping[str, Any], *, debug: bool, testing: bool) -> AuthFlowConfig:
    """Apply defaults with ``setdefault``, refuse unknown ``AUTHFLOW_`` keys, and read every
    feature's settings (``debug`` and ``testing`` stand for ``app.debug`` and ``app.testing``)."""
    apply_defaults(config)
    return AuthFlowConfig.from_config(ChainMap({"DEBUG": debug, "TESTING": testing}, config))
