"""Strict encodings: base64url with one spelling per value, as signatures and cookies
need, and JSON without duplicate members or non-finite numbers."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final

__all__ = ["STRICT_JSON", "b64url_decode", "b64url_encode"]


def b64url_encode(data: bytes) -> str:
    """Base64url without padding, as JWS compact serialisation wants."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_TO_STANDARD_ALPHABET: Final = bytes.maketrans(b"-_", b"+/")
# Last characters whose unused low bits are zero, for 2 and 3 leftover characters.
_CANONICAL_LAST: Final = {2: frozenset(b"AQgw"), 1: frozenset(b"AEIMQUYcgkosw048")}


def b64url_decode(data: str) -> bytes:
    """Strict base64url decoding: no padding, no ``+``/``/``, no stray bits.

    Strictness matters: a lenient decoder accepts many spellings of one signature,
    which makes tokens malleable.
    """
    raw = data.encode("ascii")  # UnicodeEncodeError for non-ASCII input: callers map it
    standard = raw.translate(_TO_STANDARD_ALPHABET, b"+/=")  # drops those three, then maps
    if len(standard) != len(raw):
        raise ValueError("invalid base64url")
    pad = -len(raw) % 4
    if pad:
        if pad == 3 or raw[-1] not in _CANONICAL_LAST[pad]:
            raise ValueError("non-canonical base64url")
        standard += b"=" * pad
    return binascii.a2b_base64(standard, strict_mode=True)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Duplicate members are ambiguous (parsers disagree on which wins); refuse them.
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate member in JSON object")
    return result


#: A JSON decoder that refuses duplicate members and ``NaN``/``Infinity`` (``ValueError``).
STRICT_JSON: Final = json.JSONDecoder(object_pairs_hook=_unique_object, parse_constant=_reject_constant)
