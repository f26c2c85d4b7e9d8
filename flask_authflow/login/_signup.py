"""Sign-up (``AUTHFLOW_REGISTRATION``): an identifier, an e-mail address and a password make
an unverified account and a verification mail (a link and a short code).

* The address is checked with ``email-validator`` (syntax only: no DNS lookup in a
  request), the password with the policy, the identifier as every identifier is; an
  identifier with a ``:`` is refused, since ``<provider>:<subject>`` names federated
  accounts.
* **An identifier with an ``@`` must be the account's own address.** Anything else is
  refused with :class:`IdentifierNotOwnAddress` (400, ``identifier_not_own_address``):
  a username that is someone else's address would pass for that person's account
  wherever people read usernames as addresses. Nothing is looked up, so the refusal
  tells nothing about other accounts.
* **No enumeration of addresses.** An address that already has an account answers
  exactly as a new one: the same checks, the same password hash, a token made the same
  way; instead of a verification mail its owner gets a notice ("someone tried to create
  an account with your address"). A taken identifier with a new address is refused with
  :class:`~flask_authflow.errors.UserExists` (identifiers are what people sign in with;
  an application that keeps them secret asks only for an address).
* The account is created through
  :meth:`~flask_authflow.login._accounts.AccountAdmin.create_user` with ``source="signup"``,
  so the application's ``user_created`` hook makes its own row in the same transaction.
* **One transaction** (the manual's Security page, "Transactions"): the account, the hook's rows, the
  verification token and the audit row commit once; the mail (given as ``deliver``) is sent
  after every write and before that commit, so a failing mail sender keeps nothing (503)
  and the retry works. The verification uses its token, marks the address and writes its
  row in one unit too (a failure leaves the link usable); the resend commits its token and
  row once, its mail going out after the answer.
* Until the address is verified, a correct password is answered
  :class:`EmailNotVerified` (403, after the password step, so it tells nothing to someone
  without the password); :func:`resend_verification` mails a new link, and answers the
  same for every input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from flask_authflow._core.identifiers import check_tenant, normalise_email, normalise_identifier
from flask_authflow._core.ports import UserRecord
from flask_authflow._core.session import AuthSession
from flask_authflow._i18n import N_
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import (
    AuthFlowError,
    ConfigurationError,
    InvalidInput,
    MailDeliveryError,
    StoreUnavailable,
)
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login._account_tokens import AccountTokenInvalid, IssuedToken
from flask_authflow.login._accounts import AccountAdmin
from flask_authflow.login._operation import LoginServices, Operation, guard_store
from flask_authflow.login._password_policy import PasswordPolicy
from flask_authflow.login._verification import (
    CODE_ATTEMPTS,
    KIND,
    EmailNotVerified,
    needs_verification,
    refuse_unverified,
)

__all__ = [
    "DEFAULT_VERIFICATION_TTL",
    "KIND",
    "EmailNotVerified",
    "IdentifierNotOwnAddress",
    "SignupRequest",
    "check_address",
    "check_identifier",
    "deliver_last",
    "issue",
    "needs_verification",
    "notice",
    "refuse_unverified",
    "resend_verification",
    "signup",
    "verify_signup",
]

#: How long a verification link works.
DEFAULT_VERIFICATION_TTL = timedelta(hours=24)
_RESERVED = re.compile(r"^[^:]*:")


class IdentifierNotOwnAddress(InvalidInput):
    """A username with an @ must be the address you sign up with, or have no @ at all."""

    code = "identifier_not_own_address"
    status = 400


@dataclass(frozen=True, slots=True)
class SignupRequest:
    """What a sign-up made: the mail to compose (``mail`` is ``"verify"`` with a link and a
    code, ``"notice"`` for the owner of an address that has an account, ``None``: nothing
    to send) and where it goes."""

    issued: IssuedToken
    to: str | None
    mail: Literal["verify", "notice"] | None
    identifier: str

    def __repr__(self) -> str:
        return f"<SignupRequest mail={self.mail}>"


def check_address(value: object) -> str:
    """A deliverable-looking address, normalised; :class:`InvalidInput` otherwise
    (``email-validator``'s syntax check, the ``accounts`` extra)."""
    try:
        from email_validator import EmailNotValidError, validate_email
    except ImportError:  # pragma: no cover - the extra is in dev
        raise ConfigurationError(
            "sign-up needs the 'email-validator' package: pip install 'flask-authflow[accounts]'"
        ) from None
    if not isinstance(value, str) or len(value) > 254:
        raise InvalidInput(N_("not an e-mail address"))
    try:
        checked = validate_email(value, check_deliverability=False)
    except EmailNotValidError:
        raise InvalidInput(N_("not an e-mail address")) from None
    return normalise_email(str(checked.normalized))


def _check_identifier(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput("the username must be a string")
    identifier = normalise_identifier(value)
    if _RESERVED.match(identifier):
        raise InvalidInput(N_("a username may not contain ':' (reserved for accounts of providers)"))
    return identifier


def check_identifier(identifier: str, address: str) -> None:
    """Refuse a normalised ``identifier`` that sign-up does not take with ``address``: one
    with a ``:`` (:class:`InvalidInput`), or with an ``@`` that is not the address
    (:class:`IdentifierNotOwnAddress`)."""
    _check_own_address(_check_identifier(identifier), address)


def _check_own_address(identifier: str, address: str) -> None:
    """:class:`IdentifierNotOwnAddress` when ``identifier`` (normalised) has an ``@`` and
    is not ``address`` as an identifier reads it."""
    if "@" in identifier and identifier != normalise_identifier(address):
        raise IdentifierNotOwnAddress()


#: Delivers a sign-up's mail inside its transaction (a failure undoes the sign-up).
Deliver = Callable[[SignupRequest], None]


def signup(
    svc: LoginServices,
    admin: AccountAdmin,
    ctx: AuditContext,
    session: AuthSession,
    tenant: str,
    identifier: object,
    email: object,
    password: object,
    *,
    policy: PasswordPolicy | None = None,
    ttl: timedelta = DEFAULT_VERIFICATION_TTL,
    deliver: Deliver | None = None,
) -> SignupRequest:
    """Create an unverified account and its verification token (see the module's text), in
    ONE transaction with its audit row and the application's ``user_created`` rows. When
    ``deliver`` is given it sends the mail before that commit: if it fails, nothing is kept
    (:class:`~flask_authflow.errors.MailDeliveryError`, 503) and the same request can be
    sent again.

    :raises InvalidInput: a malformed or reserved identifier, not an address, no password.
    :raises IdentifierNotOwnAddress: the identifier has an ``@`` and is not the address.
    :raises WeakPassword: the policy refused the password. :raises UserExists: the
        identifier is taken (by an account with another address)."""
    op = Operation(svc, ctx, session, "signup")
    try:
        tenant = check_tenant(tenant)
        name, address = _check_identifier(identifier), check_address(email)
        _check_own_address(name, address)
        if not isinstance(password, str) or not password:
            raise InvalidInput("the password must be a non-empty string")
        if policy is not None:
            policy.check(password, username=name, tenant=tenant, has_second_factor=False)
        owner = guard_store(lambda: svc.store.find_user_by_email(tenant, address))
    except AuthFlowError as exc:
        op.refuse(exc, "refused", tenant=None, identifier=None)
        raise
    if owner is not None:
        return notice(svc, ctx, session, owner, password, ttl, deliver)
    owned = admin.app_users.owned() if admin.app_users is not None else nullcontext()
    with owned, Operation(svc, ctx, session, "signup", refuse_on=(MailDeliveryError,)) as op:
        op.unit()
        try:
            user = admin.create_user(tenant, name, password, email=address, source="signup")
        except AuthFlowError as exc:
            if isinstance(exc, StoreUnavailable):
                raise
            op.refuse(exc, "refused", tenant=None, identifier=None)
            raise
        found = issue(op, user, ttl, "signup")
        deliver_last(op, found, deliver)
    return found


def notice(
    svc: LoginServices,
    ctx: AuditContext,
    session: AuthSession,
    owner: UserRecord,
    password: str | None,
    ttl: timedelta,
    deliver: Deliver | None,
) -> SignupRequest:
    """The address has an account: the same work as a new one, and a notice to its owner
    (``password``: the one the sign-up gave, hashed as the new account's would be; ``None``
    for a passkey sign-up)."""
    if password is not None:
        svc.hasher.hash(password)  # the new account's hash costs this much
    store = account_tokens.token_store(svc.account_tokens)
    fields: dict[str, Any] = {"tenant": owner.tenant, "user_id": owner.user_id}
    with Operation(svc, ctx, session, "signup", refuse_on=(MailDeliveryError,), **fields) as op:
        issued = account_tokens.issue(
            store, kind=KIND, tenant=owner.tenant, user_id=owner.user_id, now=op.now, ttl=ttl, persist=False
        )
        op.audit("refused", "address_taken")
        found = SignupRequest(issued, owner.email, "notice", owner.identifier)
        deliver_last(op, found, deliver)
    return found


def deliver_last(op: Operation, found: SignupRequest, deliver: Deliver | None) -> None:
    """Write the step's audit rows now (in its unit), then send the mail: the mail is the
    last thing before the commit, so only a failing commit can leave a mailed link that
    does not work (and the retry mails a new one)."""
    if deliver is None:
        return
    op.write_rows_now()
    deliver(found)


def issue(op: Operation, user: UserRecord, ttl: timedelta, event: str) -> SignupRequest:
    """Issue the verification token of ``user`` (voiding an earlier one) in ``op``'s unit."""
    store = account_tokens.token_store(op.svc.account_tokens)
    issued = account_tokens.issue(
        store, kind=KIND, tenant=user.tenant, user_id=user.user_id, now=op.now, ttl=ttl
    )
    op.audit("sent", tenant=user.tenant, user_id=user.user_id, identifier=user.identifier)
    if event == "signup":
        op.signal("user_registered", user_id=user.user_id, tenant=user.tenant)
    return SignupRequest(issued, user.email, "verify", user.identifier)


def verify_signup(
    svc: LoginServices,
    ctx: AuditContext,
    session: AuthSession,
    token: object = None,
    *,
    tenant: str | None = None,
    identifier: object = None,
    code: object = None,
) -> UserRecord:
    """Confirm the address of a sign-up with its link's ``token``, or with ``identifier``
    and the short ``code``. The account may sign in from now on (nobody is logged in).

    One transaction: the token is used, the address marked verified and the row audited
    together, or none of it (a failed write leaves the link usable). A refused attempt
    commits its own refusal row with what it counts (a wrong code's attempt).

    :raises InvalidInput, AccountTokenInvalid, AccountTokenUsed, AccountTokenExpired:
        the token or code cannot be used (see :mod:`~flask_authflow.login._account_tokens`)."""
    store = account_tokens.token_store(svc.account_tokens)
    refused: AuthFlowError | None = None
    done: UserRecord | None = None
    with Operation(svc, ctx, session, "email_confirmed") as op:
        op.unit()
        try:
            used = _use(svc, store, token, (tenant, ctx.client_ip), identifier, code, op.now)
            user = guard_store(lambda: svc.store.get_user(used.tenant, used.user_id))
            if user is None or user.email is None:
                raise AccountTokenInvalid()
        except AuthFlowError as exc:
            if isinstance(exc, StoreUnavailable):
                raise
            refused = exc
            op.audit("refused", exc.code)
        else:
            guard_store(
                lambda: svc.store.set_email(user.tenant, user.user_id, user.email, verified_at=op.now)
            )
            op.audit("success", tenant=user.tenant, user_id=user.user_id, identifier=user.identifier)
            op.signal("email_confirmed", user_id=user.user_id, tenant=user.tenant)
            done = user
    if done is None:
        assert refused is not None
        raise refused
    account = done
    confirmed = guard_store(lambda: svc.store.get_user(account.tenant, account.user_id))
    return confirmed if confirmed is not None else account


def _use(
    svc: LoginServices,
    store: Any,
    token: object,
    where: tuple[str | None, str | None],
    identifier: object,
    code: object,
    now: datetime,
) -> Any:
    """Use the sign-up token by its link or by identifier and code (``where``: the tenant
    and the client's address). A code attempt is counted against the address, its network
    and the (account, network) pair before anything is looked up, so a stranger's wrong
    codes are throttled long before they could void the newcomer's link."""
    tenant, address = where
    if token is not None:
        return account_tokens.use_token(store, token, KIND, now)
    if tenant is None or not isinstance(identifier, str):
        raise InvalidInput(N_("give the link's token, or the username and the code"))
    ident = normalise_identifier(identifier)
    svc.throttle.code_attempt(tenant, ident, address)
    user = guard_store(lambda: svc.store.find_user(tenant, ident))
    if user is None:
        account_tokens.check_code(code)
        raise AccountTokenInvalid()
    return account_tokens.use_code(
        store, user.tenant, user.user_id, KIND, code, now, max_attempts=CODE_ATTEMPTS
    )


def resend_verification(
    svc: LoginServices,
    ctx: AuditContext,
    session: AuthSession,
    tenant: str,
    *,
    identifier: object = None,
    email: object = None,
    ttl: timedelta = DEFAULT_VERIFICATION_TTL,
) -> SignupRequest:
    """Mail a new verification link to a sign-up that is not verified yet (voiding the
    older one); for anything else a request whose ``to`` is ``None`` (compose the mail
    anyway, send nothing). Answer every caller the same way, after the same work: the same
    reads, a token made and an audit row committed in one unit of work (only the pending
    sign-up's token is stored).

    :raises InvalidInput: neither or both given, or not the shape of one."""
    tenant = check_tenant(tenant)
    if (identifier is None) == (email is None):
        raise InvalidInput(N_("give a username or an e-mail address"))
    if identifier is not None:
        name = _check_identifier(identifier)
        user = guard_store(lambda: svc.store.find_user(tenant, name))
    else:
        address = normalise_email(email) if isinstance(email, str) else ""
        if not address:
            raise InvalidInput(N_("not an e-mail address"))
        user = guard_store(lambda: svc.store.find_user_by_email(tenant, address))
    if user is None or user.disabled or not needs_verification(svc, user):
        return _not_pending(svc, ctx, session, tenant, ttl)
    with Operation(svc, ctx, session, "signup_resent", tenant=user.tenant, user_id=user.user_id) as op:
        op.unit()
        found = issue(op, user, ttl, "signup_resent")
    return found


def _not_pending(
    svc: LoginServices, ctx: AuditContext, session: AuthSession, tenant: str, ttl: timedelta
) -> SignupRequest:
    """A resend for anything but a pending sign-up: the same work, with nothing stored but the audit row."""
    store = account_tokens.token_store(svc.account_tokens)
    with Operation(svc, ctx, session, "signup_resent", tenant=tenant) as op:
        op.unit()
        issued = account_tokens.issue(
            store, kind=KIND, tenant=tenant, user_id="", now=op.now, ttl=ttl, persist=False
        )
        op.audit("skipped", "not_pending")
    return SignupRequest(issued, None, "verify", "")
