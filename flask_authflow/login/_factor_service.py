"""``authflow.factors``: second factors, as an operator changes a user's and as the
signed-in user verifies, enrolls and removes their own, in the shape of
:mod:`flask_authflow._core.service`.

An operator's changes (:meth:`Factors.create_totp`, :meth:`Factors.create_recovery_codes`,
:meth:`Factors.revoke`) are :class:`~flask_authflow.login._accounts.AccountAdmin`'s: confirmed
at once, every session of the user ends. The signed-in user's steps run on the current
request's session with its audit context (the app wires both in), through
:class:`~flask_authflow.login._service.AuthnRequest`.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import Any

from flask_authflow._core.factors import EnrollmentStart
from flask_authflow._core.ports import FactorConfig, UserRecord
from flask_authflow._core.service import TenantScoped
from flask_authflow._core.session import AuthSession
from flask_authflow._outcomes import FactorCredential, FactorKind, FactorOutcome, FactorRequired
from flask_authflow.errors import InvalidInput, UserNotFound
from flask_authflow.login._accounts import AccountAdmin
from flask_authflow.login._service import AuthnRequest

__all__ = ["Factors", "factor_kind"]

#: The login handle and session of the current request.
Here = Callable[[], tuple[AuthnRequest, AuthSession]]


def factor_kind(kind: FactorKind | str) -> FactorKind:
    """``kind`` as a :class:`FactorKind`; :class:`InvalidInput` for an unknown one."""
    try:
        return FactorKind(kind)
    except ValueError:
        raise InvalidInput(f"unknown factor kind {kind!r}") from None


class Factors(TenantScoped):
    """A user's second factors: listed, provisioned and revoked by an operator; verified,
    enrolled and removed by the signed-in user.

    :param admin: the app's account administration (operator changes).
    :param here: the login handle and session of the current request.
    :param trust_device: asks the device feature to trust this browser after the step.
    """

    def __init__(
        self,
        admin: AccountAdmin,
        *,
        here: Here,
        trust_device: Callable[[bool], None],
        default_tenant: str,
    ) -> None:
        super().__init__(default_tenant=default_tenant)
        self.admin = admin
        self._here = here
        self._trust_device = trust_device

    def _user(self, user_id: str, tenant: str | None) -> UserRecord:
        user = self.admin.backend.get_user(self._tenant(tenant), user_id)
        if user is None:
            raise UserNotFound()
        return user

    # --- an operator's view of a user's factors ----------------------------------------------

    def list(
        self, user_id: str, *, tenant: str | None = None, include_pending: bool = False
    ) -> list[FactorConfig]:
        """The user's confirmed factors, password included, oldest first; with
        ``include_pending`` also enrollments waiting for their proof. Show a
        :class:`FactorConfig`'s other fields, never its ``secret``.
        :raises ~flask_authflow.errors.UserNotFound: no such user."""
        user = self._user(user_id, tenant)
        return self.admin.list_factors(user.tenant, user.identifier, include_pending=include_pending)

    def get(self, user_id: str, factor_id: str, *, tenant: str | None = None) -> FactorConfig | None:
        """The user's factor ``factor_id`` (confirmed or pending), or ``None``."""
        found = self.list(user_id, tenant=tenant, include_pending=True)
        return next((factor for factor in found if factor.factor_id == factor_id), None)

    def create_totp(self, user_id: str, *, tenant: str | None = None) -> str:
        """Provision a new TOTP key for the user, confirmed at once (it replaces the
        earlier one), and return its ``otpauth://`` URI: hand it over a channel you trust.
        Every session of the user ends."""
        user = self._user(user_id, tenant)
        return self.admin.enroll_totp(user.tenant, user.identifier)

    def create_recovery_codes(self, user_id: str, *, tenant: str | None = None) -> builtins.list[str]:
        """Issue a new set of recovery codes (the previous set stops working) and return
        them: only digests are kept. Every session of the user ends."""
        user = self._user(user_id, tenant)
        return self.admin.regenerate_recovery_codes(user.tenant, user.identifier)

    def revoke(self, user_id: str, factor_id: str, *, tenant: str | None = None) -> bool:
        """Remove one of the user's factors and end every session of the user; false, and
        nothing changes, for an unknown factor or the password."""
        user = self._user(user_id, tenant)
        return self.admin.disable_factor(user.tenant, user.identifier, factor_id)

    # --- the signed-in user's steps (in a request) -------------------------------------------

    def verify(
        self, kind: FactorKind | str, secret: str | bytes, *, trust_device: bool = False
    ) -> FactorOutcome:
        """Present the credential of ``kind`` for the current session's pending step: a
        code (TOTP, HOTP, e-mail, recovery code) or WebAuthn's response JSON. With
        ``trust_device``, a sign-in this step completes trusts the browser's device for
        ``AUTHFLOW_DEVICE_TRUST_DURATION`` (see :doc:`/devices`).
        :raises ~flask_authflow.errors.InvalidInput: an unknown kind or a malformed credential."""
        self._trust_device(trust_device is True)
        handle, session = self._here()
        with FactorCredential(factor_kind(kind), secret) as credential:
            return handle.verify_factor(credential, session)

    def challenge(self, kind: FactorKind | str) -> FactorRequired:
        """(Re)issue the challenge of ``kind`` for the pending step ("e-mail me a code")."""
        handle, session = self._here()
        return handle.challenge(factor_kind(kind), session)

    def begin_enrollment(
        self, kind: FactorKind | str, params: Mapping[str, Any] | None = None
    ) -> EnrollmentStart:
        """Start adding a factor for the signed-in user (a fresh login is required)."""
        handle, session = self._here()
        return handle.begin_enrollment(session, factor_kind(kind), params)

    def confirm_enrollment(self, kind: FactorKind | str, factor_id: str, secret: str | bytes) -> FactorConfig:
        """Finish an enrollment with its proof (a code, WebAuthn's attestation JSON); the
        user's other sessions end."""
        handle, session = self._here()
        checked = factor_kind(kind)
        with FactorCredential(checked, secret) as credential:
            return handle.confirm_enrollment(session, checked, factor_id, credential)

    def list_current(self) -> builtins.list[FactorConfig]:
        """The signed-in user's confirmed factors."""
        handle, session = self._here()
        return handle.user_factors(session)

    def revoke_current(self, factor_id: str) -> bool:
        """Remove one of the signed-in user's factors (fresh login required; the user's
        other sessions end)."""
        handle, session = self._here()
        return handle.disable_factor(session, factor_id)
