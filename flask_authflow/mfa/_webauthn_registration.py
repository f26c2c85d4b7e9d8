"""The registration ceremonies: a key enrolled by a signed-in user (creation options out,
attestation in, format ``none``: we trust the key, not its vendor), and the first passkey of
an account that does not exist yet (passkey-only sign-up)."""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from webauthn import generate_registration_options, verify_registration_response
from webauthn.helpers import bytes_to_base64url, options_to_json, parse_registration_credential_json
from webauthn.helpers.structs import (
    AttestationConveyancePreference,
    AuthenticatorSelectionCriteria,
    CredentialDeviceType,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from flask_authflow._core.factors import (
    Accepted,
    EnrollContext,
    EnrollmentStart,
    FactorCheck,
    Rejected,
    RejectReason,
)
from flask_authflow._core.ports import FactorConfig
from flask_authflow._i18n import N_, gettext
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.errors import InvalidInput
from flask_authflow.mfa._webauthn_ceremony import (
    MAX_CREDENTIAL_ID_CHARS,
    MAX_LABEL_LENGTH,
    WebAuthnSettings,
    challenge_expired,
    credential_text,
    descriptors,
    flow_challenge,
    new_challenge,
    plain_options,
    refusal_reason,
    timeout_ms,
    user_handle,
)


def _enrollment_params(params: Mapping[str, Any]) -> tuple[str, bool]:
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


def begin_enrollment(
    settings: WebAuthnSettings, ctx: EnrollContext, params: Mapping[str, Any]
) -> EnrollmentStart:
    """Creation options for a new key; a pending factor waits for the attestation.

    :param params: ``label`` (at most 64 characters) and ``passkey`` (true: a
        discoverable credential with user verification, able to log in alone).
    """
    label, passkey = _enrollment_params(params)
    store = ctx.store
    # An unfinished earlier enrollment can never be confirmed (its challenge is replaced).
    for stale in store.list_user_factors(
        ctx.tenant, ctx.user_id, kind=FactorKind.WEBAUTHN, include_pending=True
    ):
        if not stale.confirmed:
            store.delete_factor(ctx.tenant, ctx.user_id, stale.factor_id)
    existing = store.list_user_factors(ctx.tenant, ctx.user_id, kind=FactorKind.WEBAUTHN)
    challenge, slot = new_challenge(settings, ctx.now)
    if passkey:
        selection = AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.REQUIRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        )
    else:
        selection = AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.DISCOURAGED,
            user_verification=UserVerificationRequirement(settings.user_verification),
        )
    options = generate_registration_options(
        rp_id=settings.rp_id,
        rp_name=settings.rp_name,
        user_id=user_handle(ctx.tenant, ctx.user_id),
        user_name=ctx.account_name,
        user_display_name=ctx.account_name,
        challenge=challenge,
        timeout=timeout_ms(settings),
        attestation=AttestationConveyancePreference.NONE,
        authenticator_selection=selection,
        exclude_credentials=descriptors(existing),
    )
    public = plain_options(options_to_json(options))
    public["extensions"] = {"credProps": True}  # tells whether the key is discoverable
    factor_id = secrets.token_urlsafe(16)
    store.add_factor(
        ctx.tenant,
        FactorConfig(
            user_id=ctx.user_id,
            kind=FactorKind.WEBAUTHN,
            created_at=ctx.now,
            factor_id=factor_id,
            confirmed=False,
            data={"label": label, "passkey": passkey},
        ),
    )
    ctx.flow_update = {**slot, "factor_id": factor_id, "passkey": passkey}
    return EnrollmentStart(factor_id=factor_id, kind=FactorKind.WEBAUTHN, public={"publicKey": public})


def confirm_enrollment(
    settings: WebAuthnSettings, ctx: EnrollContext, factor_id: str, credential: FactorCredential
) -> FactorCheck:
    """Check the attestation of the key ``begin_enrollment`` started; on success the pending
    factor carries the credential."""
    flow = ctx.flow
    challenge = flow_challenge(flow)
    if challenge is None or flow.get("factor_id") != factor_id:
        return Rejected(RejectReason.NO_CHALLENGE)
    if challenge_expired(flow, ctx.now):
        return Rejected(RejectReason.EXPIRED)
    store = ctx.store
    pending = store.get_factor(ctx.tenant, ctx.user_id, factor_id)
    if pending is None or pending.kind is not FactorKind.WEBAUTHN or pending.confirmed:
        return Rejected(RejectReason.NOT_ENROLLED)
    label = pending.data.get("label")
    record = _attested(
        settings,
        credential,
        challenge,
        FactorConfig(
            user_id=ctx.user_id, kind=FactorKind.WEBAUTHN, created_at=pending.created_at, factor_id=factor_id,
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
    settings: WebAuthnSettings,
    credential: FactorCredential,
    challenge: bytes,
    base: FactorConfig,
    *,
    requested: bool,
) -> FactorConfig | Rejected:
    """``base`` carrying the credential the attestation proves (unconfirmed), or why not.
    ``requested``: a passkey was asked for (a resident key with user verification)."""
    try:
        text = credential_text(credential)
        parsed = parse_registration_credential_json(text)
        verified = verify_registration_response(
            credential=parsed,
            expected_challenge=challenge,
            expected_rp_id=settings.rp_id,
            expected_origin=list(settings.origins),
            require_user_verification=requested or settings.user_verification == "required",
        )
    except Exception as exc:  # noqa: BLE001 - a response we cannot verify is refused, never an error
        return Rejected(refusal_reason(exc))
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


def signup_options(
    settings: WebAuthnSettings, account_name: str, now: datetime
) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """Creation options for the passkey of an account that does not exist yet, and the
    session slot that remembers the challenge and the new user handle (32 random bytes:
    the account has no user id yet; the factor keeps the handle, as an imported one does).

    A discoverable credential with user verification: the account has no other way in."""
    challenge, slot = new_challenge(settings, now)
    handle = secrets.token_bytes(32)
    options = generate_registration_options(
        rp_id=settings.rp_id,
        rp_name=settings.rp_name,
        user_id=handle,
        user_name=account_name,
        user_display_name=account_name,
        challenge=challenge,
        timeout=timeout_ms(settings),
        attestation=AttestationConveyancePreference.NONE,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.REQUIRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
    )
    public = plain_options(options_to_json(options))
    public["extensions"] = {"credProps": True}
    return {"publicKey": public}, {**slot, "user_handle": bytes_to_base64url(handle)}


def signup_credential(
    settings: WebAuthnSettings,
    slot: Mapping[str, Any],
    credential: FactorCredential,
    user_id: str,
    now: datetime,
) -> FactorConfig | Rejected:
    """The confirmed passkey factor of a new account (``user_id``) from the attestation
    answering :func:`signup_options`' challenge (kept in ``slot``), or why not. The caller
    stores it in the unit of work that creates the account."""
    challenge = flow_challenge(slot)
    handle = slot.get("user_handle")
    if challenge is None or not isinstance(handle, str) or not handle:
        return Rejected(RejectReason.NO_CHALLENGE)
    if challenge_expired(slot, now):
        return Rejected(RejectReason.EXPIRED)
    base = FactorConfig(
        user_id=user_id, kind=FactorKind.WEBAUTHN, created_at=now, factor_id=secrets.token_urlsafe(16),
        data={"label": "Passkey", "user_handle": handle},
    )  # fmt: skip
    record = _attested(settings, credential, challenge, base, requested=True)
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
