"""The names of roles and permissions: what the stores accept.

A name is 1 to 64 characters of ASCII letters, digits and ``_ . : -``, starting with a
letter or digit (``admin``, ``documents:edit``); names are case-sensitive, as
Flask-Security-Too's are. Anything else is refused with
:class:`~flask_authflow.errors.InvalidInput` before it reaches a store.
"""

from __future__ import annotations

import re

from flask_authflow.errors import InvalidInput

__all__ = ["MAX_DESCRIPTION_LENGTH", "MAX_NAME_LENGTH", "check_description", "check_name"]

MAX_NAME_LENGTH = 64
MAX_DESCRIPTION_LENGTH = 255
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")


def check_name(value: object, what: str = "role") -> str:
    """``value`` if it is a valid role or permission name, else :class:`InvalidInput`."""
    if not isinstance(value, str) or _NAME.fullmatch(value) is None:
        raise InvalidInput(
            f"a {what} name is 1 to {MAX_NAME_LENGTH} letters, digits or _ . : -, "
            "starting with a letter or digit"
        )
    return value


def check_description(value: object) -> str:
    """``value`` if it is a printable description of at most 255 characters."""
    if not isinstance(value, str) or len(value) > MAX_DESCRIPTION_LENGTH or not value.isprintable():
        raise InvalidInput(f"a role description is at most {MAX_DESCRIPTION_LENGTH} printable characters")
    return value
