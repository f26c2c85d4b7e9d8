"""The module paths 0.8 made private, kept importable until 0.9.

0.8 made every module that is not documented API private (a leading underscore): the
names an application uses are imported from ``flask_authflow`` and its feature packages.
So that an application written against 0.7 keeps running while it moves its imports, the
old paths still import, through a finder on :data:`sys.meta_path`: the old path is the
same module object as its private one (``flask_authflow.login.password`` is
``flask_authflow.login._password``), and importing it warns once
(:class:`DeprecationWarning`) with the package to import from instead. 0.9 removes the
finder and the old paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

#: Each module or package path of 0.7 that 0.8 renamed, and its private path since; the
#: modules under a renamed package follow it (``flask_authflow.web.views.signin`` is
#: ``flask_authflow._web.views.signin``).
MOVED: dict[str, str] = {
    "flask_authflow.api_auth.service": "flask_authflow.api_auth._service",
    "flask_authflow.api_auth.settings": "flask_authflow.api_auth._settings",
    "flask_authflow.api_auth.tokens": "flask_authflow.api_auth._tokens",
    "flask_authflow.api_auth.user_tokens": "flask_authflow.api_auth._user_tokens",
    "flask_authflow.audit.chain": "flask_authflow.audit._chain",
    "flask_authflow.audit.client_ip": "flask_authflow.audit._client_ip",
    "flask_authflow.audit.context": "flask_authflow.audit._context",
    "flask_authflow.audit.settings": "flask_authflow.audit._settings",
    "flask_authflow.audit.sinks": "flask_authflow.audit._sinks",
    "flask_authflow.audit.spool": "flask_authflow.audit._spool",
    "flask_authflow.authz.entities": "flask_authflow.authz._entities",
    "flask_authflow.authz.evaluator": "flask_authflow.authz._evaluator",
    "flask_authflow.authz.policies": "flask_authflow.authz._policies",
    "flask_authflow.authz.roles": "flask_authflow.authz._roles",
    "flask_authflow.authz.settings": "flask_authflow.authz._settings",
    "flask_authflow.cli": "flask_authflow._cli",
    "flask_authflow.clock": "flask_authflow._clock",
    "flask_authflow.core": "flask_authflow._core",
    "flask_authflow.devices.cookie": "flask_authflow.devices._cookie",
    "flask_authflow.devices.labels": "flask_authflow.devices._labels",
    "flask_authflow.devices.service": "flask_authflow.devices._service",
    "flask_authflow.devices.settings": "flask_authflow.devices._settings",
    "flask_authflow.devices.user_devices": "flask_authflow.devices._user_devices",
    "flask_authflow.extras": "flask_authflow._extras",
    "flask_authflow.federation.app_federation": "flask_authflow.federation._app_federation",
    "flask_authflow.federation.ceremony": "flask_authflow.federation._ceremony",
    "flask_authflow.federation.client_auth": "flask_authflow.federation._client_auth",
    "flask_authflow.federation.dpop": "flask_authflow.federation._dpop",
    "flask_authflow.federation.errors": "flask_authflow.federation._errors",
    "flask_authflow.federation.fapi": "flask_authflow.federation._fapi",
    "flask_authflow.federation.http": "flask_authflow.federation._http",
    "flask_authflow.federation.jwks_cache": "flask_authflow.federation._jwks_cache",
    "flask_authflow.federation.linking": "flask_authflow.federation._linking",
    "flask_authflow.federation.links": "flask_authflow.federation._links",
    "flask_authflow.federation.login": "flask_authflow.federation._login",
    "flask_authflow.federation.mtls": "flask_authflow.federation._mtls",
    "flask_authflow.federation.oauth2": "flask_authflow.federation._oauth2",
    "flask_authflow.federation.par": "flask_authflow.federation._par",
    "flask_authflow.federation.presets": "flask_authflow.federation._presets",
    "flask_authflow.federation.provider": "flask_authflow.federation._provider",
    "flask_authflow.federation.provider_tokens": "flask_authflow.federation._provider_tokens",
    "flask_authflow.federation.settings": "flask_authflow.federation._settings",
    "flask_authflow.federation.ssf": "flask_authflow.federation._ssf",
    "flask_authflow.federation.tenants": "flask_authflow.federation._tenants",
    "flask_authflow.federation.tokens": "flask_authflow.federation._tokens",
    "flask_authflow.i18n": "flask_authflow._i18n",
    "flask_authflow.issuer.claims": "flask_authflow.issuer._claims",
    "flask_authflow.issuer.idp": "flask_authflow.issuer._idp",
    "flask_authflow.issuer.keys": "flask_authflow.issuer._keys",
    "flask_authflow.issuer.keystores": "flask_authflow.issuer._keystores",
    "flask_authflow.issuer.settings": "flask_authflow.issuer._settings",
    "flask_authflow.issuer.views": "flask_authflow.issuer._views",
    "flask_authflow.jose.algorithms": "flask_authflow.jose._algorithms",
    "flask_authflow.jose.jwks": "flask_authflow.jose._jwks",
    "flask_authflow.jose.keys": "flask_authflow.jose._keys",
    "flask_authflow.jose.verify": "flask_authflow.jose._verify",
    "flask_authflow.login.account_service": "flask_authflow.login._account_service",
    "flask_authflow.login.account_settings": "flask_authflow.login._account_settings",
    "flask_authflow.login.account_tokens": "flask_authflow.login._account_tokens",
    "flask_authflow.login.accounts": "flask_authflow.login._accounts",
    "flask_authflow.login.begin": "flask_authflow.login._begin",
    "flask_authflow.login.breached": "flask_authflow.login._breached",
    "flask_authflow.login.challenges": "flask_authflow.login._challenges",
    "flask_authflow.login.email_change": "flask_authflow.login._email_change",
    "flask_authflow.login.enrollment": "flask_authflow.login._enrollment",
    "flask_authflow.login.establish": "flask_authflow.login._establish",
    "flask_authflow.login.factor_service": "flask_authflow.login._factor_service",
    "flask_authflow.login.legacy_hashes": "flask_authflow.login._legacy_hashes",
    "flask_authflow.login.lockout": "flask_authflow.login._lockout",
    "flask_authflow.login.login_code": "flask_authflow.login._login_code",
    "flask_authflow.login.logout": "flask_authflow.login._logout",
    "flask_authflow.login.mfa_policy": "flask_authflow.login._mfa_policy",
    "flask_authflow.login.operation": "flask_authflow.login._operation",
    "flask_authflow.login.passkey": "flask_authflow.login._passkey",
    "flask_authflow.login.passkey_signup": "flask_authflow.login._passkey_signup",
    "flask_authflow.login.password": "flask_authflow.login._password",
    "flask_authflow.login.password_policy": "flask_authflow.login._password_policy",
    "flask_authflow.login.password_reset": "flask_authflow.login._password_reset",
    "flask_authflow.login.recovery": "flask_authflow.login._recovery",
    "flask_authflow.login.required_enrollment": "flask_authflow.login._required_enrollment",
    "flask_authflow.login.service": "flask_authflow.login._service",
    "flask_authflow.login.session_login": "flask_authflow.login._session_login",
    "flask_authflow.login.settings": "flask_authflow.login._settings",
    "flask_authflow.login.sign_in_ways": "flask_authflow.login._sign_in_ways",
    "flask_authflow.login.signup": "flask_authflow.login._signup",
    "flask_authflow.login.step_up": "flask_authflow.login._step_up",
    "flask_authflow.login.throttling": "flask_authflow.login._throttling",
    "flask_authflow.login.username_change": "flask_authflow.login._username_change",
    "flask_authflow.login.verification": "flask_authflow.login._verification",
    "flask_authflow.login.verify": "flask_authflow.login._verify",
    "flask_authflow.login.workflow": "flask_authflow.login._workflow",
    "flask_authflow.mail": "flask_authflow._mail",
    "flask_authflow.mfa.email_otp": "flask_authflow.mfa._email_otp",
    "flask_authflow.mfa.login_code": "flask_authflow.mfa._login_code",
    "flask_authflow.mfa.otp": "flask_authflow.mfa._otp",
    "flask_authflow.mfa.recovery": "flask_authflow.mfa._recovery",
    "flask_authflow.mfa.sealing": "flask_authflow.mfa._sealing",
    "flask_authflow.mfa.settings": "flask_authflow.mfa._settings",
    "flask_authflow.mfa.totp": "flask_authflow.mfa._totp",
    "flask_authflow.mfa.webauthn": "flask_authflow.mfa._webauthn",
    "flask_authflow.mfa.webauthn_record": "flask_authflow.mfa._webauthn_record",
    "flask_authflow.outcomes": "flask_authflow._outcomes",
    "flask_authflow.responses": "flask_authflow._responses",
    "flask_authflow.sessions.interface": "flask_authflow.sessions._interface",
    "flask_authflow.sessions.service": "flask_authflow.sessions._service",
    "flask_authflow.sessions.settings": "flask_authflow.sessions._settings",
    "flask_authflow.sessions.stores": "flask_authflow.sessions._stores",
    "flask_authflow.settings": "flask_authflow._settings",
    "flask_authflow.storage.memory": "flask_authflow.storage._memory",
    "flask_authflow.storage.redis_sessions": "flask_authflow.storage._redis_sessions",
    "flask_authflow.storage.sql": "flask_authflow.storage._sql",
    "flask_authflow.testing.fixture": "flask_authflow.testing._fixture",
    "flask_authflow.testing.provider": "flask_authflow.testing._provider",
    "flask_authflow.testing.pytest_plugin": "flask_authflow.testing._pytest_plugin",
    "flask_authflow.testing.users": "flask_authflow.testing._users",
    "flask_authflow.testing.wiring": "flask_authflow.testing._wiring",
    "flask_authflow.throttle": "flask_authflow._throttle",
    "flask_authflow.web": "flask_authflow._web",
}


def private_path(old: str) -> str | None:
    """The private path of the 0.7 module path ``old``, or ``None`` if it was not moved."""
    parts = old.split(".")
    for end in range(len(parts), 1, -1):
        moved = MOVED.get(".".join(parts[:end]))
        if moved is not None:
            return ".".join([moved, *parts[end:]])
    return None


def public_home(old: str) -> str:
    """The documented package an application imports the names of ``old`` from: its
    feature package if that stayed public, else the facade (``web``, ``core``...)."""
    feature = ".".join(old.split(".")[:2])
    return "flask_authflow" if feature in MOVED else feature


class _MovedPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and hands out the private module it became."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        private = private_path(fullname)
        if private is None or importlib.util.find_spec(private) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, loader_state=private)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        private: str = spec.loader_state
        warnings.warn(
            f"{spec.name} is private since 0.8 (it is {private} now) and the old path "
            f"goes in 0.9: import its documented names from {public_home(spec.name)}",
            DeprecationWarning,
            stacklevel=2,  # the import system's own frames are skipped: this is the importer
        )
        module = importlib.import_module(private)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system gave the private module the old path's spec: give its own back
        alias = module.__spec__
        if alias is not None:
            module.__spec__ = self._specs.pop(alias.name)


def install() -> None:
    """Put the finder first on :data:`sys.meta_path` (once), before the path finder that
    would otherwise load a second copy of a module whose file kept its name."""
    if not any(isinstance(finder, _MovedPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedPaths())
