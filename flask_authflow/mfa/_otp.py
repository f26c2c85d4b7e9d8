"""One-time codes: strict parsing, and the HOTP/TOTP values (RFC 4226, RFC 6238) from pyotp.

A code is exactly ``digits`` ASCII digits, nothing else: no spaces, no signs, no
full-width or Arabic-Indic digits (``str.isdigit`` accepts those; we do not), so that
what the user typed is compared byte for byte with what the server computed.
"""

from __future__ import annotations

import hmac
import re
from datetime import datetime

import pyotp

from flask_authflow._i18n import gettext
from flask_authflow._outcomes import FactorCredential
from flask_authflow.errors import InvalidInput

__all__ = [
    "HOTP_LOOK_AHEAD",
    "TOTP_DIGITS",
    "TOTP_PERIOD",
    "TOTP_SECRET_BYTES",
    "codes_equal",
    "hotp_value",
    "parse_code",
    "totp_step",
]

TOTP_DIGITS = 6
#: HOTP: how many counter values past the stored one a code may match (RFC 4226's "s").
HOTP_LOOK_AHEAD = 10
TOTP_PERIOD = 30
#: 160 bits, RFC 4226's recommended key length (and SHA-1's block of entropy).
TOTP_SECRET_BYTES = 20

_PATTERNS: dict[int, re.Pattern[bytes]] = {}


def parse_code(credential: FactorCredential, digits: int) -> str:
    """The code of ``credential`` if it is exactly ``digits`` ASCII digits.

    :raises InvalidInput: anything else (wrong length, letters, spaces, non-ASCII digits).
    """
    pattern = _PATTERNS.get(digits)
    if pattern is None:
        pattern = _PATTERNS.setdefault(digits, re.compile(rb"[0-9]{%d}" % digits))
    raw = credential.secret_bytes()
    if pattern.fullmatch(raw) is None:
        raise InvalidInput(gettext("The code must be exactly %(digits)d digits 0-9.", digits=digits))
    return raw.decode("ascii")


def totp_step(now: datetime, period: int = TOTP_PERIOD) -> int:
    """The RFC 6238 time step of ``now`` (aware UTC datetime)."""
    return int(now.timestamp()) // period


def hotp_value(secret_b32: str, counter: int, digits: int = TOTP_DIGITS) -> str:
    """The HOTP code of ``counter`` (a TOTP code is the HOTP code of its time step)."""
    return pyotp.HOTP(secret_b32, digits=digits).at(counter)


def codes_equal(expected: str, given: str) -> bool:
    """Constant-time comparison of two codes."""
    return hmac.compare_digest(expected.encode("ascii"), given.encode("ascii"))
