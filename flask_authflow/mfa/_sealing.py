"""Factor secrets at rest: AES-256-GCM envelopes bound to the factor id.

TOTP and HOTP keys must be readable by the server (a hash would not do), so they are
sealed with the session-record envelope of ``flask_authflow._core.crypto``,
generalised: the associated data is the factor's id, so a sealed key copied onto another
factor's row does not open. The key is ``AUTHFLOW_FACTOR_ENCRYPTION_KEY`` when set, else
one derived (HKDF, its own purpose) from the signing key; previous keys stay readable for
rotation (``AUTHFLOW_PREVIOUS_FACTOR_ENCRYPTION_KEYS``, and keys derived from
``AUTHFLOW_PREVIOUS_SIGNING_KEYS`` when the key is derived).

The stored form is text: ``"sealed:v1:" + base64url(envelope)``.

A secret that opens under no configured key (the signing key was rotated without keeping
the previous one) cannot be verified: the factor refuses every code with the audit reason
``secret_unreadable``, and :meth:`FactorSealer.open_factor` logs (logger
``flask_authflow.mfa``) which user's which factor, never the secret. Recover by putting the
old key back in ``AUTHFLOW_PREVIOUS_SIGNING_KEYS`` (or
``AUTHFLOW_PREVIOUS_FACTOR_ENCRYPTION_KEYS``), or have the user enroll the factor again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging

from flask_authflow._core.crypto import SessionCrypto, derive_key
from flask_authflow._core.ports import FactorConfig
from flask_authflow.errors import FactorSecretError, SessionDecryptError
from flask_authflow.mfa._settings import FactorSettings

__all__ = ["CODE_HASH_PURPOSE", "FACTOR_KEY_PURPOSE", "SECRET_UNREADABLE", "FactorSealer", "factor_sealer"]

#: HKDF purpose of the factor-secret key derived from the signing key.
FACTOR_KEY_PURPOSE = b"authflow.factor-secrets-at-rest"
#: HKDF purpose of the key that hashes one-time codes (recovery codes, e-mail codes).
CODE_HASH_PURPOSE = b"authflow.one-time-code-hash"
_PREFIX = "sealed:v1:"
#: The audit reason of a code refused because the factor's secret opens under no key.
SECRET_UNREADABLE = "secret_unreadable"  # noqa: S105 - an audit reason, not a secret

log = logging.getLogger("flask_authflow.mfa")


class FactorSealer:
    """Seal and open factor secrets; hash one-time codes under a server key.

    :param crypto: the envelope (current key and previous keys).
    :param code_key: the HMAC key for :meth:`code_digest` (derived from the current key).
    """

    __slots__ = ("_code_key", "_crypto")

    def __init__(self, crypto: SessionCrypto, code_key: bytes) -> None:
        self._crypto = crypto
        self._code_key = code_key

    @classmethod
    def from_key(cls, key: bytes, previous_keys: tuple[bytes, ...] = ()) -> FactorSealer:
        return cls(SessionCrypto(key, previous_keys), derive_key(key, CODE_HASH_PURPOSE))

    def seal(self, factor_id: str, plaintext: bytes) -> str:
        envelope = self._crypto.encrypt(factor_id, plaintext)
        return _PREFIX + base64.urlsafe_b64encode(envelope).decode("ascii")

    def open(self, factor_id: str, sealed: str) -> bytes:
        """:raises FactorSecretError: not a sealed secret, or it does not open for ``factor_id``."""
        if not isinstance(sealed, str) or not sealed.startswith(_PREFIX):
            raise FactorSecretError("the factor secret is not sealed")
        try:
            envelope = base64.urlsafe_b64decode(sealed[len(_PREFIX) :].encode("ascii"))
            return self._crypto.decrypt(factor_id, envelope)
        except (SessionDecryptError, binascii.Error, ValueError, UnicodeEncodeError) as exc:
            raise FactorSecretError("the factor secret could not be opened") from exc

    def open_factor(self, config: FactorConfig) -> bytes | None:
        """The secret of ``config``, or ``None`` (logged, naming the user and the factor,
        never the secret) when it opens under no configured key: that factor then refuses
        every code, with the reason ``secret_unreadable``."""
        try:
            return self.open(config.factor_id, config.secret)
        except FactorSecretError:
            log.error(
                "%s: the %s secret of user %s (factor %s) opens under no configured key; every "
                "code is refused. If the signing key was rotated, put the previous one in "
                "AUTHFLOW_PREVIOUS_SIGNING_KEYS (or AUTHFLOW_PREVIOUS_FACTOR_ENCRYPTION_KEYS), "
                "or have the user enroll the factor again",
                SECRET_UNREADABLE,
                config.kind.value,
                config.user_id,
                config.factor_id,
            )
            return None

    def code_digest(self, scope: str, code: str) -> str:
        """HMAC-SHA256 of a one-time ``code`` within ``scope`` (a factor id or a login
        transaction), hex. Codes are short, so a plain hash could be brute-forced from a
        database dump; under a server key it cannot."""
        message = scope.encode("utf-8") + b"\x00" + code.encode("ascii")
        return hmac.new(self._code_key, message, hashlib.sha256).hexdigest()

    def __repr__(self) -> str:
        return f"<FactorSealer key_id={self._crypto.key_id}>"


def factor_sealer(settings: FactorSettings) -> FactorSealer:
    """The app's sealer from its factor settings (see the module docstring)."""
    previous = list(settings.previous_encryption_keys)
    if settings.encryption_key is not None:
        key = settings.encryption_key
    else:
        key = derive_key(settings.signing_key, FACTOR_KEY_PURPOSE)
        previous += [derive_key(old, FACTOR_KEY_PURPOSE) for old in settings.previous_signing_keys]
    return FactorSealer.from_key(key, tuple(previous))
