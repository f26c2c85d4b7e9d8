"""A WebAuthn credential as the factor store keeps it, made from what another relying party
stored (an import): no registration ceremony, no ``webauthn`` package needed.

The layout is the one :class:`~flask_authflow.mfa._webauthn.WebAuthnFactor` writes when a key
is registered here: ``lookup`` is the base64url credential id, ``counter`` the signature
count, ``data`` the base64url COSE public key, transports, and whether it may sign in alone
(``passkey``). A credential brought from another application also keeps the user handle its
authenticator holds (``data["user_handle"]``): a passkey assertion names its user by it.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from datetime import datetime

from flask_authflow._core.ports import FactorConfig
from flask_authflow._outcomes import FactorKind

__all__ = ["MAX_IMPORTED_ID_CHARS", "b64url", "imported_credential"]

#: The longest base64url credential id the stores' ``lookup`` column holds.
MAX_IMPORTED_ID_CHARS = 255
_TRANSPORTS = frozenset({"usb", "nfc", "ble", "internal", "hybrid", "smart-card", "cable"})


def b64url(data: bytes) -> str:
    """base64url without padding, as WebAuthn writes it."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def imported_credential(
    user_id: str,
    *,
    credential_id: bytes,
    public_key: bytes,
    sign_count: int,
    transports: Sequence[str],
    passkey: bool,
    label: str,
    now: datetime,
    user_handle: bytes | None = None,
    backup_eligible: bool | None = None,
    backed_up: bool | None = None,
) -> FactorConfig:
    """A confirmed WebAuthn factor of ``user_id`` for a credential registered elsewhere.

    :raises ValueError: an empty or overlong credential id, an empty key, a negative count."""
    lookup = b64url(credential_id)
    if not credential_id or len(lookup) > MAX_IMPORTED_ID_CHARS:
        raise ValueError("the credential id is empty or longer than the store keeps")
    if not public_key or sign_count < 0:
        raise ValueError("the credential has no public key, or a negative signature count")
    data: dict[str, object] = {
        "label": label,
        "passkey": passkey,
        "public_key": b64url(public_key),
        "transports": [t for t in transports if t in _TRANSPORTS],
        "backup_eligible": bool(backup_eligible),
        "backed_up": bool(backed_up),
        "imported": True,
    }
    if user_handle:
        data["user_handle"] = b64url(user_handle)
    return FactorConfig(
        user_id=user_id,
        kind=FactorKind.WEBAUTHN,
        created_at=now,
        factor_id=secrets.token_urlsafe(16),
        counter=sign_count,
        lookup=lookup,
        data=data,
    )
