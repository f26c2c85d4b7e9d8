"""Usernameless login with a passkey: ``begin_passkey_login`` and ``finish_passkey_login``.

The credential names its user; its check is reserved and counted by the lockout policy
like a password, and a success logs the user in through ``establish`` (method
``passkey``, every factor proved at once).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask_authflow._core.factors import (
    Accepted,
    FactorCheck,
    FactorContext,
    PasskeyFactor,
    Rejected,
    RejectReason,
)
from flask_authflow._core.identifiers import check_tenant
from flask_authflow._core.ports import FactorConfig, UserRecord
from flask_authflow._core.session import (
    AuthSession,
    AuthState,
    SessionRecord,
    begin_flow,
    clear_flow,
    reset_to_guest,
)
from flask_authflow._outcomes import (
    FactorCredential,
    FactorKind,
    FactorOutcome,
    InvalidCredential,
    Locked,
)
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import FactorNotRegistered, InvalidInput, PermissionDenied
from flask_authflow.login._establish import Establish, establish
from flask_authflow.login._operation import LoginServices, Operation, guard_store, new_transaction
from flask_authflow.login._throttling import refuse_if_throttled
from flask_authflow.login._verification import EmailNotVerified, needs_verification

__all__ = ["begin_passkey_login", "finish_passkey_login"]

#: Slot of the session flow holding a passkey login's challenge.
_PASSKEY_SLOT = "passkey"
_WEBAUTHN = FactorKind.WEBAUTHN.value


def _passkey_factor(svc: LoginServices, tenant: str) -> PasskeyFactor:
    factor = svc.factor(FactorKind.WEBAUTHN)
    if not isinstance(factor, PasskeyFactor):
        raise FactorNotRegistered("passkey login needs the WebAuthn factor (AUTHFLOW_WEBAUTHN_RP_ID)")
    if not svc.passkey_login_allowed(tenant):
        raise PermissionDenied(f"passkey login is not enabled for tenant {tenant!r} (AUTHFLOW_PASSKEY_LOGIN)")
    return factor


def begin_passkey_login(svc: LoginServices, tenant: str, session: AuthSession) -> Mapping[str, Any]:
    """The WebAuthn request options of a passkey login (see ``AuthnRequest.begin_passkey_login``)."""
    now = svc.clock.now()
    tenant = check_tenant(tenant)
    factor = _passkey_factor(svc, tenant)
    if session.state is AuthState.AUTHENTICATING:
        session.transition(lambda r: reset_to_guest(r, now=now))
    ctx = FactorContext(
        tenant=tenant, user_id="", now=now, store=svc.store, factors=(),
        flow={}, transaction=new_transaction(), purpose="passkey",
    )  # fmt: skip
    options = factor.passkey_challenge(ctx)
    slot = {"tenant": tenant, **(ctx.flow_update or {})}
    session.transition(lambda r: begin_flow(r, {**(r.flow or {}), _PASSKEY_SLOT: slot}))
    return options


def _forget(r: SessionRecord) -> SessionRecord:
    rest = {k: v for k, v in (r.flow or {}).items() if k != _PASSKEY_SLOT}
    return begin_flow(r, rest) if rest else clear_flow(r)


def finish_passkey_login(
    svc: LoginServices, ctx: AuditContext, credential: FactorCredential, session: AuthSession
) -> FactorOutcome:
    """Finish a passkey login (see ``AuthnRequest.finish_passkey_login``).

    :raises EmailNotVerified: the passkey is right, but its account signed up and has not
        confirmed its address yet (nothing else is said before the signature passed)."""
    slot = (session.record.flow or {}).get(_PASSKEY_SLOT)
    tenant = slot.get("tenant") if isinstance(slot, Mapping) else None
    if credential.kind is not FactorKind.WEBAUTHN:
        raise InvalidInput("a passkey login takes a WebAuthn credential")
    op = Operation(svc, ctx, session, "passkey_login", tenant=tenant, factor=_WEBAUTHN)
    refuse_if_throttled(op, svc, "login")  # before any lookup or signature check
    if not isinstance(tenant, str) or not isinstance(slot, Mapping):
        return _refused(op, "failure", "no_challenge")
    factor = _passkey_factor(svc, tenant)
    factor.check_input(credential)
    config = guard_store(lambda: factor.find_passkey(svc.store, tenant, credential))
    if config is None:
        return _refused(op, "failure", "unknown_credential")
    user = guard_store(lambda: svc.store.get_user(tenant, config.user_id))
    if user is None or user.disabled:
        return _refused(op, "failure", "disabled" if user is not None else "unknown_user", config.user_id)
    with op:
        until = op.reserve(tenant, user.identifier, _WEBAUTHN)
        if until is not None:
            op.count("login_attempts", "login_failures")
            session.transition(_forget)
            op.audit("locked", "locked", user_id=user.user_id)
            return Locked(until)
        checked = _check(op, svc, factor, config, user, credential, slot)
        lockout = svc.lockout
        if not checked:
            lockout.failure(
                tenant, user.identifier, _WEBAUTHN, op.now, ctx.client_ip, reservation=op.hand_off()
            )
            op.count("login_attempts", "login_failures")
            session.transition(_forget)
            reason = checked.code if isinstance(checked, Rejected) else "invalid"
            op.audit("failure", reason, user_id=user.user_id)
            return InvalidCredential()
        lockout.success(tenant, user.identifier, _WEBAUTHN, op.now, ctx.client_ip, reservation=op.hand_off())
    session.transition(_forget)
    if needs_verification(svc, user):  # a passkey sign-up whose address is not confirmed yet
        error = EmailNotVerified()
        refusal = Operation(svc, ctx, session, "passkey_login", tenant=tenant, factor=_WEBAUTHN)
        refusal.refuse(error, "refused", user_id=user.user_id)
        raise error
    # WorkflowPending only when the user must set up a factor first (required enrollment)
    return establish(svc, ctx, session, tenant, user.user_id, Establish("passkey", multi_factor=True))


def _check(
    op: Operation,
    svc: LoginServices,
    factor: PasskeyFactor,
    config: FactorConfig,
    user: UserRecord,
    credential: FactorCredential,
    slot: Mapping[str, Any],
) -> FactorCheck:
    """The signature, the challenge (single use), origin, RP id, user verification and counter."""
    ctx = FactorContext(
        tenant=user.tenant, user_id=user.user_id, now=op.now, store=svc.store, factors=(config,),
        flow=dict(slot), transaction="", purpose="passkey", identifier=user.identifier,
    )  # fmt: skip
    checked = guard_store(lambda: factor.verify(ctx, credential))
    if isinstance(checked, Accepted) and checked.commit is not None and not guard_store(checked.commit):
        return Rejected(RejectReason.REPLAYED)
    return checked


def _refused(op: Operation, status: str, reason: str, user_id: str | None = None) -> InvalidCredential:
    """A passkey login refused before any check: counted and audited, the challenge forgotten."""
    with op:
        op.count("login_attempts", "login_failures")
        op.session.transition(_forget)
        op.audit(status, reason, user_id=user_id)
    return InvalidCredential()
