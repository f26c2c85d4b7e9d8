"""ID-token and logout-token verification: :class:`TokenChecks`.

Both go through the one JWT verification path (:class:`~flask_authflow.jose.JwtVerifier`)
on the provider's key cache, with the client's one pinned algorithm; an unknown ``kid``
refreshes the keys once (single-flight, floor and token bucket).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from flask_authflow._clock import Clock
from flask_authflow.errors import TokenCheck, TokenVerificationError, UnknownKeyId
from flask_authflow.federation._errors import IdTokenValidation, LogoutTokenInvalid, UnknownKid
from flask_authflow.federation._jwks_cache import ProviderKeyCache
from flask_authflow.federation._provider._names import TENANT_PLACEHOLDER
from flask_authflow.federation._tenants import tenant_issuer_refusal
from flask_authflow.federation._tokens import (
    LogoutClaims,
    check_at_hash,
    check_id_token,
    check_logout_token,
    check_logout_token_size,
)
from flask_authflow.jose import VerifiedClaims

if TYPE_CHECKING:
    from flask_authflow.federation._provider._config import OAuthProviderConfig

__all__ = ["TokenChecks"]


class TokenChecks:
    """The token checks of one client of one issuer (the provider object composes them)."""

    def __init__(
        self, config: OAuthProviderConfig, issuer: str, keys: ProviderKeyCache, clock: Clock, alg: str
    ) -> None:
        self.config = config
        self.client_id = config.client_id
        self.issuer = issuer
        self.keys = keys
        self.clock = clock
        self.id_token_alg = alg

    def _verify(self, token: str, error: type[IdTokenValidation | LogoutTokenInvalid]) -> VerifiedClaims:
        """Signature with the pinned algorithm, ``exp``, ``iss``, ``aud`` through the one
        verification path; an unknown ``kid`` refreshes the keys once (single-flight,
        floor and token bucket)."""
        self.keys.ensure_fresh()
        skew = self.config.clock_skew
        issuer = None if self.config.multi_tenant else self.issuer  # checked per tid below
        for attempt in (1, 2):
            verifier = self.keys.verifier((self.id_token_alg,))
            try:
                claims = verifier.verify(token, self.client_id, issuer=issuer, leeway=skew, clock=self.clock)
                if issuer is None:
                    refusal = tenant_issuer_refusal(
                        claims.claims, self.issuer, self.config.allowed_tenants, TENANT_PLACEHOLDER
                    )
                    if refusal is not None:
                        raise error(refusal[0], f"{error.__name__}: {refusal[1]}")
                return claims
            except UnknownKeyId as exc:
                if attempt == 2 or not self.keys.refresh_for_unknown_kid(exc.kid):
                    if error is IdTokenValidation:
                        raise UnknownKid(exc.kid) from None
                    raise error(
                        TokenCheck.UNKNOWN_KID, "logout token signed with an unknown key id"
                    ) from None
            except TokenVerificationError as exc:
                hint = ""
                if exc.reason == TokenCheck.ALGORITHM:
                    hint = f"; this client accepts {self.id_token_alg} only (id_token_signed_response_alg)"
                raise error(exc.reason, f"{error.__name__}: {exc.message}{hint}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def validate_id_token(self, id_token: str, nonce: str, access_token: str | None = None) -> VerifiedClaims:
        """See :meth:`~flask_authflow.federation._provider._oidc.OAuthProvider.validate_id_token`."""
        claims = self._verify(id_token, IdTokenValidation)
        if access_token is not None:
            check_at_hash(claims, access_token)
        check_id_token(
            claims,
            client_id=self.client_id,
            nonce=nonce,
            now=self.clock.now().timestamp(),
            iat_bound=self.config.iat_bound,
            clock_skew=self.config.clock_skew,
        )
        return claims

    def verify_logout_jwt(self, token: Any) -> LogoutClaims:
        """See :meth:`~flask_authflow.federation._provider._oidc.OAuthProvider.verify_logout_jwt`."""
        text = check_logout_token_size(token)
        claims = self._verify(text, LogoutTokenInvalid)
        return check_logout_token(
            claims,
            client_id=self.client_id,
            now=self.clock.now().timestamp(),
            iat_bound=timedelta(minutes=5),
            clock_skew=timedelta(seconds=60),
        )
