"""The tokens the provider mints: ID tokens and back-channel logout tokens, with the claims
a tamper option spoils."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol
from urllib.parse import urlsplit, urlunsplit

from flask_authflow._clock import Clock
from flask_authflow.errors import ConfigurationError
from flask_authflow.testing._provider._issuer import IssuerNames
from flask_authflow.testing._provider._keys import KeyRing
from flask_authflow.testing._provider._session import ProviderSession
from flask_authflow.testing._provider._tamper import ISSUER_TAMPERS, SIGNING_TAMPERS

BACKCHANNEL_LOGOUT_EVENT: Final = "http://schemas.openid.net/event/backchannel-logout"
_LOGOUT_TOKEN_LIFETIME: Final = 120


class TokenScript(Protocol):
    """What a test may change about the tokens minted."""

    token_issuer: str | None


class TokenMinter:
    def __init__(
        self,
        keys: KeyRing,
        names: IssuerNames,
        clock: Clock,
        session: ProviderSession,
        lifetime: int,
        script: TokenScript,
    ) -> None:
        self._keys = keys
        self._names = names
        self._clock = clock
        self._session = session
        self._lifetime = lifetime
        self._script = script

    def now(self) -> int:
        return int(self._clock.now().timestamp())

    def _issuer_claim(self, bad: frozenset[str]) -> str:
        iss = self._names.iss
        if self._script.token_issuer is not None and not bad & ISSUER_TAMPERS:
            return self._script.token_issuer
        if "wrong_iss" in bad:
            return "https://evil.test"
        if "iss_trailing_slash" in bad:
            return iss + "/"
        if "iss_case" in bad:
            parts = urlsplit(iss)
            return urlunsplit((parts.scheme, parts.netloc.upper(), parts.path, "", ""))
        return iss

    def id_token(
        self,
        client_id: str,
        sub: str,
        *,
        nonce: str | None,
        claims: Mapping[str, Any] | None,
        sid: str | None,
        auth_time: int | None,
        tamper: Iterable[str],
        access_token: str | None,
    ) -> str:
        bad = frozenset(tamper)
        now = self.now()
        iat = now - 86400 if "old_iat" in bad else now
        payload: dict[str, Any] = dict(claims or {})
        payload.update(
            {
                "iss": self._issuer_claim(bad),
                "sub": sub,
                "aud": client_id,
                "iat": iat,
                "exp": now - 3600 if "expired" in bad else now + self._lifetime,
                "auth_time": auth_time if auth_time is not None and "old_iat" not in bad else iat,
                "sid": sid if sid is not None else self._session.sid,
            }
        )
        _spoil_audience(payload, client_id, bad)
        for name in ("sub", "iat", "exp", "aud", "iss"):
            if f"no_{name}" in bad:
                del payload[name]
        if access_token is not None:
            payload["at_hash"] = self._keys.at_hash(
                "another" + access_token if "wrong_at_hash" in bad else access_token
            )
        _put_nonce(payload, nonce, bad)
        return self._keys.sign(payload, typ="JWT", tamper=bad & SIGNING_TAMPERS, header=None)

    def logout_token(self, client_id: str, *, sub: str | None, sid: str | None, tamper: Iterable[str]) -> str:
        bad = frozenset(tamper)
        if sub is None and sid is None and "logout_no_sub_sid" not in bad:
            raise ConfigurationError("a logout token names a sub, a sid or both")
        now = self.now()
        payload: dict[str, Any] = {
            "iss": self._issuer_claim(bad),
            "aud": "another-client" if "wrong_aud" in bad else client_id,
            "iat": now - 86400 if "old_iat" in bad else now,
            "exp": now - 3600 if "expired" in bad else now + _LOGOUT_TOKEN_LIFETIME,
            "jti": secrets.token_urlsafe(16),
            "events": {BACKCHANNEL_LOGOUT_EVENT: {}},
        }
        if "logout_no_sub_sid" not in bad:
            payload.update({name: value for name, value in (("sub", sub), ("sid", sid)) if value is not None})
        _spoil_logout(payload, bad)
        typ = "JWT" if "logout_typ_jwt" in bad else "logout+jwt"
        return self._keys.sign(payload, typ=typ, tamper=bad & SIGNING_TAMPERS, header=None)


def _spoil_audience(payload: dict[str, Any], client_id: str, bad: frozenset[str]) -> None:
    if "wrong_aud" in bad:
        payload["aud"] = "another-client"
    elif "aud_array_no_azp" in bad:
        payload["aud"] = [client_id, "another-client"]
    elif "wrong_azp" in bad:
        payload["aud"] = [client_id, "another-client"]
        payload["azp"] = "another-client"
    elif "aud_as_array" in bad:
        payload["aud"] = [client_id]


def _put_nonce(payload: dict[str, Any], nonce: str | None, bad: frozenset[str]) -> None:
    if "wrong_nonce" in bad:
        payload["nonce"] = secrets.token_urlsafe(16)
    elif nonce is not None and "no_nonce" not in bad:
        payload["nonce"] = nonce


def _spoil_logout(payload: dict[str, Any], bad: frozenset[str]) -> None:
    """The logout-token options: a nonce, no or another event, padding past 8 KiB."""
    if "logout_nonce" in bad:
        payload["nonce"] = secrets.token_urlsafe(8)
    if "logout_no_events" in bad:
        del payload["events"]
    elif "logout_wrong_event" in bad:
        payload["events"] = {"http://schemas.openid.net/event/other": {}}
    if "logout_oversize" in bad:
        payload["padding"] = "x" * 9000
