"""Keep, hand out (refreshed, single-flight) and forget the provider tokens of users:
:class:`ProviderTokens` (see :mod:`flask_authflow.federation._provider_tokens`)."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Final

from flask_authflow._clock import Clock
from flask_authflow._core.ports import ProviderTokenStore, StoredProviderTokens
from flask_authflow.errors import AuthFlowError, FactorSecretError
from flask_authflow.federation._dpop import BearerAuth, DpopAuth, DpopKeyGone
from flask_authflow.federation._mtls import CertificateChanged
from flask_authflow.federation._provider import OAuthProvider, ProviderRegistry, TokenSet
from flask_authflow.federation._provider_tokens._calls import post_refresh, revoke
from flask_authflow.federation._provider_tokens._errors import (
    InsufficientScope,
    NoProviderToken,
    NoRefreshToken,
    RefreshTokenExpired,
    TokenRefreshBusy,
)
from flask_authflow.federation._provider_tokens._sealed import Opened, Sealer, TokenRows
from flask_authflow.federation._provider_tokens._token import ProviderToken

__all__ = ["CLAIM_TTL", "EXPIRY_SKEW", "ProviderTokens", "TokenAudit"]


#: An access token expiring within this is refreshed before it is handed out.
EXPIRY_SKEW: Final = timedelta(seconds=30)
#: How long a process's refresh claim holds a row (longer than an HTTP exchange may take).
CLAIM_TTL: Final = timedelta(seconds=30)
#: How often a process waiting for another one's refresh looks at the row again (seconds).
_WAIT_STEP: Final = 0.05

log = logging.getLogger("flask_authflow.federation")

#: ``audit(event, status, tenant, user_id, provider, reason)``: writes one audit row.
TokenAudit = Callable[[str, str, str, str, str, "str | None"], None]


class ProviderTokens:
    """Keep, refresh and revoke the provider tokens of users (see the module docstring).

    :param store: where the sealed rows live (the backend).
    :param registry: the app's providers (token and revocation endpoints, client auth).
    :param sealer: the factor-secret sealer.
    :param audit: writes the audit rows.
    """

    def __init__(
        self,
        store: ProviderTokenStore,
        registry: ProviderRegistry,
        sealer: Sealer,
        clock: Clock,
        audit: TokenAudit,
        *,
        skew: timedelta = EXPIRY_SKEW,
        claim_ttl: timedelta = CLAIM_TTL,
    ) -> None:
        self.store = store
        self.registry = registry
        self.sealer = sealer
        self.clock = clock
        self.skew = skew
        self.claim_ttl = claim_ttl
        self._audit = audit
        self._rows = TokenRows(sealer, clock)
        self._guard = threading.Lock()
        self._flights: dict[tuple[str, str, str], tuple[threading.Lock, list[int]]] = {}

    # --- keeping ------------------------------------------------------------------------------

    def keep(
        self, tenant: str, user_id: str, provider: OAuthProvider, tokens: TokenSet, scopes: Iterable[str]
    ) -> bool:
        """Keep the tokens of a callback when the provider has ``store_tokens`` (``scopes``:
        those requested, granted when the answer names none); ``True`` if they were kept."""
        if not provider.config.store_tokens:
            return False
        row = self._rows.row(tenant, user_id, provider.name, tokens, tokens.refresh_token, tuple(scopes))
        self.store.save_provider_tokens(row)
        self._audit("provider_token_store", "success", tenant, user_id, provider.name, None)
        return True

    # --- handing out --------------------------------------------------------------------------

    def access_token(
        self, tenant: str, user_id: str, provider: str, *, scopes: Iterable[str] | None = None
    ) -> ProviderToken:
        """A valid access token of ``provider`` for the user, refreshed first when it
        expires within the skew: a :class:`ProviderToken` (the token as a ``str``, with
        its ``token_type`` and a ``requests`` ``auth`` object; DPoP-bound tokens get proofs).

        :raises NoProviderToken: none is kept for the user.
        :raises InsufficientScope: ``scopes`` (names, or one space-separated string) were
            not all granted.
        :raises NoRefreshToken: it expired and there is no refresh token.
        :raises RefreshTokenExpired: the provider refused the refresh token (the row is deleted).
        :raises ProviderUnreachable, TokenExchange: the refresh failed for now (the row stays).
        :raises TokenRefreshBusy: another process's refresh did not finish in time.
        :raises DpopKeyGone: the DPoP key the tokens are bound to left the key store.
        :raises CertificateChanged: the tokens are bound to another client certificate than
            the one configured now.
        """
        wanted = frozenset(scopes.split() if isinstance(scopes, str) else scopes or ())
        row = self._stored(tenant, user_id, provider, wanted)
        if self._fresh(row):
            opened = self._open_or_forget(row)
        else:
            with self._flight((tenant, user_id, provider)):
                opened = self._refresh_once(tenant, user_id, provider, wanted)
        return self._handed_out(tenant, provider, opened)

    def _handed_out(self, tenant: str, provider: str, opened: Opened) -> ProviderToken:
        """The token with its auth object (DPoP proofs by the key it is bound to), and the
        client certificate it is bound to (mutual TLS)."""
        if opened.x5t is not None:
            tls = self.registry.get(provider, tenant).tls
            if tls is None or tls.thumbprint != opened.x5t:
                raise CertificateChanged()
            bearer = BearerAuth(opened.access_token)
            return ProviderToken(opened.access_token, "Bearer", bearer, tls.cert, tls.verify)
        if opened.dpop_kid is None:
            return ProviderToken(opened.access_token, "Bearer", BearerAuth(opened.access_token))
        signer = self.registry.get(provider, tenant).dpop
        if signer is None:
            raise DpopKeyGone("the provider no longer uses DPoP: sign in with it again")
        return ProviderToken(
            opened.access_token, "DPoP", DpopAuth(signer, opened.dpop_kid, opened.access_token)
        )

    def _stored(
        self, tenant: str, user_id: str, provider: str, wanted: frozenset[str]
    ) -> StoredProviderTokens:
        row = self.store.get_provider_tokens(tenant, user_id, provider)
        if row is None:
            raise NoProviderToken()
        missing = wanted - set(row.scopes)
        if missing:
            raise InsufficientScope(missing)
        return row

    def _fresh(self, row: StoredProviderTokens) -> bool:
        return row.expires_at is None or row.expires_at - self.skew > self.clock.now()

    def _open_or_forget(self, row: StoredProviderTokens) -> Opened:
        """The row's tokens; a row that no longer opens (its key was retired) is deleted."""
        try:
            return self._rows.open(row)
        except FactorSecretError:
            self.store.delete_provider_tokens(row.tenant, row.user_id, row.provider)
            self._audit(
                "provider_token_refresh", "failure", row.tenant, row.user_id, row.provider, "unreadable"
            )
            raise NoProviderToken() from None

    @contextmanager
    def _flight(self, key: tuple[str, str, str]) -> Iterator[None]:
        """One thread of this process at a time per key; the entry goes with its last user."""
        with self._guard:
            lock, users = self._flights.setdefault(key, (threading.Lock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._guard:
                users[0] -= 1
                if users[0] == 0:
                    del self._flights[key]

    def _refresh_once(self, tenant: str, user_id: str, provider: str, wanted: frozenset[str]) -> Opened:
        """Refresh unless another thread or process just did: read the row again, take the
        store's claim and refresh, or wait for the claim's holder to write its result."""
        deadline = time.monotonic() + self.claim_ttl.total_seconds()
        while True:
            row = self._stored(tenant, user_id, provider, wanted)
            if self._fresh(row):
                return self._open_or_forget(row)
            claim = secrets.token_urlsafe(24)
            now = self.clock.now()
            if self.store.claim_provider_tokens(
                tenant, user_id, provider, claim, now=now, until=now + self.claim_ttl
            ):
                return self._refresh_claimed(
                    self._claimed_row(tenant, user_id, provider, claim), claim, wanted
                )
            if time.monotonic() >= deadline:
                raise TokenRefreshBusy()
            time.sleep(_WAIT_STEP)

    def _claimed_row(self, tenant: str, user_id: str, provider: str, claim: str) -> StoredProviderTokens:
        """The row as it is now that the claim is ours: another process may have refreshed
        it (and ended its own claim) between our read and our claim."""
        row = self.store.get_provider_tokens(tenant, user_id, provider)
        if row is None:
            raise NoProviderToken()
        return row

    def _refresh_claimed(self, row: StoredProviderTokens, claim: str, wanted: frozenset[str]) -> Opened:
        key = (row.tenant, row.user_id, row.provider)
        try:
            opened = self._open_or_forget(row)
            if self._fresh(row):  # refreshed by another process just before our claim
                self.store.release_provider_tokens(*key, claim)
                return self._scoped(row, wanted, opened)
            if opened.refresh_token is None:
                raise NoRefreshToken()
            answer = post_refresh(
                self.registry.get(row.provider, row.tenant), opened.refresh_token, opened.dpop_kid
            )
        except RefreshTokenExpired as exc:
            self.store.delete_provider_tokens(*key)
            self._audit("provider_token_refresh", "failure", *key, exc.code)
            raise
        except BaseException as exc:
            self.store.release_provider_tokens(*key, claim)
            if isinstance(exc, AuthFlowError):
                self._audit("provider_token_refresh", "failure", *key, exc.code)
            raise
        refresh = answer.refresh_token or opened.refresh_token  # kept unless rotated
        fresh = self._rows.row(*key, answer, refresh, row.scopes)
        if not self.store.replace_claimed_provider_tokens(fresh, claim):
            self._audit("provider_token_refresh", "failure", *key, "claim_lost")
            raise TokenRefreshBusy("the stored tokens changed during the refresh: try again")
        self._audit("provider_token_refresh", "success", *key, "rotated" if answer.refresh_token else None)
        return self._scoped(fresh, wanted, Opened(answer.access_token, refresh, answer.dpop_kid, answer.x5t))

    @staticmethod
    def _scoped(row: StoredProviderTokens, wanted: frozenset[str], opened: Opened) -> Opened:
        missing = wanted - set(row.scopes)
        if missing:
            raise InsufficientScope(missing)
        return opened

    # --- forgetting ---------------------------------------------------------------------------

    def forget(self, tenant: str, user_id: str, provider: str, *, reason: str) -> bool:
        """Revoke the user's tokens of ``provider`` at the provider and delete the row (even
        when the revocation fails: that is logged and audited); ``False`` if none was kept.
        ``reason`` (``unlink``, ``user_deleted``, ``backchannel_logout``) goes in the audit row."""
        row = self.store.get_provider_tokens(tenant, user_id, provider)
        if row is None:
            return False
        try:
            revoked = revoke(self.registry.get(row.provider, row.tenant), self._rows, row)
        except (AuthFlowError, OSError) as exc:
            code = exc.code if isinstance(exc, AuthFlowError) else "transport"
            log.warning(
                "revoking the %s tokens of a user failed (%s); the stored tokens are deleted", provider, code
            )
            self._audit(
                "provider_token_revoke", "failure", tenant, user_id, provider, f"{reason}:{code}"[:64]
            )
        else:
            shown = reason if revoked else f"{reason}:no_revocation_endpoint"
            self._audit("provider_token_revoke", "success", tenant, user_id, provider, shown[:64])
        finally:
            self.store.delete_provider_tokens(tenant, user_id, provider)
        return True

    def forget_user(self, tenant: str, user_id: str, *, reason: str = "user_deleted") -> int:
        """:meth:`forget` every provider's tokens of the user; returns how many rows went."""
        rows = self.store.provider_tokens_of_user(tenant, user_id)
        return sum(self.forget(tenant, user_id, row.provider, reason=reason) for row in rows)
