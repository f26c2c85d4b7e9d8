"""The session cookie's signature and the User-Agent binding (private to the session interface).

The browser holds ``<sid>.<signature>``: the signature is an HMAC-SHA256 of the id
(itsdangerous), checked with one HMAC per accepted key; the binding is an HMAC of the
User-Agent under a key derived (HKDF) from the same signing key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass

from itsdangerous import Signer

from flask_authflow._core.crypto import derive_key
from flask_authflow._core.session import AuthState, SessionRecord
from flask_authflow.errors import ConfigurationError

__all__ = [
    "COOKIE_SALT",
    "FINGERPRINT_PURPOSE",
    "MAX_COOKIE_LENGTH",
    "MIN_SIGNING_KEY_LENGTH",
    "KeySlot",
    "binding",
    "check_signing_key",
    "verify_cookie",
]

#: itsdangerous salt of the cookie signature (separates it from any other use of the key).
COOKIE_SALT = b"authflow.session"
#: HKDF purpose of the User-Agent fingerprint key.
FINGERPRINT_PURPOSE = b"session-fingerprint"
#: The signing key length (32 bytes, for HMAC-SHA256); shorter keys are refused.
MIN_SIGNING_KEY_LENGTH = 32
#: A valid cookie is 87 characters; anything longer than this is rejected unread.
MAX_COOKIE_LENGTH = 256

_SID_RE = re.compile(r"[A-Za-z0-9_-]{16,128}")
_SID_RE = re.compile(r"[A-Za-z0-9_-]{16,128}")


@dataclass(frozen=True, slots=True)
class KeySlot:
    """One accepted signing key: its cookie signer and its fingerprint key."""

    signer: Signer
    fingerprint_key: bytes

    @classmethod
    def build(cls, key: bytes) -> KeySlot:
        # The signer derives its HMAC key from (key, salt) on every call; derived once here
        # and used as it is ("none"), the signatures are the same and a request saves an HMAC.
        derived = Signer(
            key, salt=COOKIE_SALT, key_derivation="hmac", digest_method=hashlib.sha256
        ).derive_key()
        signer = Signer(derived, key_derivation="none", digest_method=hashlib.sha256)
        return cls(signer, derive_key(key, FINGERPRINT_PURPOSE))

    def fingerprint(self, user_agent: str) -> str:
        """The HMAC of ``user_agent`` under this key's fingerprint key (hex)."""
        return hmac.digest(self.fingerprint_key, user_agent.encode("utf-8", "surrogatepass"), "sha256").hex()


def check_signing_key(key: bytes, what: str) -> bytes:
    """``key`` as bytes, refused unless bytes of at least :data:`MIN_SIGNING_KEY_LENGTH`."""
    if not isinstance(key, bytes | bytearray):
        raise ConfigurationError(f"the {what} must be bytes")
    if len(key) < MIN_SIGNING_KEY_LENGTH:
        raise ConfigurationError(f"the {what} must be at least {MIN_SIGNING_KEY_LENGTH} bytes")
    return bytes(key)


def verify_cookie(slots: Sequence[KeySlot], raw: str) -> tuple[str, KeySlot] | None:
    """The session id in a cookie value and the key that signed it, or ``None``."""
    if not raw or len(raw) > MAX_COOKIE_LENGTH or not raw.isascii():
        return None
    value, sep, signature = raw.rpartition(".")
    if not sep or not _SID_RE.fullmatch(value):
        return None
    given = signature.encode("ascii")
    for slot in slots:
        # The signature in the one spelling the signer writes, compared in constant
        # time: a padded or stray-bit spelling of the same bytes does not match, and
        # one HMAC is all a request costs (no decoding of the cookie's signature).
        if hmac.compare_digest(slot.signer.get_signature(value), given):
            return value, slot
    return None


def binding(
    record: SessionRecord, slot: KeySlot, current: KeySlot, user_agent: str, current_fp: str
) -> tuple[bool, bool]:
    """Whether ``record`` is bound to this User-Agent (``current_fp`` is its fingerprint under
    ``current``), for a cookie signed with ``slot``; and whether it is so only because a
    parallel request with the same cookie of a previous key re-bound it already."""
    if record.fingerprint is None:
        return record.state is AuthState.GUEST, False  # only a guest may be unbound
    request_fp = current_fp if slot is current else slot.fingerprint(user_agent)
    if hmac.compare_digest(record.fingerprint, request_fp):
        return True, False
    if slot is not current and hmac.compare_digest(record.fingerprint, current_fp):
        # A parallel request with the same old cookie re-bound the record already: the
        # same User-Agent under the current fingerprint key.
        return True, True
    return False, False
