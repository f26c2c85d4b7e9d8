"""What a caller asks the local issuer to put in a token.

:class:`MintClaims` is an immutable builder: every ``with_*`` method returns a new
value, so a base set of claims can be shared and specialised safely. Checks that
need the time (``exp`` in the past, ``nbf`` after ``exp``, lifetime cap) run at
mint time against the issuer's clock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Final

from flask_authflow._clock import utc
from flask_authflow.errors import IssuanceError

__all__ = ["REGISTERED_CLAIMS", "MintClaims", "Timestamp", "to_timestamp"]

#: Claims the issuer controls; custom claims may not use these names.
REGISTERED_CLAIMS: Final = frozenset({"iss", "sub", "aud", "exp", "nbf", "iat", "jti"})

Timestamp = datetime | int | float

_MAX_STRING: Final = 1024


def to_timestamp(value: Timestamp, what: str) -> int:
    """Seconds since the epoch; naive datetimes count as UTC."""
    if isinstance(value, datetime):
        return math.floor(utc(value).timestamp())
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise IssuanceError(f"{what} must be a datetime or a number of seconds since the epoch")
    return math.floor(value)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise IssuanceError(f"{what} must be a non-empty string")
    if len(value) > _MAX_STRING:
        raise IssuanceError(f"{what} is longer than {_MAX_STRING} characters")
    return value


@dataclass(frozen=True, slots=True)
class MintClaims:
    """The claims of one token: ``MintClaims(subject, exp)`` plus optional builders.

    ``exp`` (and the other times) are datetimes or epoch seconds; they are stored
    as whole epoch seconds. ``iss`` is always the issuer's own; ``iat`` defaults
    to the issuer's clock and ``jti`` to 128 random bits.
    """

    subject: str
    exp: int
    audiences: tuple[str, ...] = ()
    issued_at: int | None = None
    not_before: int | None = None
    jwt_id: str | None = None
    custom: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __init__(
        self,
        subject: str,
        exp: Timestamp,
        *,
        audiences: Iterable[str] = (),
        issued_at: Timestamp | None = None,
        not_before: Timestamp | None = None,
        jwt_id: str | None = None,
        custom: Mapping[str, Any] | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "subject", _text(subject, "subject"))
        set_(self, "exp", to_timestamp(exp, "exp"))
        if isinstance(audiences, str):
            audiences = (audiences,)
        set_(self, "audiences", tuple(_text(a, "audience") for a in audiences))
        set_(self, "issued_at", None if issued_at is None else to_timestamp(issued_at, "iat"))
        set_(self, "not_before", None if not_before is None else to_timestamp(not_before, "nbf"))
        set_(self, "jwt_id", None if jwt_id is None else _text(jwt_id, "jti"))
        frozen: dict[str, Any] = {}
        for name, value in (custom or {}).items():
            frozen[name] = _checked_custom(name, value)
        set_(self, "custom", MappingProxyType(frozen))

    def with_audience(self, audience: str) -> MintClaims:
        """Claims whose ``aud`` is exactly ``audience`` (a single string)."""
        return replace(self, audiences=(audience,))

    def with_audiences(self, audiences: Iterable[str]) -> MintClaims:
        """Claims whose ``aud`` is the list ``audiences`` (an array in the token)."""
        values = (audiences,) if isinstance(audiences, str) else tuple(audiences)
        return replace(self, audiences=values)

    def with_issued_at(self, issued_at: Timestamp) -> MintClaims:
        return replace(self, issued_at=to_timestamp(issued_at, "iat"))

    def with_not_before(self, not_before: Timestamp) -> MintClaims:
        return replace(self, not_before=to_timestamp(not_before, "nbf"))

    def with_jwt_id(self, jwt_id: str) -> MintClaims:
        return replace(self, jwt_id=jwt_id)

    def with_custom_claim(self, name: str, value: Any) -> MintClaims:
        """Add a non-registered claim; ``value`` must be JSON-serialisable.

        Registered claims (``iss sub aud exp nbf iat jti``) are refused: letting a
        caller set ``iss`` or ``aud`` through the back door defeats the checks.
        """
        custom = dict(self.custom)
        custom[name] = _checked_custom(name, value)
        return replace(self, custom=custom)

    @property
    def expires_at(self) -> datetime:
        return datetime.fromtimestamp(self.exp, tz=UTC)

    def payload(self, issuer: str, now: int, jti: str, max_lifetime: timedelta | None) -> dict[str, Any]:
        """The JWT payload at time ``now`` after every time rule passed.

        Raises :class:`IssuanceError` when ``exp`` is not in the future, ``nbf`` is
        after ``exp``, ``iat`` is after ``exp`` or the lifetime is over the cap.
        """
        exp = self.exp
        if exp <= now:
            raise IssuanceError("exp is not in the future")
        if max_lifetime is not None and exp - now > max_lifetime.total_seconds():
            raise IssuanceError(
                f"token lifetime {exp - now}s is over the maximum of {int(max_lifetime.total_seconds())}s"
            )
        iat = now if self.issued_at is None else self.issued_at
        if iat >= exp:
            raise IssuanceError("iat is not before exp")
        out: dict[str, Any] = {"iss": issuer, "sub": self.subject}
        if self.audiences:
            out["aud"] = self.audiences[0] if len(self.audiences) == 1 else list(self.audiences)
        out["exp"] = exp
        if self.not_before is not None:
            if self.not_before >= exp:
                raise IssuanceError("nbf is not before exp")
            out["nbf"] = self.not_before
        out["iat"] = iat
        out["jti"] = self.jwt_id if self.jwt_id is not None else jti
        if self.custom:
            out.update(self.custom)
        return out

    def __repr__(self) -> str:
        # Custom claim values may be personal data; show names only.
        return (
            f"MintClaims(subject={self.subject!r}, exp={self.exp}, audiences={self.audiences!r}, "
            f"custom={sorted(self.custom)!r})"
        )


def _checked_custom(name: object, value: Any) -> Any:
    if not isinstance(name, str) or not name:
        raise IssuanceError("custom claim names must be non-empty strings")
    if name in REGISTERED_CLAIMS:
        raise IssuanceError(f"custom claim {name!r} would override a registered claim")
    try:
        # A JSON round trip both validates and deep-copies (so later mutation of the
        # caller's objects cannot change these claims).
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise IssuanceError(f"custom claim {name!r} is not JSON-serialisable") from exc
