"""Breached passwords: is a new password in the Pwned Passwords corpus? (opt-in)

The range API keeps the password private by k-anonymity: the password's SHA-1 is computed
here, only its first five hex characters are sent (``GET {url}/{prefix}``), and the
answer lists every known suffix of that prefix (``SUFFIX:COUNT`` lines, several hundred);
the match is found locally. ``Add-Padding: true`` asks for padding entries (count 0) so
the answer's size does not reveal the prefix either; they never match.

The request goes through the caller's fetch function (the app wires the provider HTTP
client, with its timeouts, https-only rule and size cap). When the service cannot be
reached or answers nonsense, the check fails **open** (the password is accepted, and a
warning is logged) unless it was configured to fail **closed** (the change is refused
with a 503 to try again later).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable

from flask_authflow._i18n import gettext
from flask_authflow.errors import StoreUnavailable, WeakPassword

__all__ = ["BreachCheckUnavailable", "BreachedPasswords", "RangeFetch", "range_query"]

log = logging.getLogger("flask_authflow.login")

#: ``fetch(prefix) -> answer text``: GET the range of a five-hex-character prefix; raises
#: on a transport failure or a non-200 answer.
RangeFetch = Callable[[str], str]

_LINE = re.compile(r"^([0-9A-Fa-f]{35}):([0-9]+)$")
#: A real answer has a few hundred lines (up to about 2,000 with padding); more is refused.
MAX_LINES = 10_000


class BreachCheckUnavailable(StoreUnavailable):
    """The breached-password service could not be asked; try again later."""

    code = "breach_check_unavailable"


def range_query(password: str) -> tuple[str, str]:
    """``(prefix, suffix)`` of the SHA-1 of ``password`` in UTF-8, upper-case hex: only the
    five-character prefix is ever sent."""
    digest = hashlib.sha1(password.encode("utf-8"), usedforsecurity=False).hexdigest().upper()
    return digest[:5], digest[5:]


def _count(answer: str, suffix: str) -> int:
    """The count of ``suffix`` in a range answer (0 if absent); raises ValueError on nonsense."""
    lines = answer.splitlines()
    if len(lines) > MAX_LINES:
        raise ValueError("the range answer is too long")
    found = 0
    for line in lines:
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if match is None:
            raise ValueError("the range answer has a malformed line")
        if match.group(1).upper() == suffix:
            found = int(match.group(2))
    return found


class BreachedPasswords:
    """Refuses passwords found in the corpus at least ``min_count`` times.

    :param fetch: asks the range API (a ``RangeFetch``: ``fetch(prefix) -> answer text``).
    :param fail_closed: refuse the password when the service cannot be asked (default:
        accept it and log a warning).
    :param min_count: how often a password must have been seen to be refused (default 1).
    """

    __slots__ = ("fail_closed", "fetch", "min_count")

    def __init__(self, fetch: RangeFetch, *, fail_closed: bool = False, min_count: int = 1) -> None:
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
            raise ValueError("min_count must be a positive integer")
        self.fetch = fetch
        self.fail_closed = fail_closed
        self.min_count = min_count

    def times_seen(self, password: str) -> int | None:
        """How often the corpus has seen ``password``; ``None`` if the service could not be asked."""
        prefix, suffix = range_query(password)
        try:
            answer = self.fetch(prefix)
            if not isinstance(answer, str):
                raise TypeError("the fetch function must return text")
            return _count(answer, suffix)
        except Exception as exc:  # noqa: BLE001 - any failure of the service is "unknown"
            log.warning("the breached-password check failed: %s", type(exc).__name__)
            return None

    def __call__(self, password: str) -> None:
        """Refuse ``password`` with :class:`~flask_authflow.errors.WeakPassword` (``breached``)
        when it was seen; when the service cannot be asked, accept it (fail open) or raise
        :class:`BreachCheckUnavailable` (fail closed)."""
        seen = self.times_seen(password)
        if seen is None:
            if self.fail_closed:
                raise BreachCheckUnavailable()
            return
        if seen >= self.min_count:
            raise WeakPassword(
                "breached",
                gettext(
                    "This password has appeared in a data breach and is known to attackers; choose another."
                ),
            )
