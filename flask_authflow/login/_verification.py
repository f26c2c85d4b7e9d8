"""Whether a signed-up account confirmed its address: the gate the login's password step
asks (kept apart from the sign-up flow, which builds on account administration, so that
the login steps need nothing of it)."""

from __future__ import annotations

from flask_authflow._core.ports import UserRecord
from flask_authflow.errors import AuthnError
from flask_authflow.login._operation import LoginServices, guard_store

__all__ = [
    "CODE_ATTEMPTS",
    "KIND",
    "UNVERIFIED_KEY",
    "EmailNotVerified",
    "needs_verification",
    "refuse_unverified",
]

#: The account-token kind of a sign-up's verification link.
KIND = "signup"
#: Wrong short codes against one verification token before it is void. Strangers who know
#: the username are throttled first (``code.*`` limits: 10 a day per (account, network)), so
#: reaching this cap takes ten networks in a day; a guesser's chance stays 100 / 2**40
#: (about 9e-11) per mailed token.
CODE_ATTEMPTS = 100
#: The login flow's mark, set by ``begin_login`` from the row it read anyway, that the
#: account's address is not verified: only then does the password step read the store again
#: to ask whether the account is a sign-up waiting for its confirmation.
UNVERIFIED_KEY = "unverified_address"


class EmailNotVerified(AuthnError):
    """Confirm your e-mail address first: follow the link we sent, or ask for a new one."""

    code = "email_not_verified"
    status = 403


def needs_verification(svc: LoginServices, user: UserRecord) -> bool:
    """Whether ``user`` signed up and has not confirmed the address yet."""
    if user.email is None or user.email_verified_at is not None:
        return False
    store = svc.account_tokens
    if store is None:  # an application's own backend without account tokens (so no sign-up)
        return False
    return bool(guard_store(lambda: store.has_account_token(user.tenant, user.user_id, KIND)))


def refuse_unverified(svc: LoginServices, tenant: str, user_id: str) -> None:
    """Raise :class:`EmailNotVerified` when the user signed up and is not verified yet
    (the login calls it once the password passed)."""
    user = guard_store(lambda: svc.store.get_user(tenant, user_id))
    if user is not None and needs_verification(svc, user):
        raise EmailNotVerified()
