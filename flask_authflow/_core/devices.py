"""What the device stores accept: device ids, labels and places.

A device id is the random value of a device cookie: 22 to 64 characters of the
URL-safe base64 alphabet. Labels ("Firefox on Ubuntu") and places ("Berlin, DE") are
printable text cut to their column sizes; anything else is refused with
:class:`~flask_authflow.errors.InvalidInput` before it reaches a store.
"""

from __future__ import annotations

import re

from flask_authflow.errors import InvalidInput

__all__ = ["MAX_LABEL_LENGTH", "MAX_PLACE_LENGTH", "check_device_id", "clean_text"]

MAX_LABEL_LENGTH = 128
MAX_PLACE_LENGTH = 128
_DEVICE_ID = re.compile(r"[A-Za-z0-9_-]{22,64}")


def check_device_id(value: object) -> str:
    """``value`` if it is a well-formed device id, else :class:`InvalidInput`."""
    if not isinstance(value, str) or _DEVICE_ID.fullmatch(value) is None:
        raise InvalidInput("a device id is 22 to 64 characters of letters, digits, _ and -")
    return value


def clean_text(value: object, limit: int) -> str:
    """``value`` with control characters replaced and cut to ``limit`` characters."""
    if not isinstance(value, str):
        raise InvalidInput("a device label or place must be text")
    return "".join(ch if ch.isprintable() else "?" for ch in value[:limit]).strip()
