"""Sign-up with a passkey and an address, no password (``AUTHFLOW_REGISTRATION_PASSKEY``).

Two steps, as a WebAuthn registration has:

1. :func:`begin_passkey_signup` checks the identifier and the address as the password
   sign-up does (:mod:`~flask_authflow.login._signup`: syntax, reserved ``:``, an ``@`` only
   for one's own address) and answers creation options for a **discoverable credential
   with user verification**; the session keeps the challenge, the identifier, the address
   and a fresh random user handle (the account has no user id yet). Nothing is stored.
2. :func:`finish_passkey_signup` checks the attestation against that challenge (single
   use: the slot is emptied whatever the answer), then, in **one unit of work**, creates
   the account without a password, stores the passkey confirmed, issues the verification
   token, writes the audit row and hands the mail to ``deliver``: a failure at any write
   (or of the mail) leaves no account, and the same answer can be tried again with a new
   ceremony.

The address is verified as every sign-up's is: until its link is followed, a passkey
sign-in is answered ``EmailNotVerified``. **No enumeration**: an address that has an
account answers exactly as a new one (its owner gets the "someone tried to create an
account" notice, and nothing is stored; the new credential stays unused on the
authenticator). A taken identifier is refused (``UserExists``), as in the password sign-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from flask_authflow._core.factors import Rejected
from flask_authflow._core.identifiers import check_tenant, normalise_identifier
from flask_authflow._core.ports import FactorConfig
from flask_authflow._core.session import AuthSession, SessionRecord, begin_flow, clear_flow
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import (
    AuthFlowError,
    EnrollmentError,
    FactorNotRegistered,
    InvalidInput,
    MailDeliveryError,
    StoreUnavailable,
)
from flask_authflow.login import _signup as signup
from flask_authflow.login._accounts import AccountAdmin
from flask_authflow.login._operation import LoginServices, Operation, guard_store

__all__ = ["SLOT", "PasskeyRegistrar", "begin_passkey_signup", "finish_passkey_signup"]

#: Slot of the session flow holding a passkey sign-up.
SLOT = "passkey_signup"


@runtime_checkable
class PasskeyRegistrar(Protocol):
    """What a WebAuthn factor offers a passkey sign-up (``WebAuthnFactor`` has both)."""

    def signup_options(
        self, account_name: str, now: datetime
    ) -> tuple[Mapping[str, Any], dict[str, Any]]: ...

    def signup_credential(
        self, slot: Mapping[str, Any], credential: FactorCredential, user_id: str, now: datetime
    ) -> FactorConfig | Rejected: ...

    def check_input(self, credential: FactorCredential) -> None: ...


def _registrar(svc: LoginServices) -> PasskeyRegistrar:
    factor = svc.factor(FactorKind.WEBAUTHN)
    if not isinstance(factor, PasskeyRegistrar):
        raise FactorNotRegistered("passkey sign-up needs the WebAuthn factor (AUTHFLOW_WEBAUTHN_RP_ID)")
    return factor


def _forget(r: SessionRecord) -> SessionRecord:
    rest = {k: v for k, v in (r.flow or {}).items() if k != SLOT}
    return begin_flow(r, rest) if rest else clear_flow(r)


def begin_passkey_signup(
    svc: LoginServices,
    ctx: AuditContext,
    session: AuthSession,
    tenant: str,
    identifier: object,
    email: object,
) -> Mapping[str, Any]:
    """Creation options for the passkey of a new account (see the module's text).

    :raises InvalidInput: a malformed or reserved identifier, not an address.
    :raises IdentifierNotOwnAddress: the identifier has an ``@`` and is not the address."""
    op = Operation(svc, ctx, session, "signup", factor=FactorKind.WEBAUTHN.value)
    try:
        tenant = check_tenant(tenant)
        registrar = _registrar(svc)
        if not isinstance(identifier, str):
            raise InvalidInput("the username must be a string")
        name, address = normalise_identifier(identifier), signup.check_address(email)
        signup.check_identifier(name, address)
    except AuthFlowError as exc:
        op.refuse(exc, "refused", tenant=None)
        raise
    options, slot = registrar.signup_options(name, op.now)
    kept = {**slot, "tenant": tenant, "identifier": name, "email": address}
    session.transition(lambda r: begin_flow(r, {**(r.flow or {}), SLOT: kept}))
    return options


def finish_passkey_signup(
    svc: LoginServices,
    admin: AccountAdmin,
    ctx: AuditContext,
    session: AuthSession,
    credential: FactorCredential,
    *,
    ttl: timedelta = signup.DEFAULT_VERIFICATION_TTL,
    deliver: signup.Deliver | None = None,
) -> signup.SignupRequest:
    """Create the account with its passkey from the browser's attestation, in one unit of
    work with its verification token, audit row, the application's ``user_created`` rows
    and (before the commit) the mail (see the module's text).

    :raises EnrollmentError: no sign-up was begun on this session, it expired, or the
        attestation was refused (start again). :raises UserExists: the identifier is taken.
    :raises MailDeliveryError: the mail could not be sent (nothing is kept)."""
    slot = (session.record.flow or {}).get(SLOT)
    registrar = _registrar(svc)
    registrar.check_input(credential)
    session.transition(_forget)  # the challenge is used up whatever the answer (a refusal too)
    op = Operation(svc, ctx, session, "signup", factor=FactorKind.WEBAUTHN.value)
    if not isinstance(slot, Mapping) or not all(
        isinstance(slot.get(k), str) for k in ("tenant", "identifier", "email")
    ):
        error = EnrollmentError("no passkey sign-up was started on this session: start again")
        op.refuse(error, "refused", "no_challenge", tenant=None)
        raise error
    tenant, name, address = str(slot["tenant"]), str(slot["identifier"]), str(slot["email"])
    record = registrar.signup_credential(slot, credential, "", op.now)
    if isinstance(record, Rejected):
        error = EnrollmentError("the passkey could not be registered: start again")
        op.refuse(error, "refused", record.code, tenant=tenant, identifier=name)
        raise error
    owner = guard_store(lambda: svc.store.find_user_by_email(tenant, address))
    if owner is not None:
        return signup.notice(svc, ctx, session, owner, None, ttl, deliver)
    return _create(svc, admin, ctx, session, (tenant, name, address), record, ttl, deliver)


def _create(
    svc: LoginServices,
    admin: AccountAdmin,
    ctx: AuditContext,
    session: AuthSession,
    who: tuple[str, str, str],
    record: FactorConfig,
    ttl: timedelta,
    deliver: signup.Deliver | None,
) -> signup.SignupRequest:
    """The account, its passkey, its token, its row and its mail: all in one unit, or nothing."""
    tenant, name, address = who
    owned = admin.app_users.owned() if admin.app_users is not None else nullcontext()
    fields: dict[str, Any] = {"factor": FactorKind.WEBAUTHN.value}
    with owned, Operation(svc, ctx, session, "signup", refuse_on=(MailDeliveryError,), **fields) as op:
        op.unit()
        try:
            user = admin.create_user(tenant, name, None, email=address, source="signup")
            try:
                guard_store(lambda: svc.store.add_factor(tenant, replace(record, user_id=user.user_id)))
            except ValueError:  # this credential is registered already (another account's)
                raise EnrollmentError("the passkey could not be registered: start again") from None
        except AuthFlowError as exc:
            if isinstance(exc, StoreUnavailable):
                raise
            op.refuse(exc, "refused", tenant=None, identifier=None)
            raise
        found = signup.issue(op, user, ttl, "signup")
        signup.deliver_last(op, found, deliver)
    return found
