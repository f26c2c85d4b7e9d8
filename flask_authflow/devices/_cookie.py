"""The device cookie: a long-lived, signed value naming a random device id, the user it
was issued to and the User-Agent it is bound to.

It is signed with itsdangerous under the app's signing key (and still verified under the
previous keys of the key ring), with a salt of its own, so it can never pass for a session
cookie or the other way round. The User-Agent is bound as the session binds it: an HMAC
of the header under a key derived (HKDF) from the signing key, never the header itself.

Reading never fails: a cookie that is malformed, forged, too old or bound to another
User-Agent is *ignored* (the browser counts as a new device) and the reason is kept, so
the login can audit it.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from flask_authflow._core.crypto import derive_key
from flask_authflow._core.devices import check_device_id
from flask_authflow.errors import InvalidInput

__all__ = [
    "COOKIE_SALT",
    "MAX_COOKIE_LENGTH",
    "DeviceClaim",
    "DeviceCookie",
    "DeviceReading",
    "new_device_id",
]

#: itsdangerous salt of the device cookie (separates it from every other use of the key).
COOKIE_SALT = "authflow.device"
#: HKDF purpose of the device cookie's User-Agent binding key.
FINGERPRINT_PURPOSE = b"device-fingerprint"
#: A valid cookie is about 250 characters; longer values are ignored unread.
MAX_COOKIE_LENGTH = 512


def new_device_id() -> str:
    """A fresh random device id (256 bits, URL-safe) that does not begin with ``-``: an
    operator passes it to ``flask authflow devices forget``, whose command line would read
    such an id as an option (one id in 64 was)."""
    while (device_id := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return device_id


@dataclass(frozen=True, slots=True)
class DeviceClaim:
    """What a valid device cookie says: the device id and whom it was issued to."""

    device_id: str
    tenant: str
    user_id: str


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """The result of reading a device cookie: the claim, or why there is none
    (``"forged"``, ``"expired"``, ``"ua_mismatch"``; ``None`` when no cookie was sent)."""

    claim: DeviceClaim | None
    refused: str | None = None


class DeviceCookie:
    """Issue and read device cookies.

    :param signing_key: the app's current signing key (``AUTHFLOW_SIGNING_KEY``).
    :param previous_keys: retired keys whose cookies are still accepted.
    :param lifetime: how long a cookie is valid after it was issued.
    """

    def __init__(
        self, signing_key: bytes, previous_keys: Iterable[bytes] = (), *, lifetime: timedelta
    ) -> None:
        keys = [*previous_keys, signing_key]  # itsdangerous signs with the last one
        self._serializer = URLSafeTimedSerializer(keys, salt=COOKIE_SALT)
        self._binding_keys = [derive_key(key, FINGERPRINT_PURPOSE) for key in reversed(keys)]
        self.lifetime = lifetime

    def _fingerprint(self, key: bytes, user_agent: str | None) -> str:
        return hmac.digest(key, (user_agent or "").encode("utf-8", "surrogatepass"), "sha256").hex()

    def issue(self, claim: DeviceClaim, user_agent: str | None) -> str:
        """The cookie value for ``claim``, bound to ``user_agent`` (absent counts as empty)."""
        payload = {
            "d": claim.device_id,
            "t": claim.tenant,
            "u": claim.user_id,
            "f": self._fingerprint(self._binding_keys[0], user_agent),
        }
        return str(self._serializer.dumps(payload))

    def read(self, raw: str | None, user_agent: str | None) -> DeviceReading:
        """The claim of cookie value ``raw`` for a request with ``user_agent``; never raises."""
        if raw is None or raw == "":
            return DeviceReading(None)
        if len(raw) > MAX_COOKIE_LENGTH or not raw.isascii():
            return DeviceReading(None, "forged")
        try:
            payload: Any = self._serializer.loads(raw, max_age=int(self.lifetime.total_seconds()))
        except SignatureExpired:
            return DeviceReading(None, "expired")
        except (BadSignature, ValueError, UnicodeError):
            return DeviceReading(None, "forged")
        claim = _claim_of(payload)
        if claim is None:
            return DeviceReading(None, "forged")
        bound = payload["f"]
        if not any(
            hmac.compare_digest(bound, self._fingerprint(key, user_agent)) for key in self._binding_keys
        ):
            return DeviceReading(None, "ua_mismatch")
        return DeviceReading(claim)


def _claim_of(payload: Any) -> DeviceClaim | None:
    """The claim in a verified payload, or ``None`` if it is not one this code writes."""
    if not isinstance(payload, dict) or set(payload) != {"d", "t", "u", "f"}:
        return None
    if not all(isinstance(payload[k], str) for k in ("d", "t", "u", "f")):
        return None
    try:
        device_id = check_device_id(payload["d"])
    except InvalidInput:
        return None
    if not payload["t"] or not payload["u"] or not payload["f"].isascii():
        return None
    return DeviceClaim(device_id, payload["t"], payload["u"])
