"""The authentication ceremony: request options out, an assertion in, checked against the
flow's challenge and the user's enrolled keys; a passkey assertion names its user itself.
The signature counter advances (or the challenge is used up) in the step's commit."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from datetime import datetime
from typing import Any

from webauthn import generate_authentication_options, verify_authentication_response
from webauthn.helpers import (
    base64url_to_bytes,
    bytes_to_base64url,
    options_to_json,
    parse_authentication_credential_json,
)
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticationCredential,
    PublicKeyCredentialDescriptor,
    UserVerificationRequirement,
)

from flask_authflow._clock import utc
from flask_authflow._core.factors import Accepted, FactorCheck, FactorContext, Rejected, RejectReason
from flask_authflow._core.ports import FactorConfig, FactorRecordStore
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.errors import InvalidInput
from flask_authflow.mfa._webauthn_ceremony import (
    WebAuthnSettings,
    challenge_expired,
    credential_text,
    flow_challenge,
    handle_of,
    plain_options,
    refusal_reason,
    timeout_ms,
)


def request_options(
    settings: WebAuthnSettings,
    challenge: bytes,
    allow: list[PublicKeyCredentialDescriptor],
    verification: str,
) -> dict[str, Any]:
    """Request options for ``challenge`` naming the keys in ``allow`` (none: the browser offers
    the site's passkeys)."""
    options = generate_authentication_options(
        rp_id=settings.rp_id,
        challenge=challenge,
        timeout=timeout_ms(settings),
        allow_credentials=allow,
        user_verification=UserVerificationRequirement(verification),
    )
    return {"publicKey": plain_options(options_to_json(options))}


def verify_assertion(
    settings: WebAuthnSettings, ctx: FactorContext, credential: FactorCredential
) -> FactorCheck:
    """Check an assertion against the flow's challenge and the user's enrolled keys."""
    challenge = flow_challenge(ctx.flow)
    if challenge is None:
        return Rejected(RejectReason.NO_CHALLENGE)
    if challenge_expired(ctx.flow, ctx.now):
        return Rejected(RejectReason.EXPIRED)
    parsed = _parse_assertion(credential)
    if parsed is None:
        return Rejected("webauthn_invalid")
    config = _enrolled_key(ctx, parsed)
    if isinstance(config, Rejected):
        return config
    require_uv = settings.user_verification == "required" or ctx.purpose == "passkey"
    try:
        verified = verify_authentication_response(
            credential=parsed,
            expected_challenge=challenge,
            expected_rp_id=settings.rp_id,
            expected_origin=list(settings.origins),
            credential_public_key=base64url_to_bytes(str(config.data["public_key"])),
            credential_current_sign_count=config.counter,
            require_user_verification=require_uv,
        )
    except Exception as exc:  # noqa: BLE001 - a response we cannot verify is refused, never an error
        return Rejected(refusal_reason(exc))
    return _settle_counter(ctx, config, challenge, verified.new_sign_count)


def find_passkey(store: FactorRecordStore, tenant: str, credential: FactorCredential) -> FactorConfig | None:
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
    if handle is None or not hmac.compare_digest(handle, handle_of(tenant, config)):
        return None
    return config


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
        parsed = parse_authentication_credential_json(credential_text(credential))
    except (WebAuthnException, InvalidInput, ValueError):
        return None
    if bytes_to_base64url(parsed.raw_id) != parsed.id:
        return None
    return parsed


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
    if handle is not None and not hmac.compare_digest(handle, handle_of(ctx.tenant, config)):
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
