"""The ways an account signs in, and the rule that the last one stays.

An account signs in with its password, a passkey (a WebAuthn credential that may log in
alone) or a linked provider identity. A passkey-only account has no password; a federated
one may have neither password nor passkey. Removing a passkey that would leave none of the
three is refused with :class:`LastSignInWay` (409, ``last_sign_in_method``), as unlinking
the last provider is.

**Race-safe**: the check runs inside the removal's unit of work, after the delete and under
the user's row lock (:meth:`~flask_authflow._core.ports.FactorRecordStore.lock_user`: a
``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite's and the memory store's units hold their
lock already). Of two parallel removals of an account's last two passkeys, the second sees
the first's delete and rolls back its own: one wins, one is refused.
"""

from __future__ import annotations

from flask_authflow._core.ports import FactorConfig
from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow._outcomes import FactorKind
from flask_authflow.errors import AuthnError, StepUpNeeded, UserNotFound
from flask_authflow.login._operation import LoginServices, guard_store

__all__ = ["LastSignInWay", "PasswordAlreadySet", "check_fresh", "has_way_in", "hold_user", "is_way_in"]


class LastSignInWay(AuthnError):
    """This is your last way to sign in: set a password or add a passkey first."""

    code = "last_sign_in_method"
    status = 409


def is_way_in(config: FactorConfig) -> bool:
    """The factor signs in alone: a confirmed passkey."""
    return config.kind is FactorKind.WEBAUTHN and config.confirmed and config.data.get("passkey") is True


class PasswordAlreadySet(AuthnError):
    """Your account has a password already: change it with your current password."""

    code = "password_exists"
    status = 409


def has_way_in(svc: LoginServices, tenant: str, user_id: str, *, without: str | None = None) -> bool:
    """The user can sign in (the factor ``without`` left aside): a password, a confirmed
    passkey, or a linked provider identity (``svc.linked_identities``, wired by ``init_app``
    when federation is on)."""
    if guard_store(lambda: svc.store.get_password_hash(tenant, user_id)) is not None:
        return True
    factors = guard_store(lambda: svc.store.list_factors(tenant, user_id))
    if any(is_way_in(f) and f.factor_id != without for f in factors):
        return True
    linked = svc.linked_identities
    return linked is not None and guard_store(lambda: linked(tenant, user_id))


def hold_user(svc: LoginServices, tenant: str, user_id: str) -> None:
    """Lock the user's row for the rest of the open unit of work (see the module's text).

    :raises UserNotFound: the user is gone."""
    if not guard_store(lambda: svc.store.lock_user(tenant, user_id)):
        raise UserNotFound()


def check_fresh(svc: LoginServices, session: AuthSession, action: str) -> tuple[str, str]:
    """The (tenant, user id) of an Authenticated session whose sign-in is within the
    service's ``freshness`` (a passkey-only user adds a password this way: there is no old
    password to ask for).

    :raises StepUpNeeded: not authenticated, or the sign-in is older."""
    record = session.record
    if record.state is not AuthState.AUTHENTICATED or record.tenant is None or record.user_id is None:
        raise StepUpNeeded(f"{action} needs an authenticated session")
    now = svc.clock.now()
    if record.authenticated_at is None or now - record.authenticated_at > svc.freshness:
        raise StepUpNeeded(f"{action} needs a fresh authentication: verify your identity again")
    return record.tenant, record.user_id
