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

This module keeps the factor and the public names; the ceremonies are private modules beside
it: ``_webauthn_ceremony`` (the relying party, the user handle, the single-use challenge),
``_webauthn_assertion`` (authentication, passkey login) and ``_webauthn_registration``
(enrollment, passkey-only sign-up).

Needs the ``[webauthn]`` extra (``pip install 'flask-authflow[webauthn]'``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from flask_authflow._core.factors import (
    EnrollContext,
    EnrollmentStart,
    FactorCheck,
    FactorContext,
    Rejected,
    StoredEnrollment,
)
from flask_authflow._core.ports import FactorConfig, FactorRecordStore
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.errors import InvalidInput, MissingExtraError

try:
    from flask_authflow.mfa import _webauthn_assertion as assertion
    from flask_authflow.mfa import _webauthn_registration as registration
    from flask_authflow.mfa._webauthn_ceremony import (
        MAX_CREDENTIAL_ID_CHARS,
        MAX_CREDENTIAL_SIZE,
        MAX_LABEL_LENGTH,
        WebAuthnSettings,
        credential_text,
        descriptors,
        new_challenge,
        user_handle,
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

    # --- Factor ------------------------------------------------------------------------------

    def check_input(self, credential: FactorCredential) -> None:
        """At most 16 KiB of JSON: an object with ``id``, ``rawId``, ``response`` and ``type``."""
        if credential.kind is not FactorKind.WEBAUTHN:
            raise InvalidInput("a WebAuthn step takes a WebAuthn credential")
        if len(credential) > MAX_CREDENTIAL_SIZE:
            raise InvalidInput(f"a WebAuthn response is at most {MAX_CREDENTIAL_SIZE // 1024} KiB")
        try:
            value = json.loads(credential_text(credential))
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
        challenge, slot = new_challenge(self.settings, ctx.now)
        ctx.flow_update = slot
        return assertion.request_options(
            self.settings, challenge, descriptors(ctx.factors), self.settings.user_verification
        )

    def verify(self, ctx: FactorContext, credential: FactorCredential) -> FactorCheck:
        """Check an assertion against the flow's challenge and the user's credentials.

        The challenge is used up whatever the answer (``ctx.flow_update`` becomes ``{}``).
        """
        try:
            return assertion.verify_assertion(self.settings, ctx, credential)
        finally:
            ctx.flow_update = {}

    # --- PasskeyFactor ------------------------------------------------------------------------

    def passkey_challenge(self, ctx: FactorContext) -> Mapping[str, Any]:
        """Request options without credentials (the browser offers the site's passkeys), user
        verification required; the challenge goes to ``ctx.flow_update``."""
        challenge, slot = new_challenge(self.settings, ctx.now)
        ctx.flow_update = slot
        return assertion.request_options(self.settings, challenge, [], "required")

    def find_passkey(
        self, store: FactorRecordStore, tenant: str, credential: FactorCredential
    ) -> FactorConfig | None:
        """The confirmed passkey of ``tenant`` the assertion's credential id names.

        ``None`` unless the credential was registered as able to log in alone
        (``data["passkey"]``) and the assertion carries the user handle of its owner
        (a discoverable credential always returns it; WebAuthn §7.2 step 6).
        """
        return assertion.find_passkey(store, tenant, credential)

    # --- Enrollment ----------------------------------------------------------------------------

    def begin(self, ctx: EnrollContext, params: Mapping[str, Any]) -> EnrollmentStart:
        """Creation options for a new key; a pending factor waits for the attestation.

        :param params: ``label`` (at most 64 characters) and ``passkey`` (true: a
            discoverable credential with user verification, able to log in alone).
        """
        return registration.begin_enrollment(self.settings, ctx, params)

    def confirm(self, ctx: EnrollContext, factor_id: str, credential: FactorCredential) -> FactorCheck:
        """Check the attestation; on success the pending factor carries the credential (the
        service then confirms it). The challenge is used up whatever the answer."""
        try:
            return registration.confirm_enrollment(self.settings, ctx, factor_id, credential)
        finally:
            ctx.flow_update = {}

    # --- a new account's first passkey (passkey-only sign-up) ---------------------------------

    def signup_options(self, account_name: str, now: datetime) -> tuple[Mapping[str, Any], dict[str, Any]]:
        """Creation options for the passkey of an account that does not exist yet, and the
        session slot that remembers the challenge and the new user handle (32 random bytes:
        the account has no user id yet; the factor keeps the handle, as an imported one does).

        A discoverable credential with user verification: the account has no other way in."""
        return registration.signup_options(self.settings, account_name, now)

    def signup_credential(
        self, slot: Mapping[str, Any], credential: FactorCredential, user_id: str, now: datetime
    ) -> FactorConfig | Rejected:
        """The confirmed passkey factor of a new account (``user_id``) from the attestation
        answering :meth:`signup_options`' challenge (kept in ``slot``), or why not. The caller
        stores it in the unit of work that creates the account."""
        return registration.signup_credential(self.settings, slot, credential, user_id, now)
