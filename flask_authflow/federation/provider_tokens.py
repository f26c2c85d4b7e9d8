"""The provider's tokens, kept to call its APIs: :class:`ProviderTokens`.

With ``store_tokens`` on a provider, the callback keeps the access token, the refresh
token, their expiry, the granted scopes and the token type per (tenant, user, provider),
sealed with the factor-secret key (the envelope of
:class:`~flask_authflow.mfa.sealing.FactorSealer`, bound to the row's key, so a sealed
value copied onto another row does not open).

:meth:`ProviderTokens.access_token` answers a valid access token. One that expires
within :data:`EXPIRY_SKEW` is refreshed first, single-flight: in this process one thread
per (tenant, user, provider) refreshes while the others wait for its result, and across
processes the store's refresh claim (one conditional write) lets exactly one process
spend the refresh token, so a rotated refresh token is never spent twice. A rotated
refresh token replaces the stored one; without one in the answer the old one stays.

Unlink, user deletion and back-channel logout call :meth:`ProviderTokens.forget`: the
tokens are revoked at the provider (RFC 7009, when discovery names a
``revocation_endpoint``) and the row is deleted, even when the revocation fails.
Every store, refresh, revocation and failure writes an audit row; no token is ever logged.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, Protocol

import requests

from flask_authflow.clock import Clock
from flask_authflow.core.ports import ProviderTokenStore, StoredProviderTokens
from flask_authflow.errors import AuthFlowError, FactorSecretError
from flask_authflow.federation.dpop import BearerAuth, DpopAuth, DpopKeyGone
from flask_authflow.federation.errors import OAuthError, ProviderUnreachable, TokenExchange
from flask_authflow.federation.mtls import CertificateChanged
from flask_authflow.federation.provider import OAuthProvider, ProviderRegistry, TokenSet, checked_token_type

__all__ = [
    "CLAIM_TTL",
    "EXPIRY_SKEW",
    "InsufficientScope",
    "NoProviderToken",
    "NoRefreshToken",
    "ProviderToken",
    "ProviderTokens",
    "RefreshTokenExpired",
    "Sealer",
    "TokenAudit",
    "TokenRefreshBusy",
]

#: An access token expiring within this is refreshed before it is handed out.
EXPIRY_SKEW: Final = timedelta(seconds=30)
#: How long a process's refresh claim holds a row (longer than an HTTP exchange may take).
CLAIM_TTL: Final = timedelta(seconds=30)
#: How often a process waiting for another one's refresh looks at the row again (seconds).
_WAIT_STEP: Final = 0.05
_MAX_TOKEN_TYPE: Final = 32

log = logging.getLogger("flask_authflow.federation")

#: ``audit(event, status, tenant, user_id, provider, reason)``: writes one audit row.
TokenAudit = Callable[[str, str, str, str, str, "str | None"], None]


class Sealer(Protocol):
    """Seals and opens secrets bound to a name (the app's factor-secret sealer,
    :class:`~flask_authflow.mfa.sealing.FactorSealer`)."""

    def seal(self, factor_id: str, plaintext: bytes) -> str: ...

    def open(self, factor_id: str, sealed: str) -> bytes: ...


class NoProviderToken(OAuthError):
    """No token of this provider is kept for you: sign in with the provider again."""

    code = "no_provider_token"
    status = 404


class NoRefreshToken(OAuthError):
    """The provider's access token expired and no refresh token was kept: sign in with the provider again."""

    code = "no_refresh_token"
    status = 401


class RefreshTokenExpired(OAuthError):
    """The provider refused the refresh token (expired or revoked): sign in with the provider again."""

    code = "refresh_token_expired"
    status = 401


class InsufficientScope(OAuthError):
    """The provider did not grant the scopes asked for: sign in with the provider again, granting them."""

    code = "insufficient_scope"
    status = 403

    def __init__(self, missing: Iterable[str]) -> None:
        #: the scopes asked for and not granted.
        self.missing = tuple(sorted(missing))
        super().__init__(f"the provider did not grant the scope(s) {' '.join(self.missing)[:200]}")


class TokenRefreshBusy(OAuthError):
    """Another process is refreshing this token and did not finish in time: try again."""

    code = "token_refresh_busy"
    status = 503


@dataclass(frozen=True, slots=True)
class _Opened:
    access_token: str
    refresh_token: str | None
    #: The DPoP key the tokens are bound to (``None``: Bearer tokens).
    dpop_kid: str | None = None
    #: The thumbprint of the client certificate the tokens are bound to (mutual TLS).
    x5t: str | None = None


def _aad(tenant: str, user_id: str, provider: str) -> str:
    """The associated data of a row's envelope: its key."""
    return f"provider-token\x00{tenant}\x00{user_id}\x00{provider}"


def _positive_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _checked_refresh(
    body: dict[str, object], dpop_kid: str | None = None, x5t: str | None = None
) -> TokenSet:
    """The checked parts of a successful refresh answer (no ID token is needed); a token
    bound with DPoP must come back DPoP-bound (the binding is kept: same key); one asked
    for over mutual TLS is bound to the certificate ``x5t`` presented.

    :raises TokenExchange: no access token, or a ``token_type`` other than Bearer (DPoP).
    """
    access_token = body.get("access_token")
    if not isinstance(access_token, str) or not access_token:
        raise TokenExchange("the token endpoint answered the refresh without an access_token")
    token_type = checked_token_type(body.get("token_type", "Bearer"), dpop_kid is not None)
    refresh = body.get("refresh_token")
    scope = body.get("scope")
    return TokenSet(
        id_token="",
        access_token=access_token,
        refresh_token=refresh if isinstance(refresh, str) and refresh else None,
        token_type=token_type,
        expires_in=_positive_int(body.get("expires_in")),
        scope=scope if isinstance(scope, str) else None,
        dpop_kid=dpop_kid,
        x5t=x5t,
    )


class ProviderToken(str):
    """A provider access token (it is the ``str``), with its ``token_type`` (``Bearer`` or
    ``DPoP``) and ``auth``: a ``requests`` auth object for the app's resource calls, which
    sets ``Authorization`` and, for a DPoP-bound token, a fresh proof per request (the
    resource server's ``use_dpop_nonce`` answered by one retry)::

        token = authflow.federation.token("bank")
        requests.get("https://api.bank.example/accounts", auth=token.auth, timeout=10)

    A token bound to the provider's client certificate (mutual TLS, RFC 8705) also carries
    ``cert`` (the certificate and key files) and ``verify`` (the provider's CA bundle, or
    ``True``) for ``requests``; for other tokens they are ``None`` and ``True``, requests'
    defaults, so one call fits every token::

        requests.get(url, auth=token.auth, cert=token.cert, verify=token.verify, timeout=10)
    """

    __slots__ = ("auth", "cert", "token_type", "verify")
    token_type: str
    auth: requests.auth.AuthBase
    cert: tuple[str, str] | None
    verify: str | bool

    def __new__(
        cls,
        access_token: str,
        token_type: str,
        auth: requests.auth.AuthBase,
        cert: tuple[str, str] | None = None,
        verify: str | bool = True,
    ) -> ProviderToken:
        made = super().__new__(cls, access_token)
        made.token_type = token_type
        made.auth = auth
        made.cert = cert
        made.verify = verify
        return made

    def __getnewargs__(  # type: ignore[override]
        self,
    ) -> tuple[str, str, requests.auth.AuthBase, tuple[str, str] | None, str | bool]:
        # pickled (a worker process hands its token back): rebuilt with its type, auth and certificate
        return str(self), self.token_type, self.auth, self.cert, self.verify

    def __repr__(self) -> str:
        return f"<ProviderToken {self.token_type}>"


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
        self._guard = threading.Lock()
        self._flights: dict[tuple[str, str, str], tuple[threading.Lock, list[int]]] = {}

    # --- sealing ------------------------------------------------------------------------------

    def _seal(self, tenant: str, user_id: str, provider: str, tokens: TokenSet, refresh: str | None) -> str:
        plain = json.dumps(
            {
                "access_token": tokens.access_token,
                "refresh_token": refresh,
                "dpop_kid": tokens.dpop_kid,
                **({"x5t": tokens.x5t} if tokens.x5t is not None else {}),
            }
        )
        return self.sealer.seal(_aad(tenant, user_id, provider), plain.encode("utf-8"))

    def _open(self, row: StoredProviderTokens) -> _Opened:
        """:raises FactorSecretError: the row does not open (another key, or moved)."""
        plain = self.sealer.open(_aad(row.tenant, row.user_id, row.provider), row.sealed)
        try:
            value = json.loads(plain)
            access, refresh = value["access_token"], value["refresh_token"]
            kid, x5t = value.get("dpop_kid"), value.get("x5t")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FactorSecretError("the provider tokens could not be read") from exc
        if not isinstance(access, str) or (refresh is not None and not isinstance(refresh, str)):
            raise FactorSecretError("the provider tokens could not be read")
        return _Opened(
            access,
            refresh,
            kid if isinstance(kid, str) and kid else None,
            x5t if isinstance(x5t, str) and x5t else None,
        )

    def _row(
        self,
        tenant: str,
        user_id: str,
        provider: str,
        tokens: TokenSet,
        refresh: str | None,
        scopes: tuple[str, ...],
    ) -> StoredProviderTokens:
        now = self.clock.now()
        expires = None if tokens.expires_in is None else now + timedelta(seconds=tokens.expires_in)
        return StoredProviderTokens(
            tenant=tenant,
            user_id=user_id,
            provider=provider,
            sealed=self._seal(tenant, user_id, provider, tokens, refresh),
            token_type=tokens.token_type[:_MAX_TOKEN_TYPE],
            scopes=tuple(tokens.scope.split()) if tokens.scope is not None else scopes,
            expires_at=expires,
            updated_at=now,
        )

    # --- keeping ------------------------------------------------------------------------------

    def keep(
        self, tenant: str, user_id: str, provider: OAuthProvider, tokens: TokenSet, scopes: Iterable[str]
    ) -> bool:
        """Keep the tokens of a callback when the provider has ``store_tokens`` (``scopes``:
        those requested, granted when the answer names none); ``True`` if they were kept."""
        if not provider.config.store_tokens:
            return False
        row = self._row(tenant, user_id, provider.name, tokens, tokens.refresh_token, tuple(scopes))
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

    def _handed_out(self, tenant: str, provider: str, opened: _Opened) -> ProviderToken:
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

    def _open_or_forget(self, row: StoredProviderTokens) -> _Opened:
        """The row's tokens; a row that no longer opens (its key was retired) is deleted."""
        try:
            return self._open(row)
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

    def _refresh_once(self, tenant: str, user_id: str, provider: str, wanted: frozenset[str]) -> _Opened:
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

    def _refresh_claimed(self, row: StoredProviderTokens, claim: str, wanted: frozenset[str]) -> _Opened:
        key = (row.tenant, row.user_id, row.provider)
        try:
            opened = self._open_or_forget(row)
            if self._fresh(row):  # refreshed by another process just before our claim
                self.store.release_provider_tokens(*key, claim)
                return self._scoped(row, wanted, opened)
            if opened.refresh_token is None:
                raise NoRefreshToken()
            answer = self._post_refresh(
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
        fresh = self._row(*key, answer, refresh, row.scopes)
        if not self.store.replace_claimed_provider_tokens(fresh, claim):
            self._audit("provider_token_refresh", "failure", *key, "claim_lost")
            raise TokenRefreshBusy("the stored tokens changed during the refresh: try again")
        self._audit("provider_token_refresh", "success", *key, "rotated" if answer.refresh_token else None)
        return self._scoped(fresh, wanted, _Opened(answer.access_token, refresh, answer.dpop_kid, answer.x5t))

    @staticmethod
    def _scoped(row: StoredProviderTokens, wanted: frozenset[str], opened: _Opened) -> _Opened:
        missing = wanted - set(row.scopes)
        if missing:
            raise InsufficientScope(missing)
        return opened

    def _post_refresh(
        self, provider: OAuthProvider, refresh_token: str, dpop_kid: str | None = None
    ) -> TokenSet:
        """The refresh request (RFC 6749 section 6), authenticated as the login's token request.

        :raises RefreshTokenExpired: ``invalid_grant``.
        :raises TokenExchange: another error answer, or an unusable success answer.
        :raises ProviderUnreachable: a transport failure, 5xx, or an answer that is not JSON.
        """
        response = provider.client_request(
            provider.endpoint("token_endpoint") or provider.metadata.token_endpoint,
            {"grant_type": "refresh_token", "refresh_token": refresh_token},
            dpop_kid=dpop_kid,  # the same key: the refreshed token keeps the binding
        )
        if response.status >= 500:
            raise ProviderUnreachable(f"the token endpoint answered HTTP {response.status}")
        body = response.json_object()
        if response.status == 200:  # over mTLS: bound to the certificate presented
            return _checked_refresh(body, dpop_kid, provider.tls.thumbprint if provider.tls else None)
        error = body.get("error")
        if error == "invalid_grant":
            raise RefreshTokenExpired()
        if isinstance(error, str) and error and error.isascii() and len(error) <= 64:
            raise TokenExchange(f"the token endpoint answered {error}", error=error)
        raise TokenExchange(f"the token endpoint answered HTTP {response.status}")

    # --- forgetting ---------------------------------------------------------------------------

    def forget(self, tenant: str, user_id: str, provider: str, *, reason: str) -> bool:
        """Revoke the user's tokens of ``provider`` at the provider and delete the row (even
        when the revocation fails: that is logged and audited); ``False`` if none was kept.
        ``reason`` (``unlink``, ``user_deleted``, ``backchannel_logout``) goes in the audit row."""
        row = self.store.get_provider_tokens(tenant, user_id, provider)
        if row is None:
            return False
        try:
            revoked = self._revoke(row)
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

    def _revoke(self, row: StoredProviderTokens) -> bool:
        """RFC 7009 at the provider's ``revocation_endpoint``: the refresh token first (which
        ends its access tokens at most providers), then the access token. ``False`` when the
        provider has no revocation endpoint.

        :raises ProviderUnreachable: the endpoint did not answer 200.
        """
        provider = self.registry.get(row.provider, row.tenant)
        endpoint = provider.endpoint("revocation_endpoint")
        if endpoint is None:
            return False
        opened = self._open(row)
        hints = (("refresh_token", opened.refresh_token), ("access_token", opened.access_token))
        for hint, token in hints:
            if token is None:
                continue
            response = provider.client_request(endpoint, {"token": token, "token_type_hint": hint})
            if response.status != 200:
                raise ProviderUnreachable(f"the revocation endpoint answered HTTP {response.status}")
        return True
