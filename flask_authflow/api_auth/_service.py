"""Personal API tokens: created, listed, revoked and verified, every change audited.

:class:`ApiTokenService` runs on a :class:`~flask_authflow._core.ports.ApiTokenStore` and
the identity store (a token of a deleted or disabled user is refused). It writes one audit
row per creation (``api_token_created``), revocation (``api_token_revoked``, or
``api_tokens_revoked`` for all of a user's tokens at once) and refused use
(``api_token_refused``, the reason in ``reason``); a row names the token by its public
lookup id, never by its value.

**One transaction per change.** Given the store's ``begin_unit`` (as ``init_app`` wires
it), a creation or a revocation writes its token row and its audit row in one unit of
work: if either fails, neither is kept (:class:`~flask_authflow.errors.StoreUnavailable`,
503) and the same request can be sent again. Refused uses are audited on their own (there
is nothing else to keep).

Refused tokens are throttled and audited in aggregate, so a flood of made-up tokens neither
runs a lookup per request nor writes a row per request. Each refusal counts against the
client's address and network (``bearer.address``, ``bearer.network``); once they had their
share, :meth:`ApiTokenService.verify` raises
:class:`~flask_authflow.errors.Throttled` (429, ``Retry-After``) before any lookup. Per
address and hour, the first :data:`AUDITED_REFUSALS` refusals get a row each (with their
reason); the next one writes one ``api_token_refusals`` row, and the first throttled request
one ``api_token_throttled`` row with the count of refusals; the rest of the hour writes
nothing more (at most ``AUDITED_REFUSALS + 2`` rows per address and hour).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from flask_authflow._clock import Clock
from flask_authflow._core.ports import ApiTokenRecord, ApiTokenStore, IdentityStore, UnitOfWork, one_unit
from flask_authflow._throttle import Throttle
from flask_authflow.api_auth._settings import ApiTokenSettings
from flask_authflow.api_auth._tokens import (
    NewToken,
    check_scopes,
    check_token_name,
    hashes_match,
    new_token,
    token_id_of,
)
from flask_authflow.audit._context import AuditContext
from flask_authflow.audit._sinks import AuditSink
from flask_authflow.errors import (
    AuditWriteError,
    AuthFlowError,
    AuthnError,
    InvalidInput,
    Throttled,
    UserNotFound,
)

__all__ = [
    "AUDITED_REFUSALS",
    "AUDIT_WINDOW_SECONDS",
    "DEFAULT_EXPIRY",
    "ApiTokenService",
    "CreatedToken",
    "DefaultExpiry",
    "TokenRefused",
]

#: Refused tokens from one address written one row each per audit window; past them, one
#: aggregate row (see the module's docstring).
AUDITED_REFUSALS: Final = 5
#: The window of the aggregate audit of refused tokens: an hour.
AUDIT_WINDOW_SECONDS: Final = 3600


class DefaultExpiry:
    """The type of :data:`DEFAULT_EXPIRY`."""

    def __repr__(self) -> str:
        return "DEFAULT_EXPIRY"


#: ``expires_in`` of :meth:`ApiTokenService.create` when not given: the configured default.
DEFAULT_EXPIRY: Final = DefaultExpiry()


class TokenRefused(AuthnError):
    """The bearer token is not valid (RFC 6750 ``invalid_token``)."""

    code = "invalid_token"
    status = 401

    def __init__(self, reason: str) -> None:
        super().__init__("the access token is invalid, expired or revoked")
        #: Why, for the audit row only (``malformed``, ``unknown``, ``mismatch``, ``expired``,
        #: ``user_unknown``, ``user_disabled``); the client is told no more than the message.
        self.reason = reason


@dataclass(frozen=True, slots=True)
class CreatedToken:
    """A token just created: ``value`` is shown once and never stored."""

    value: str
    record: ApiTokenRecord

    def __repr__(self) -> str:
        return f"CreatedToken(record={self.record!r})"


class ApiTokenService:
    """Create, list, revoke and verify personal API tokens.

    :param begin_unit: opens the store's unit of work (``backend.begin_unit``): a change and
        its audit row then commit together. ``None``: each write commits on its own."""

    def __init__(
        self,
        store: ApiTokenStore,
        users: IdentityStore,
        *,
        clock: Clock,
        audit_sink: AuditSink,
        settings: ApiTokenSettings,
        throttle: Throttle | None = None,
        begin_unit: Callable[[], UnitOfWork] | None = None,
    ) -> None:
        self.store = store
        #: Counts refused tokens per address (default: a throttle that refuses nothing).
        self.throttle = throttle if throttle is not None else Throttle.disabled()
        self.users = users
        self.clock = clock
        self.audit_sink = audit_sink
        self.settings = settings
        self._begin_unit = begin_unit

    # --- audit ---------------------------------------------------------------------------

    def _audit(
        self,
        event: str,
        status: str,
        context: AuditContext | None,
        *,
        tenant: str | None = None,
        user_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        ctx = context if context is not None else AuditContext.unknown()
        row = ctx.row(
            self.clock.now(), event, status, tenant=tenant, user_id=user_id, factor="api_token", reason=reason
        )
        try:
            self.audit_sink.write(row)
        except AuthFlowError:
            raise
        except Exception as exc:  # a sink of the application's that failed: nothing unaudited
            raise AuditWriteError() from exc

    # --- changes -------------------------------------------------------------------------

    def _expiry(self, now: datetime, expires_in: timedelta | DefaultExpiry | None) -> datetime | None:
        lifetime = self.settings.default_expiry if isinstance(expires_in, DefaultExpiry) else expires_in
        maximum = self.settings.max_expiry
        if lifetime is None:
            if maximum is not None:
                raise InvalidInput(f"a token must expire, within {maximum.days} days")
            return None
        if lifetime <= timedelta(0):
            raise InvalidInput("a token's lifetime must be positive")
        if maximum is not None and lifetime > maximum:
            raise InvalidInput(f"a token expires within {maximum.days} days at most")
        return now + lifetime

    def create(
        self,
        tenant: str,
        user_id: str,
        name: str,
        scopes: tuple[str, ...] | list[str] = (),
        *,
        expires_in: timedelta | DefaultExpiry | None = DEFAULT_EXPIRY,
        context: AuditContext | None = None,
    ) -> CreatedToken:
        """Create a token for the user; its value is in the result, and nowhere else.

        :raises InvalidInput: a bad name, scope or lifetime, or the user has too many tokens.
        :raises ~flask_authflow.errors.ApiTokenNameTaken: the user has a token of that name.
        :raises UserNotFound: no such user in the tenant.
        """
        name = check_token_name(name)
        checked_scopes = check_scopes(scopes, self.settings.scopes)
        if self.users.get_user(tenant, user_id) is None:
            raise UserNotFound()
        if len(self.store.list_api_tokens(tenant, user_id)) >= self.settings.max_per_user:
            raise InvalidInput(f"a user has at most {self.settings.max_per_user} API tokens")
        now = self.clock.now()
        token: NewToken = new_token()
        record = ApiTokenRecord(
            token_id=token.token_id,
            tenant=tenant,
            user_id=user_id,
            name=name,
            token_hash=token.token_hash,
            scopes=checked_scopes,
            created_at=now,
            expires_at=self._expiry(now, expires_in),
        )
        with one_unit(self._begin_unit):
            self.store.add_api_token(record)
            self._audit(
                "api_token_created", "success", context, tenant=tenant, user_id=user_id, reason=token.token_id
            )
        return CreatedToken(token.value, record)

    def list(self, tenant: str, user_id: str) -> list[ApiTokenRecord]:
        """The user's tokens, by name (their hashes included, never their values)."""
        return self.store.list_api_tokens(tenant, user_id)

    def revoke(self, tenant: str, user_id: str, name: str, *, context: AuditContext | None = None) -> bool:
        """Delete the user's token called ``name``; false if there was none. Once this
        returns, no request can be authenticated with it."""
        checked = check_token_name(name)
        with one_unit(self._begin_unit):
            record = self.store.delete_api_token(tenant, user_id, checked)
            if record is not None:
                self._audit(
                    "api_token_revoked",
                    "success",
                    context,
                    tenant=tenant,
                    user_id=user_id,
                    reason=record.token_id,
                )
        return record is not None

    def revoke_all(
        self, tenant: str, user_id: str, *, reason: str = "revoked", context: AuditContext | None = None
    ) -> int:
        """Delete every token of the user (with every session of the user: disabling,
        deleting, ``AccountAdmin.revoke_sessions``); how many there were. Audited when there
        were any. A password reset, a password change and log-out-everywhere delete the
        tokens in their own unit of work instead (:mod:`flask_authflow.login._recovery`)."""
        with one_unit(self._begin_unit):
            count = self.store.delete_user_api_tokens(tenant, user_id)
            if count:
                self._audit(
                    "api_tokens_revoked", "success", context, tenant=tenant, user_id=user_id, reason=reason
                )
        return count

    # --- use -----------------------------------------------------------------------------

    def audit_refusal(
        self, reason: str, record: ApiTokenRecord | None = None, *, context: AuditContext | None = None
    ) -> None:
        """Write the ``api_token_refused`` row of a refused use (``record``: the token, when
        the refusal names one; a scope refusal is written by the web layer this way)."""
        tenant = record.tenant if record is not None else None
        user_id = record.user_id if record is not None else None
        detail = f"{reason} {record.token_id}" if record is not None else reason
        self._audit("api_token_refused", "failure", context, tenant=tenant, user_id=user_id, reason=detail)

    def _refuse_if_throttled(self, ctx: AuditContext) -> None:
        """Raise :class:`Throttled` (audited once per address and window) before any lookup."""
        try:
            self.throttle.refuse_if_spent("bearer", ctx.client_ip)
        except Throttled as exc:
            if self.throttle.tally("bearer-throttled", ctx.client_ip, AUDIT_WINDOW_SECONDS) == 1:
                refused = self.throttle.tally("bearer-refused", ctx.client_ip, AUDIT_WINDOW_SECONDS) - 1
                detail = f"{exc.scope}: {refused} refused tokens this hour"
                self._audit("api_token_throttled", "throttled", ctx, reason=detail)
            raise

    def _audit_refused(self, reason: str, record: ApiTokenRecord | None, ctx: AuditContext) -> None:
        """One row per refusal for the first few of an address in the window, then one."""
        count = self.throttle.tally("bearer-refused", ctx.client_ip, AUDIT_WINDOW_SECONDS)
        if count <= AUDITED_REFUSALS:
            self.audit_refusal(reason, record, context=ctx)
        elif count == AUDITED_REFUSALS + 1:
            detail = f"more than {AUDITED_REFUSALS} refused tokens this hour; the rest are counted"
            self._audit("api_token_refusals", "failure", ctx, reason=detail)

    def _check(self, value: str, now: datetime) -> tuple[str, ApiTokenRecord | None]:
        """Why ``value`` is refused ("" when it is not) and the record it names."""
        token_id = token_id_of(value)
        if token_id is None:
            return "malformed", None
        record = self.store.get_api_token(token_id)
        if record is None:
            return "unknown", None
        if not hashes_match(record.token_hash, value):
            return "mismatch", None  # someone who knows the id, not the token: name no user
        if record.expires_at is not None and now >= record.expires_at:
            return "expired", record
        user = self.users.get_user(record.tenant, record.user_id)
        if user is None:
            return "user_unknown", record
        if user.disabled:
            return "user_disabled", record
        return "", record

    def verify(self, value: str, *, context: AuditContext | None = None) -> ApiTokenRecord:
        """The record of a valid token (its ``last_used_at`` brought up to date, written at
        most once per ``AUTHFLOW_API_TOKEN_LAST_USED_INTERVAL``).

        :raises TokenRefused: malformed, unknown, wrong, expired, or its user is gone or
            disabled (audited, with the reason, or in aggregate past the first few).
        :raises Throttled: the address had its share of refused tokens (nothing looked up).
        :raises StoreUnavailable: the throttle's storage failed (fail closed).
        """
        ctx = context if context is not None else AuditContext.unknown()
        self._refuse_if_throttled(ctx)
        now = self.clock.now()
        reason, record = self._check(value, now)
        if reason or record is None:
            self.throttle.count_refusal("bearer", ctx.client_ip)
            self._audit_refused(reason or "unknown", record, ctx)
            raise TokenRefused(reason or "unknown")
        interval = self.settings.last_used_interval
        if record.last_used_at is None or now - record.last_used_at >= interval:
            if self.store.touch_api_token(record.token_id, now, unless_since=now - interval + _EPSILON):
                record = replace(record, last_used_at=now)
        return record


#: ``unless_since`` is exclusive of the boundary: a use exactly one interval later writes.
_EPSILON = timedelta(microseconds=1)
