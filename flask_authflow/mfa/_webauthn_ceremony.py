"""The relying party and its challenges, shared by the WebAuthn ceremonies: the settings, the
user handle, the single-use challenge kept in the session flow, and the audit reasons of a
refused response (see :mod:`flask_authflow.mfa._webauthn`, which re-exports the public names)."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from webauthn.helpers import base64url_to_bytes, bytes_to_base64url
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import AuthenticatorTransport, PublicKeyCredentialDescriptor

from flask_authflow._clock import utc
from flask_authflow._core.ports import FactorConfig
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.errors import ConfigurationError, InvalidInput
from flask_authflow.mfa._settings import FactorSettings

#: The largest credential JSON accepted (a browser's response is 1-3 KiB).
MAX_CREDENTIAL_SIZE = 16 * 1024
#: The longest label a user may give a key.
MAX_LABEL_LENGTH = 64
#: The longest credential id accepted at enrollment, base64url (191 bytes): what the stores'
#: ``lookup`` column holds. WebAuthn allows up to 1023 bytes; authenticators use 16 to 128.
MAX_CREDENTIAL_ID_CHARS = 255
#: Random bytes per challenge (WebAuthn asks for at least 16).
_CHALLENGE_BYTES = 32
_USER_VERIFICATION = ("required", "preferred", "discouraged")
_HANDLE_LABEL = b"flask-authflow webauthn user handle\x00"


# Messages of py_webauthn's InvalidRegistrationResponse / InvalidAuthenticationResponse,
# by prefix (never by substring: some quote values the client chose), and the audit reason.
_REASONS: tuple[tuple[str, str], ...] = (
    ("Unexpected client data origin", "webauthn_origin"),
    ("Unexpected RP ID hash", "webauthn_rp_id"),
    ("Client data challenge was not expected challenge", "webauthn_challenge"),
    ("Could not verify authentication signature", "webauthn_signature"),
    ("Response sign count of", "webauthn_sign_count"),
    ("User verification is required", "webauthn_user_verification"),
    ("User was not present", "webauthn_user_presence"),
    ("User presence was required", "webauthn_user_presence"),
    ("Unexpected client data type", "webauthn_client_data_type"),
    ("Unsupported credential public key alg", "webauthn_algorithm"),
    ("Unsupported attestation type", "webauthn_attestation"),
    ("None attestation had unexpected attestation statement", "webauthn_attestation"),
)


def refusal_reason(exc: BaseException) -> str:
    """The audit reason of a refused WebAuthn response (``webauthn_invalid`` when unknown)."""
    if isinstance(exc, WebAuthnException):
        message = str(exc)
        for prefix, reason in _REASONS:
            if message.startswith(prefix):
                return reason
    return "webauthn_invalid"


def handle_of(tenant: str, config: FactorConfig) -> bytes:
    """The user handle the credential's authenticator holds: ours, or the one another
    application gave it (a credential brought by an import, see :mod:`.webauthn_record`)."""
    kept = config.data.get("user_handle")
    return base64url_to_bytes(kept) if isinstance(kept, str) else user_handle(tenant, config.user_id)


def user_handle(tenant: str, user_id: str) -> bytes:
    """The WebAuthn user handle of ``user_id`` in ``tenant`` (32 bytes).

    SHA-256 of a fixed label, the tenant and the user id: stable for the user's lifetime,
    never the user id itself, no personal data, and no key that could rotate under it.
    """
    return hashlib.sha256(_HANDLE_LABEL + tenant.encode() + b"\x00" + user_id.encode()).digest()


@dataclass(frozen=True, slots=True)
class WebAuthnSettings:
    """The relying party.

    :param rp_id: the domain credentials are scoped to (``example.com``); every origin must
        be on it or a subdomain of it.
    :param rp_name: what the browser shows for the site.
    :param origins: the exact origins ceremonies may come from (``https://example.com``).
    :param user_verification: ``"required"``, ``"preferred"`` or ``"discouraged"``: whether a
        second-factor key must verify the user (PIN, biometrics). Passkey logins and
        passkey enrollments always require it.
    :param challenge_ttl: how long a challenge may be answered.
    """

    rp_id: str
    rp_name: str
    origins: tuple[str, ...]
    user_verification: str = "preferred"
    challenge_ttl: timedelta = timedelta(minutes=5)

    def __post_init__(self) -> None:
        if not isinstance(self.rp_id, str) or not self.rp_id or "/" in self.rp_id or ":" in self.rp_id:
            raise ConfigurationError(f"rp_id must be a bare domain such as 'example.com', got {self.rp_id!r}")
        if not isinstance(self.rp_name, str) or not self.rp_name:
            raise ConfigurationError("rp_name must be a non-empty string (the site's name)")
        if (
            not isinstance(self.origins, tuple)
            or not self.origins
            or not all(isinstance(o, str) and o for o in self.origins)
        ):
            raise ConfigurationError(
                "origins must be a non-empty tuple of origins such as 'https://example.com'"
            )
        if self.user_verification not in _USER_VERIFICATION:
            raise ConfigurationError(
                f"user_verification must be 'required', 'preferred' or 'discouraged', "
                f"got {self.user_verification!r}"
            )
        if not timedelta(seconds=30) <= self.challenge_ttl <= timedelta(minutes=30):
            raise ConfigurationError("challenge_ttl must be between 30 seconds and 30 minutes")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> WebAuthnSettings:
        """The settings of the ``AUTHFLOW_WEBAUTHN_*`` keys of ``config`` (``app.config``;
        ``rp_name`` defaults to ``AUTHFLOW_SITE_NAME``, then to the RP id).

        :raises ConfigurationError: ``AUTHFLOW_WEBAUTHN_RP_ID`` is not set."""
        return cls.from_factor_settings(FactorSettings.from_config(config))

    @classmethod
    def from_factor_settings(cls, settings: FactorSettings) -> WebAuthnSettings:
        """The relying party of an app's :class:`~flask_authflow.mfa._settings.FactorSettings`.

        :raises ConfigurationError: ``AUTHFLOW_WEBAUTHN_RP_ID`` is not set."""
        rp_id = settings.webauthn_rp_id
        if rp_id is None:
            raise ConfigurationError("WebAuthn needs AUTHFLOW_WEBAUTHN_RP_ID and AUTHFLOW_WEBAUTHN_ORIGINS")
        return cls(
            rp_id=rp_id,
            rp_name=settings.webauthn_rp_name or settings.site_name or rp_id,
            origins=settings.webauthn_origins,
            user_verification=settings.webauthn_user_verification,
        )


def new_challenge(settings: WebAuthnSettings, now: datetime) -> tuple[bytes, dict[str, Any]]:
    """A fresh challenge and the flow slot that remembers it."""
    challenge = secrets.token_bytes(_CHALLENGE_BYTES)
    slot = {
        "challenge": bytes_to_base64url(challenge),
        "expires": utc(now + settings.challenge_ttl).isoformat(),
    }
    return challenge, slot


def timeout_ms(settings: WebAuthnSettings) -> int:
    """How long the browser may take to answer a challenge, in milliseconds."""
    return int(settings.challenge_ttl.total_seconds() * 1000)


def credential_text(credential: FactorCredential) -> str:
    """The browser's response as text. :raises InvalidInput: it is not UTF-8."""
    try:
        return credential.secret_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("a WebAuthn response must be UTF-8 JSON text") from None


def challenge_expired(flow: Mapping[str, Any], now: datetime) -> bool:
    """Whether the challenge of ``flow`` has no readable expiry or is past it."""
    expires = flow.get("expires")
    if not isinstance(expires, str):
        return True
    try:
        until = datetime.fromisoformat(expires)
    except ValueError:
        return True
    return until.tzinfo is None or utc(now) >= until


def flow_challenge(flow: Mapping[str, Any]) -> bytes | None:
    """The challenge kept in ``flow``, or ``None`` when there is none (or it is unreadable)."""
    challenge = flow.get("challenge")
    if not isinstance(challenge, str) or not challenge:
        return None
    try:
        return base64url_to_bytes(challenge)
    except ValueError:
        return None


def _transports(data: Mapping[str, Any]) -> list[AuthenticatorTransport] | None:
    known = []
    for value in data.get("transports") or ():
        try:
            known.append(AuthenticatorTransport(value))
        except ValueError:
            continue
    return known or None


def descriptors(factors: Sequence[FactorConfig]) -> list[PublicKeyCredentialDescriptor]:
    """The WebAuthn keys among ``factors``, as options name them."""
    return [
        PublicKeyCredentialDescriptor(id=base64url_to_bytes(f.lookup), transports=_transports(f.data))
        for f in factors
        if f.kind is FactorKind.WEBAUTHN and f.lookup
    ]


def plain_options(options_json: str) -> dict[str, Any]:
    """Options as plain JSON values (py_webauthn's dict form keeps enum members)."""
    value: dict[str, Any] = json.loads(options_json)
    return value
