"""The stored row of a user's provider tokens, sealed with the factor-secret key (the
envelope of :class:`~flask_authflow.mfa._sealing.FactorSealer`, bound to the row's key, so a
sealed value copied onto another row does not open)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, Protocol

from flask_authflow._clock import Clock
from flask_authflow._core.ports import StoredProviderTokens
from flask_authflow.errors import FactorSecretError
from flask_authflow.federation._provider import TokenSet

__all__ = ["Opened", "Sealer", "TokenRows"]

_MAX_TOKEN_TYPE: Final = 32


class Sealer(Protocol):
    """Seals and opens secrets bound to a name (the app's factor-secret sealer,
    :class:`~flask_authflow.mfa._sealing.FactorSealer`)."""

    def seal(self, factor_id: str, plaintext: bytes) -> str: ...

    def open(self, factor_id: str, sealed: str) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Opened:
    """The tokens of a row, opened."""

    access_token: str
    refresh_token: str | None
    #: The DPoP key the tokens are bound to (``None``: Bearer tokens).
    dpop_kid: str | None = None
    #: The thumbprint of the client certificate the tokens are bound to (mutual TLS).
    x5t: str | None = None


def _aad(tenant: str, user_id: str, provider: str) -> str:
    """The associated data of a row's envelope: its key."""
    return f"provider-token\x00{tenant}\x00{user_id}\x00{provider}"


class TokenRows:
    """Seals tokens into a row and opens a row's tokens."""

    def __init__(self, sealer: Sealer, clock: Clock) -> None:
        self.sealer = sealer
        self.clock = clock

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

    def open(self, row: StoredProviderTokens) -> Opened:
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
        return Opened(
            access,
            refresh,
            kid if isinstance(kid, str) and kid else None,
            x5t if isinstance(x5t, str) and x5t else None,
        )

    def row(
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
