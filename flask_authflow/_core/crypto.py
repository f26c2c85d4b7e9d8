"""Encryption of session records at rest, and key derivation from the signing key.

Persistent session stores keep each record as an AES-256-GCM envelope so a reader of
the database (a backup, a replica, a leaked dump) learns neither the application's
session data nor anything that could be replayed. The associated data is the record's
key in the store (the session id, or a hash of it), so a ciphertext copied onto another
session's row does not decrypt.

Envelope layout (all lengths in bytes)::

    version (1) | key id (4) | nonce (12) | ciphertext + GCM tag (n + 16)

The key id is the first four bytes of SHA-256 of the key: it lets :meth:`decrypt` pick
the right key during a rotation without trying every key, and says nothing useful
about the key itself. The version byte and key id are authenticated too (they are
prepended to the associated data), so no part of the envelope can be altered.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from flask_authflow.errors import ConfigurationError, SessionDecryptError

__all__ = ["ENVELOPE_VERSION", "KEY_SIZE", "SessionCrypto", "derive_key"]

#: Version byte of the envelope written by :meth:`SessionCrypto.encrypt`.
ENVELOPE_VERSION = 1
#: AES-256: keys are exactly 32 bytes.
KEY_SIZE = 32
_NONCE_SIZE = 12  # 96 bits, the size GCM is specified for
_KEY_ID_SIZE = 4
_TAG_SIZE = 16
_HEADER_SIZE = 1 + _KEY_ID_SIZE + _NONCE_SIZE


def derive_key(master: bytes, purpose: bytes, length: int = KEY_SIZE) -> bytes:
    """Derive an independent key for one ``purpose`` from ``master`` (HKDF-SHA256).

    One configured secret (the signing key) can then feed several uses (cookie
    signatures, the fingerprint HMAC, the at-rest key) without one use's output
    helping to attack another.
    """
    if not isinstance(master, bytes | bytearray) or not master:
        raise ConfigurationError("the master key must be non-empty bytes")
    hkdf = HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=b"flask-authflow:" + purpose)
    return hkdf.derive(bytes(master))


def _key_id(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()[:_KEY_ID_SIZE]


def _check_key(key: bytes, what: str) -> bytes:
    if not isinstance(key, bytes | bytearray) or len(key) != KEY_SIZE:
        raise ConfigurationError(f"the {what} must be exactly {KEY_SIZE} bytes (AES-256)")
    return bytes(key)


class SessionCrypto:
    """AES-256-GCM envelopes bound to a session id, with key rotation.

    :param key: the current key (32 bytes); every new envelope is sealed with it.
    :param previous_keys: older keys still accepted by :meth:`decrypt`, so records
        written before a rotation stay readable until they expire.
    """

    __slots__ = ("_current", "_current_id", "_key", "_keys", "_previous")

    def __init__(self, key: bytes, previous_keys: Sequence[bytes] = ()) -> None:
        current = _check_key(key, "session encryption key")
        previous = tuple(_check_key(k, "previous session encryption key") for k in previous_keys)
        self._key = current
        self._current = AESGCM(current)
        self._current_id = _key_id(current)
        self._previous = previous
        #: every accepted key as (key id, cipher), current first, then newest previous first.
        self._keys: tuple[tuple[bytes, AESGCM], ...] = (
            (self._current_id, self._current),
            *((_key_id(k), AESGCM(k)) for k in previous if k != current),
        )

    def with_previous_key(self, key: bytes) -> SessionCrypto:
        """A copy that also decrypts records sealed with ``key`` (a retired key)."""
        return SessionCrypto(self._key, (_check_key(key, "previous session encryption key"), *self._previous))

    @property
    def key_id(self) -> str:
        """Hex id of the current key (as written in envelopes); not secret."""
        return self._current_id.hex()

    def encrypt(self, sid: str, plaintext: bytes) -> bytes:
        """Seal ``plaintext`` for the session ``sid`` (the associated data)."""
        nonce = os.urandom(_NONCE_SIZE)
        prefix = bytes((ENVELOPE_VERSION,)) + self._current_id
        sealed = self._current.encrypt(nonce, plaintext, prefix + sid.encode("utf-8"))
        return prefix + nonce + sealed

    def decrypt(self, sid: str, blob: bytes) -> bytes:
        """Open an envelope written for ``sid``.

        :raises SessionDecryptError: unknown version, truncated, tampered, sealed for
            another session id, or sealed with a key that is not configured.
        """
        if not isinstance(blob, bytes | bytearray | memoryview):
            raise SessionDecryptError("malformed session envelope")
        blob = bytes(blob)
        if len(blob) < _HEADER_SIZE + _TAG_SIZE or blob[0] != ENVELOPE_VERSION:
            raise SessionDecryptError("malformed session envelope")
        key_id = blob[1 : 1 + _KEY_ID_SIZE]
        nonce = blob[1 + _KEY_ID_SIZE : _HEADER_SIZE]
        sealed = blob[_HEADER_SIZE:]
        aad = blob[: 1 + _KEY_ID_SIZE] + sid.encode("utf-8")
        # The key named by the envelope first; then the others (a key id is 32 bits,
        # so a collision is possible in principle and must not make a record unreadable).
        named = [cipher for kid, cipher in self._keys if kid == key_id]
        others = [cipher for kid, cipher in self._keys if kid != key_id]
        for cipher in (*named, *others):
            try:
                return cipher.decrypt(nonce, sealed, aad)
            except InvalidTag:
                continue
        raise SessionDecryptError("the session record could not be decrypted")

    def __repr__(self) -> str:
        return f"<SessionCrypto key_id={self.key_id} previous_keys={len(self._previous)}>"
