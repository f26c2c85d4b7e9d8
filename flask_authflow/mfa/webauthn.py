"""WebAuthn (security keys, platform authenticators, passkeys) with py_webauthn.

One factor of kind ``webauthn`` does three things:

* a **second factor** at login: :meth:`WebAuthnFactor.challenge` hands out request options
  naming the user's credentials, :meth:`WebAuthnFactor.verify` checks the assertion;
* an **enrollment** of any number of keys per user (``replaces_kind`` is false): creation
  options out, attestation in (format ``none``: we trust the key, not its vendor);
* a **passkey login** that names its user itself (:meth:`WebAuthnFactor.passkey_challenge`,
  :meth:`WebAuthnFactor.find_passkey`), for the tenants ``AUTHFLOW_PASSKEY_LOGIN`` allows.

Every challenge is 32 random bytes kept in the factor's slot of the (server-side) session
flow with its expiry, and is single-use: each verification attempt, passed or failed,
empties the slot. A credential is stored as a factor record: ``lookup`` is its id
(base64url), ``counter`` its signature count, ``data`` its COSE public key (base64url),
transports, AAGUID, label and whether it may log in alone (``passkey``). A signature count
that does not grow (once the authenticator counts) is refused, and a growing one is
committed by compare-and-set, so one assertion passes once, across processes.

The WebAuthn user handle is :func:`user_handle`: SHA-256 of a fixed label, the tenant and
the user id. It is stable (a passkey keeps working as long as the user exists), it is not
the user id itself, and it names no personal data; it needs no key, so no key rotation can
orphan the passkeys that carry it.

Needs the ``[webauthn]`` extra (``pip install 'flask-authflow[webauthn]'``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from flask_authflow.clock import utc
from flask_authflow.core.factors import (
    Accepted,
    EnrollContext,
    EnrollmentStart,
    FactorCheck,
    FactorContext,
    Rejected,
    RejectReason,
    StoredEnrollment,
)
from flask_authflow.core.ports import FactorConfig, FactorRecordStore
from flask_authflow.errors import ConfigurationError, InvalidInput, MissingExtraError
from flask_authflow.i18n import N_, gettext
from flask_authflow.mfa.settings import FactorSettings
from flask_authflow.outcomes import FactorCredential, FactorKind

try:
    from webauthn import (
        generate_authentication_options,
        generate_registration_options,
        verify_authentication_response,
        verify_registration_response,
    )
    from webauthn.helpers import (
        base64url_to_bytes,
        bytes_to_base64url,
        options_to_json,
        parse_authentication_credential_json,
        parse_registration_credential_json,
    )
    from webauthn.helpers.exceptions import WebAuthnException
    from webauthn.helpers.structs import (
        AttestationConveyancePreference,
        AuthenticationCredential,
        AuthenticatorSelectionCriteria,
        AuthenticatorTransport,
        CredentialDeviceType,
        PublicKeyCredentialDescriptor,
        ResidentKeyRequirement,
        UserVerificationRequirement,
    )
except ModuleNotFoundError as exc:  # pragma: no cover - webauthn is in the [webauthn] extra
    raise MissingExtraError("webauthn", exc.name or "webauthn") from exc


__all__ = [
    "MAX_CREDENTIAL_ID_CHARS",
    "MAX_CREDENTIAL_SIZE",
    "MAX_LABEL_LENGTH",
    "WebAuthnFactor",
    "WebAuthnSettings",
    "user_handle",
]

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


def _reason(exc: BaseException) -> str:
    """The audit reason of a refused WebAuthn response (``webauthn_invalid`` when unknown)."""
    if isinstance(exc, WebAuthnException):
        message = str(exc)
        for prefix, reason in _REASONS:
            if message.startswith(prefix):
                return reason
    return "webauthn_invalid"


def _handle_of(tenant: str, config: FactorConfig) -> bytes:
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
        """The relying party of an app's :class:`~flask_authflow.mfa.settings.FactorSettings`.

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


def _text(credential: FactorCredential) -> str:
    try:
        return credential.secret_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("a WebAuthn response must be UTF-8 JSON text") from None


def _expired(flow: Mapping[str, Any], now: datetime) -> bool:
    """Whether the challenge of ``flow`` has no readable expiry or is past it."""
    expires = flow.get("expires")
    if not isinstance(expires, str):
        return True
    try:
        until = datetime.fromisoformat(expires)
    except ValueError:
        return True
    return until.tzinfo is None or utc(now) >= until


def _challenge(flow: Mapping[str, Any]) -> bytes | None:
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


def _descriptors(factors: Sequence[FactorConfig]) -> list[PublicKeyCredentialDescriptor]:
    return [
        PublicKeyCredentialDescriptor(id=base64url_to_bytes(f.lookup), transports=_transports(f.data))
        for f in factors
        if f.kind is FactorKind.WEBAUTHN and f.lookup
    ]


def _plain(options_json: str) -> dict[str, Any]:
    """Options as plain JSON values (py_webauthn's dict form keeps enum members)."""
    value: dict[str, Any] = json.loads(options_json)
    return value


def _use_challenge(ctx: FactorContext, challenge: bytes) -> Callable[[], bool]:
    """The single-use update of a challenge: recorded as used until it expires."""
    store, token = ctx.store, hashlib.sha256(challenge).hexdigest()
    expires = ctx.flow.get("expires")
    try:
        expires_at = utc(datetime.fromisoformat(expires)) if isinstance(expires, str) else ctx.now
    except ValueError:
        expires_at = ctx.now
    return lambda: store.use_once(FactorKind.WEBAUTHN.value, token, expires_at=expires_at)


def _parse_assertion(credential: FactorCredential) -> AuthenticationCredential | None:
    """The assertion, or None when it cannot be read or its ``id`` and ``rawId`` differ."""
    try:
        parsed = parse_authentication_credential_json(_text(credential))
    except (WebAuthnException, InvalidInput, ValueError):
        return None
    if bytes_to_base64url(parsed.raw_id) != parsed.id:
        return None
    return parsed


class WebAuthnFactor(StoredEnrollment):
    """The ``webauthn`` factor: second factor, enrollment of several keys, passkey login.

    :param settings: the relying party (:meth:`WebAuthnSettings.from_config`).

    The credential is ``FactorCredential(FactorKind.WEBAUTHN, text)``, where ``text`` is the
    browser's ``PublicKeyCredential`` as JSON (``JSON.stringify(credential)`` in browsers
    that support ``toJSON``, binary fields base64url-encoded).
    """

    __slots__ = ("settings",)
    #: A cheap check: reservation, check and settlement share one transaction.
    expensive = False
    challenge_on_request = False
    #: A signed assertion, not a code.
    digits = None

    def __init__(self, settings: WebAuthnSettings) -> None:
        self.settings = settings

    def __repr__(self) -> str:
        return f"<WebAuthnFactor rp_id={self.settings.rp_id!r}>"

    @property
    def kind(self) -> FactorKind:
        return FactorKind.WEBAUTHN

    @property
    def replaces_kind(self) -> bool:
        return False  # a user may have several keys

    # --- helpers ------------------------------------------------------------------------------

    def _new_challenge(self, now: datetime) -> tuple[bytes, dict[str, Any]]:
        """A fresh challenge and the flow slot that remembers it."""
        challenge = secrets.token_bytes(_CHALLENGE_BYTES)
        slot = {
            "challenge": bytes_to_base64url(challenge),
            "expires": utc(now + self.settings.challenge_ttl).isoformat(),
        }
        return challenge, slot

    @property
    def _timeout_ms(self) -> int:
        return int(self.settings.challenge_ttl.total_seconds() * 1000)

    def _request_options(
        self, challenge: bytes, allow: list[PublicKeyCredentialDescriptor], verification: str
    ) -> dict[str, Any]:
        options = generate_authentication_options(
            rp_id=self.settings.rp_id,
            challenge=challenge,
            timeout=self._timeout_ms,
            allow_credentials=allow,
            user_verification=UserVerificationRequirement(verification),
        )
        return {"publicKey": _plain(options_to_json(options))}

    # --- Factor ------------------------------------------------------------------------------

    def check_input(self, credential: FactorCredential) -> None:
        """At most 16 KiB of JSON: an object with ``id``, ``rawId``, ``response`` and ``type``."""
        if credential.kind is not FactorKind.WEBAUTHN:
            raise InvalidInput("a WebAuthn step takes a WebAuthn credential")
        if len(credential) > MAX_CREDENTIAL_SIZE:
            raise InvalidInput(f"a WebAuthn response is at most {MAX_CREDENTIAL_SIZE // 1024} KiB")
        try:
            value = json.loads(_text(credential))
        except (ValueError, RecursionError):
            raise InvalidInput("a WebAuthn response must be JSON (the PublicKeyCredential)") from None
        if (
            not isinstance(value, dict)
            or not isinstance(value.get("id"), str)
            or not isinstance(value.get("rawId"), str)
            or not isinstance(value.get("response"), dict)
            or value.get("type") != "public-key"
        ):
            raise InvalidInput(
                "a WebAuthn response must be a PublicKeyCredential as JSON: an object with "
                "id, rawId, response and type 'public-key'"
            )

    def challenge(self, ctx: FactorContext) -> Mapping[str, Any]:
        """Request options naming the user's credentials; the challenge goes to the flow."""
        challenge, slot = self._new_challenge(ctx.now)
        ctx.flow_update = slot
        return self._request_options(challenge, _descriptors(ctx.factors), self.settings.user_verification)

    def verify(self, ctx: FactorContext, credential: FactorCredential) -> FactorCheck:
        """Check an assertion against the flow's challenge and the user's credentials.

        The challenge is used up whatever the answer (``ctx.flow_update`` becomes ``{}``).
        """
        try:
            return self._verify(ctx, credential)
        finally:
            ctx.flow_update = {}

    def _verify(self, ctx: FactorContext, credential: FactorCredential) -> FactorCheck:
        challenge = _challenge(ctx.flow)
        if challenge is None:
            return Rejected(RejectReason.NO_CHALLENGE)
        if _expired(ctx.flow, ctx.now):
            return Rejected(RejectReason.EXPIRED)
        parsed = _parse_assertion(credential)
        if parsed is None:
            return Rejected("webauthn_invalid")
        config = _enrolled_key(ctx, parsed)
        if isinstance(config, Rejected):
            return config
        require_uv = self.settings.user_verification == "required" or ctx.purpose == "passkey"
        try:
            verified = verify_authentication_response(
                credential=parsed,
                expected_challenge=challenge,
                expected_rp_id=self.settings.rp_id,
                expected_origin=list(self.settings.origins),
                credential_public_key=base64url_to_bytes(str(config.data["public_key"])),
                credential_current_sign_count=config.counter,
                require_user_verification=require_uv,
            )
        except Exception as exc:  # noqa: BLE001 - a response we cannot verify is refused, never an error
            return Rejected(_reason(exc))
        return _settle_counter(ctx, config, challenge, verified.new_sign_count)

    # --- PasskeyFactor ------------------------------------------------------------------------

    def passkey_challenge(self, ctx: FactorContext) -> Mapping[str, Any]:
        """Request options without credentials (the browser offers the site's passkeys), user
        verification required; the challenge goes to ``ctx.flow_update``."""
        challenge, slot = self._new_challenge(ctx.now)
        ctx.flow_update = slot
        return self._request_options(challenge, [], "required")

    def find_passkey(
        self, store: FactorRecordStore, tenant: str, credential: FactorCredential
    ) -> FactorConfig | None:
        """The confirmed passkey of ``tenant`` the assertion's credential id names.

        ``None`` unless the credential was registered as able to log in alone
        (``data["passkey"]``) and the assertion carries the user handle of its owner
        (a discoverable credential always returns it; WebAuthn §7.2 step 6).
        """
        parsed = _parse_assertion(credential)
        if parsed is None:
            return None
        config = store.find_factor_by_lookup(tenant, FactorKind.WEBAUTHN, parsed.id)
        if config is None or config.kind is not FactorKind.WEBAUTHN or not config.confirmed:
            return None
        if config.data.get("passkey") is not True:
            return None
        handle = parsed.response.user_handle
        if handle is None or not hmac.compare_digest(handle, _handle_of(tenant, config)):
            return None
        return config

    # --- Enrollment ----------------------------------------------------------------------------

    @staticmethod
    def _params(params: Mapping[str, Any]) -> tuple[str, bool]:
        unknown = set(params) - {"label", "passkey"}
        if unknown:
            raise InvalidInput(f"unknown WebAuthn enrollment parameters: {', '.join(sorted(unknown))}")
        passkey = params.get("passkey", False)
        if not isinstance(passkey, bool):
            raise InvalidInput("'passkey' must be true or false")
        label = params.get("label")
        if label is None:
            label = N_("Passkey") if passkey else N_("Security key")  # shown translated
        if not isinstance(label, str) or not label.strip() or len(label.strip()) > MAX_LABEL_LENGTH:
            raise InvalidInput(gettext("A key's label has 1 to %(max)d characters.", max=MAX_LABEL_LENGTH))
        if any(not ch.isprintable() for ch in label):
            raise InvalidInput(gettext("A key's label may not contain control characters."))
        return label.strip(), passkey

    def begin(self, ctx: EnrollContext, params: Mapping[str, Any]) -> EnrollmentStart:
        """Creation options for a new key; a pending factor waits for the attestation.

        :param params: ``label`` (at most 64 characters) and ``passkey`` (true: a
            discoverable credential with user verification, able to log in alone).
        """
        label, passkey = self._params(params)
        store = ctx.store
        # An unfinished earlier enrollment can never be confirmed (its challenge is replaced).
        for stale in store.list_user_factors(ctx.tenant, ctx.user_id, kind=self.kind, include_pending=True):
            if not stale.confirmed:
                store.delete_factor(ctx.tenant, ctx.user_id, stale.factor_id)
        existing = store.list_user_factors(ctx.tenant, ctx.user_id, kind=self.kind)
        challenge, slot = self._new_challenge(ctx.now)
        if passkey:
            selection = AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.REQUIRED,
                user_verification=UserVerificationRequirement.REQUIRED,
            )
        else:
            selection = AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.DISCOURAGED,
                user_verification=UserVerificationRequirement(self.settings.user_verification),
            )
        options = generate_registration_options(
            rp_id=self.settings.rp_id,
            rp_name=self.settings.rp_name,
            user_id=user_handle(ctx.tenant, ctx.user_id),
            user_name=ctx.account_name,
            user_display_name=ctx.account_name,
            challenge=challenge,
            timeout=self._timeout_ms,
            attestation=AttestationConveyancePreference.NONE,
            authenticator_selection=selection,
            exclude_credentials=_descriptors(existing),
        )
        public = _plain(options_to_json(options))
        public["extensions"] = {"credProps": True}  # tells whether the key is discoverable
        factor_id = secrets.token_urlsafe(16)
        store.add_factor(
            ctx.tenant,
            FactorConfig(
                user_id=ctx.user_id,
                kind=self.kind,
                created_at=ctx.now,
                factor_id=factor_id,
                confirmed=False,
                data={"label": label, "passkey": passkey},
            ),
        )
        ctx.flow_update = {**slot, "factor_id": factor_id, "passkey": passkey}
        return EnrollmentStart(factor_id=factor_id, kind=self.kind, public={"publicKey": public})

    def confirm(self, ctx: EnrollContext, factor_id: str, credential: FactorCredential) -> FactorCheck:
        """Check the attestation; on success the pending factor carries the credential (the
        service then confirms it). The challenge is used up whatever the answer."""
        try:
            return self._confirm(ctx, factor_id, credential)
        finally:
            ctx.flow_update = {}

    def _confirm(self, ctx: EnrollContext, factor_id: str, credential: FactorCredential) -> FactorCheck:
        flow = ctx.flow
        challenge = _challenge(flow)
        if challenge is None or flow.get("factor_id") != factor_id:
            return Rejected(RejectReason.NO_CHALLENGE)
        if _expired(flow, ctx.now):
            return Rejected(RejectReason.EXPIRED)
        store = ctx.store
        pending = store.get_factor(ctx.tenant, ctx.user_id, factor_id)
        if pending is None or pending.kind is not self.kind or pending.confirmed:
            return Rejected(RejectReason.NOT_ENROLLED)
        label = pending.data.get("label")
        record = self._attested(
            credential,
            challenge,
            FactorConfig(
                user_id=ctx.user_id, kind=self.kind, created_at=pending.created_at, factor_id=factor_id,
                data={"label": label if isinstance(label, str) else "Security key"},
            ),
            requested=flow.get("passkey") is True,
        )  # fmt: skip
        if isinstance(record, Rejected):
            return record
        store.delete_factor(ctx.tenant, ctx.user_id, factor_id)
        try:
            store.add_factor(ctx.tenant, record)
        except ValueError:
            return Rejected("webauthn_duplicate")  # this credential is registered already
        return Accepted(factor_id)

    def _attested(
        self, credential: FactorCredential, challenge: bytes, base: FactorConfig, *, requested: bool
    ) -> FactorConfig | Rejected:
        """``base`` carrying the credential the attestation proves (unconfirmed), or why not.
        ``requested``: a passkey was asked for (a resident key with user verification)."""
        try:
            text = _text(credential)
            parsed = parse_registration_credential_json(text)
            verified = verify_registration_response(
                credential=parsed,
                expected_challenge=challenge,
                expected_rp_id=self.settings.rp_id,
                expected_origin=list(self.settings.origins),
                require_user_verification=requested or self.settings.user_verification == "required",
            )
        except Exception as exc:  # noqa: BLE001 - a response we cannot verify is refused, never an error
            return Rejected(_reason(exc))
        if not hmac.compare_digest(parsed.raw_id, verified.credential_id):
            return Rejected("webauthn_invalid")  # the attested credential is not the one named
        credential_id = bytes_to_base64url(verified.credential_id)
        if len(credential_id) > MAX_CREDENTIAL_ID_CHARS:
            return Rejected("webauthn_credential_id_too_long")
        backup_eligible = verified.credential_device_type == CredentialDeviceType.MULTI_DEVICE
        return replace(
            base,
            counter=verified.sign_count,
            lookup=credential_id,
            confirmed=False,
            data={
                **base.data,
                # May log in alone: asked for (a resident key with user verification), or the
                # browser says it is discoverable (credProps), or it is a synced passkey.
                "passkey": requested or _discoverable(text) or backup_eligible,
                "public_key": bytes_to_base64url(verified.credential_public_key),
                "transports": [t.value for t in parsed.response.transports or ()],
                "aaguid": verified.aaguid,
                "backup_eligible": backup_eligible,
                "backed_up": verified.credential_backed_up,
                "user_verified": verified.user_verified,
            },
        )

    # --- a new account's first passkey (passkey-only sign-up) ---------------------------------

    def signup_options(self, account_name: str, now: datetime) -> tuple[Mapping[str, Any], dict[str, Any]]:
        """Creation options for the passkey of an account that does not exist yet, and the
        session slot that remembers the challenge and the new user handle (32 random bytes:
        the account has no user id yet; the factor keeps the handle, as an imported one does).

        A discoverable credential with user verification: the account has no other way in."""
        challenge, slot = self._new_challenge(now)
        handle = secrets.token_bytes(32)
        options = generate_registration_options(
            rp_id=self.settings.rp_id,
            rp_name=self.settings.rp_name,
            user_id=handle,
            user_name=account_name,
            user_display_name=account_name,
            challenge=challenge,
            timeout=self._timeout_ms,
            attestation=AttestationConveyancePreference.NONE,
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.REQUIRED,
                user_verification=UserVerificationRequirement.REQUIRED,
            ),
        )
        public = _plain(options_to_json(options))
        public["extensions"] = {"credProps": True}
        return {"publicKey": public}, {**slot, "user_handle": bytes_to_base64url(handle)}

    def signup_credential(
        self, slot: Mapping[str, Any], credential: FactorCredential, user_id: str, now: datetime
    ) -> FactorConfig | Rejected:
        """The confirmed passkey factor of a new account (``user_id``) from the attestation
        answering :meth:`signup_options`' challenge (kept in ``slot``), or why not. The caller
        stores it in the unit of work that creates the account."""
        challenge = _challenge(slot)
        handle = slot.get("user_handle")
        if challenge is None or not isinstance(handle, str) or not handle:
            return Rejected(RejectReason.NO_CHALLENGE)
        if _expired(slot, now):
            return Rejected(RejectReason.EXPIRED)
        base = FactorConfig(
            user_id=user_id, kind=self.kind, created_at=now, factor_id=secrets.token_urlsafe(16),
            data={"label": "Passkey", "user_handle": handle},
        )  # fmt: skip
        record = self._attested(credential, challenge, base, requested=True)
        return record if isinstance(record, Rejected) else replace(record, confirmed=True)


def _discoverable(text: str) -> bool:
    """Whether the browser reported the new credential as discoverable (``credProps.rk``)."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    results = value.get("clientExtensionResults") if isinstance(value, dict) else None
    props = results.get("credProps") if isinstance(results, dict) else None
    return isinstance(props, dict) and props.get("rk") is True


def _enrolled_key(ctx: FactorContext, parsed: AuthenticationCredential) -> FactorConfig | Rejected:
    """The user's confirmed key that the assertion names, or why it cannot be used."""
    config = next(
        (f for f in ctx.factors if f.kind is FactorKind.WEBAUTHN and f.confirmed and f.lookup == parsed.id),
        None,
    )
    if config is None or config.user_id != ctx.user_id:
        return Rejected(RejectReason.NOT_ENROLLED)  # another user's key, or a removed one
    if ctx.purpose == "passkey" and config.data.get("passkey") is not True:
        return Rejected(RejectReason.NOT_ENROLLED)  # a second-factor key cannot log in alone
    handle = parsed.response.user_handle
    if handle is not None and not hmac.compare_digest(handle, _handle_of(ctx.tenant, config)):
        return Rejected("webauthn_user_handle")
    public_key = config.data.get("public_key")
    if not isinstance(public_key, str) or not public_key:
        return Rejected("webauthn_invalid")
    return config


def _settle_counter(
    ctx: FactorContext, config: FactorConfig, challenge: bytes, new_count: int
) -> FactorCheck:
    """Accept a verified assertion, advancing the key's signature counter in the step's commit."""
    if new_count == 0 and config.counter == 0:
        # An authenticator without a counter (synced passkeys): the challenge, which
        # parallel requests of one session all read, is used up in the store instead.
        return Accepted(config.factor_id, commit=_use_challenge(ctx, challenge))
    if new_count <= config.counter:  # py_webauthn refuses this already; never accept it
        return Rejected("webauthn_sign_count")
    store, tenant, factor_id, now, user_id = ctx.store, ctx.tenant, config.factor_id, ctx.now, config.user_id
    return Accepted(
        factor_id, commit=lambda: store.advance_factor_counter(tenant, user_id, factor_id, new_count, now=now)
    )
