"""``AUTHFLOW_THROTTLE*``: which requests are limited, how much, and where counts are kept.

A limit is written in the ``limits`` library's notation: ``"20/minute"``, or several
joined with ``;`` (``"20/minute;200/hour"``), each of which must hold. The names below
are ``<scope>.<what is counted>``; ``AUTHFLOW_THROTTLE_LIMITS`` overrides any of them
(a mapping from name to limit, or to ``None`` to switch that one off).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from limits import RateLimitItem, parse_many

from flask_authflow._settings import Settings, setting
from flask_authflow.errors import ConfigurationError

__all__ = ["DEFAULT_LIMITS", "SCOPES", "ThrottleSettings", "parse_limits"]

#: The flows that are limited; each is limited per address and per network. ``mail`` is the
#: budget of the mails a user asks for after proving something (an e-mail code after her
#: password, the confirmation of a change she made signed in, a notice); ``stranger_mail`` the
#: budget of the mails anyone can trigger for someone else's address (forgot-password, sign-up,
#: resend). The two never share a count, so strangers cannot spend the owner's budget.
#: ``code`` counts attempts at a mailed short code (sign-up verification), ``bearer`` refused
#: API tokens.
SCOPES = ("login", "factor", "signup", "reset", "mail", "stranger_mail", "code", "bearer")

#: The default of every limit (the manual's "Security" page gives the reasoning).
DEFAULT_LIMITS: Mapping[str, str] = MappingProxyType(
    {
        "login.address": "20/minute;200/hour",
        "login.network": "100/minute;1000/hour",
        "factor.address": "30/minute;300/hour",
        "factor.network": "150/minute;1500/hour",
        "signup.address": "10/hour;50/day",
        "signup.network": "50/hour;200/day",
        "reset.address": "10/hour;50/day",
        "reset.network": "50/hour;200/day",
        "mail.address": "20/hour;100/day",
        "mail.network": "100/hour;500/day",
        "mail.recipient": "5/hour;20/day",
        "mail.account": "10/hour;30/day",
        "stranger_mail.address": "20/hour;100/day",
        "stranger_mail.network": "100/hour;500/day",
        "stranger_mail.recipient": "5/hour;20/day",
        # Attempts at a mailed short code: per address, per network, and per (account,
        # network), so one network cannot spend a code's hard cap of tries.
        "code.address": "10/hour;50/day",
        "code.network": "50/hour;200/day",
        "code.pair": "5/hour;10/day",
        # Refused API bearer tokens, per address and network (valid tokens are not counted).
        "bearer.address": "20/minute;200/hour",
        "bearer.network": "100/minute;1000/hour",
        # The failure-rate guard: past this many failed credential checks (all accounts,
        # all addresses) the login is in a spike, and every address gets "login.spike".
        "failures.global": "300/minute",
        "login.spike": "5/minute",
    }
)


def parse_limits(key: str, overrides: Any) -> dict[str, tuple[RateLimitItem, ...]]:
    """The defaults with ``overrides`` applied, parsed; refuses unknown names and bad limits."""
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, Mapping):
        raise ConfigurationError(f"{key} must be a mapping of limit names to limits, got {overrides!r}")
    unknown = sorted(str(name) for name in overrides if name not in DEFAULT_LIMITS)
    if unknown:
        raise ConfigurationError(f"{key} names unknown limits {unknown}; known: {sorted(DEFAULT_LIMITS)}")
    parsed: dict[str, tuple[RateLimitItem, ...]] = {}
    for name, default in DEFAULT_LIMITS.items():
        value = overrides.get(name, default)
        if value is None:
            parsed[name] = ()
            continue
        if not isinstance(value, str):
            raise ConfigurationError(f"{key}[{name!r}] must be a limit such as '20/minute', got {value!r}")
        try:
            parsed[name] = tuple(parse_many(value))
        except ValueError as exc:
            raise ConfigurationError(
                f"{key}[{name!r}] is not a limit such as '20/minute': {value!r}"
            ) from exc
    return parsed


@dataclass(frozen=True, slots=True)
class ThrottleSettings(Settings):
    """``AUTHFLOW_THROTTLE``, ``AUTHFLOW_THROTTLE_STORAGE_URL``, ``AUTHFLOW_THROTTLE_LIMITS``."""

    enabled: bool = field(metadata=setting("AUTHFLOW_THROTTLE"))
    #: ``memory://`` or a ``redis://`` URL; unset: the Redis of the session store when
    #: sessions are in Redis (``AUTHFLOW_REDIS_URL``), else memory (one count per process).
    storage_url: str | None = field(metadata=setting("AUTHFLOW_THROTTLE_STORAGE_URL"))
    overrides: Any = field(metadata=setting("AUTHFLOW_THROTTLE_LIMITS"))
    session_store: str = field(metadata=setting("AUTHFLOW_SESSION_STORE"))
    redis_url: str | None = field(metadata=setting("AUTHFLOW_REDIS_URL"))

    def __post_init__(self) -> None:
        self.limits()  # refuse a bad limit at start-up, not at the first login
        url = self.storage_url
        if url is not None and (not isinstance(url, str) or url.split("://", 1)[0] not in _SCHEMES):
            raise ConfigurationError(
                f"AUTHFLOW_THROTTLE_STORAGE_URL must be memory:// or a redis:// URL, got {url!r}"
            )

    def limits(self) -> dict[str, tuple[RateLimitItem, ...]]:
        """Every limit, parsed (the defaults with ``AUTHFLOW_THROTTLE_LIMITS`` applied)."""
        return parse_limits("AUTHFLOW_THROTTLE_LIMITS", self.overrides)

    def storage(self) -> str:
        """Where the counts are kept: the configured URL, the session store's Redis, or memory."""
        if self.storage_url:
            return self.storage_url
        if self.session_store == "redis" and self.redis_url:
            return self.redis_url
        return "memory://"


_SCHEMES = frozenset({"memory", "redis", "rediss", "redis+unix"})
