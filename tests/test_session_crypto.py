"""SessionCrypto: AES-256-GCM envelopes bound to the session id, with key rotation."""

from __future__ import annotations

import hashlib
import os

import pytest

from flask_authflow._core.crypto import ENVELOPE_VERSION, SessionCrypto, derive_key
from flask_authflow.errors import ConfigurationError, SessionDecryptError, SessionError

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))
SID = "s" * 43
PLAINTEXT = b'{"cart": ["apple", "pear"], "secret-marker": 42}'


def test_round_trip() -> None:
    crypto = SessionCrypto(KEY)
    blob = crypto.encrypt(SID, PLAINTEXT)
    assert crypto.decrypt(SID, blob) == PLAINTEXT


def test_envelope_layout() -> None:
    crypto = SessionCrypto(KEY)
    blob = crypto.encrypt(SID, PLAINTEXT)
    assert blob[0] == ENVELOPE_VERSION
    assert blob[1:5] == hashlib.sha256(KEY).digest()[:4]
    assert len(blob) == 1 + 4 + 12 + len(PLAINTEXT) + 16
    assert PLAINTEXT not in blob
    assert crypto.key_id == hashlib.sha256(KEY).digest()[:4].hex()


def test_nonce_is_random() -> None:
    crypto = SessionCrypto(KEY)
    first, second = crypto.encrypt(SID, PLAINTEXT), crypto.encrypt(SID, PLAINTEXT)
    assert first[5:17] != second[5:17]
    assert first != second


def test_blob_moved_to_another_sid_fails() -> None:
    crypto = SessionCrypto(KEY)
    blob = crypto.encrypt(SID, PLAINTEXT)
    with pytest.raises(SessionDecryptError):
        crypto.decrypt("t" * 43, blob)


@pytest.mark.parametrize("position", [0, 1, 5, 17, -1])
def test_tampered_envelope_fails(position: int) -> None:
    crypto = SessionCrypto(KEY)
    blob = bytearray(crypto.encrypt(SID, PLAINTEXT))
    blob[position] ^= 0x01
    with pytest.raises(SessionDecryptError):
        crypto.decrypt(SID, bytes(blob))


@pytest.mark.parametrize("blob", [b"", b"\x01", bytes(32), b"\x02" + bytes(40)])
def test_truncated_or_unknown_version_fails(blob: bytes) -> None:
    with pytest.raises(SessionDecryptError):
        SessionCrypto(KEY).decrypt(SID, blob)


def test_truncated_real_envelope_fails() -> None:
    crypto = SessionCrypto(KEY)
    blob = crypto.encrypt(SID, PLAINTEXT)
    with pytest.raises(SessionDecryptError):
        crypto.decrypt(SID, blob[:-1])


def test_wrong_key_fails() -> None:
    blob = SessionCrypto(KEY).encrypt(SID, PLAINTEXT)
    with pytest.raises(SessionDecryptError) as info:
        SessionCrypto(OTHER).decrypt(SID, blob)
    assert isinstance(info.value, SessionError)


def test_previous_key_decrypts_and_new_records_use_current() -> None:
    old_blob = SessionCrypto(KEY).encrypt(SID, PLAINTEXT)
    rotated = SessionCrypto(OTHER, previous_keys=[KEY])
    assert rotated.decrypt(SID, old_blob) == PLAINTEXT
    new_blob = rotated.encrypt(SID, PLAINTEXT)
    assert new_blob[1:5] == hashlib.sha256(OTHER).digest()[:4]
    with pytest.raises(SessionDecryptError):
        SessionCrypto(KEY).decrypt(SID, new_blob)


def test_with_previous_key_returns_a_new_object() -> None:
    old_blob = SessionCrypto(KEY).encrypt(SID, PLAINTEXT)
    current = SessionCrypto(OTHER)
    rotated = current.with_previous_key(KEY)
    assert rotated is not current
    assert rotated.decrypt(SID, old_blob) == PLAINTEXT
    with pytest.raises(SessionDecryptError):
        current.decrypt(SID, old_blob)


def test_envelope_header_is_authenticated() -> None:
    # Rewriting the key id (or version) cannot redirect or downgrade the envelope.
    crypto = SessionCrypto(KEY, previous_keys=[OTHER])
    blob = bytearray(crypto.encrypt(SID, PLAINTEXT))
    blob[1:5] = hashlib.sha256(OTHER).digest()[:4]
    with pytest.raises(SessionDecryptError):
        crypto.decrypt(SID, bytes(blob))


@pytest.mark.parametrize("key", [b"", b"k" * 16, b"k" * 31, b"k" * 33, b"k" * 64, "k" * 32])
def test_key_must_be_exactly_32_bytes(key: bytes) -> None:
    with pytest.raises(ConfigurationError):
        SessionCrypto(key)
    with pytest.raises(ConfigurationError):
        SessionCrypto(KEY, previous_keys=[key])
    with pytest.raises(ConfigurationError):
        SessionCrypto(KEY).with_previous_key(key)


def test_repr_has_no_key_material() -> None:
    key = os.urandom(32)
    text = repr(SessionCrypto(key, previous_keys=[os.urandom(32)]))
    assert key.hex() not in text
    assert repr(key) not in text
    assert "previous_keys=1" in text


def test_derive_key_separates_purposes() -> None:
    master = os.urandom(32)
    a = derive_key(master, b"at-rest")
    b = derive_key(master, b"fingerprint")
    assert len(a) == len(b) == 32
    assert a != b
    assert a == derive_key(master, b"at-rest")
    assert a != derive_key(os.urandom(32), b"at-rest")
    assert master not in (a, b)
    # the derived key is usable as an at-rest key
    assert SessionCrypto(a).decrypt(SID, SessionCrypto(a).encrypt(SID, b"x")) == b"x"


def test_derive_key_refuses_empty_master() -> None:
    with pytest.raises(ConfigurationError):
        derive_key(b"", b"x")
