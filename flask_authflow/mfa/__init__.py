from __future__ import annotations

from typing import TYPE_CHECKING

from flask_authflow._core.lazy import lazy_names

if TYPE_CHECKING:
    from flask_authflow._core.factors import Accepted, Factor, FactorContext, Rejected
    from flask_authflow._core.ports.factors import FactorConfig
    from flask_authflow.mfa._email_otp import EmailOtpFactor
    from flask_authflow.mfa._recovery import RecoveryCodeFactor
    from flask_authflow.mfa._sealing import FactorSealer
    from flask_authflow.mfa._totp import TotpFactor
    from flask_authflow.mfa._webauthn import WebAuthnFactor
    from flask_authflow.mfa._webauthn_ceremony import WebAuthnSettings

#: Each name, and the private module it is loaded from on first use.
_LAZY = {
    "Accepted": "flask_authflow._core.factors",
    "EmailOtpFactor": "flask_authflow.mfa._email_otp",
    "Factor": "flask_authflow._core.factors",
    "FactorConfig": "flask_authflow._core.ports.factors",
    "FactorContext": "flask_authflow._core.factors",
    "FactorSealer": "flask_authflow.mfa._sealing",
    "RecoveryCodeFactor": "flask_authflow.mfa._recovery",
    "Rejected": "flask_authflow._core.factors",
    "TotpFactor": "flask_authflow.mfa._totp",
    "WebAuthnFactor": "flask_authflow.mfa._webauthn",
    "WebAuthnSettings": "flask_authflow.mfa._webauthn_ceremony",
}

__all__ = [
    "Accepted",
    "EmailOtpFactor",
    "Factor",
    "FactorConfig",
    "FactorContext",
    "FactorSealer",
    "RecoveryCodeFactor",
    "Rejected",
    "TotpFactor",
    "WebAuthnFactor",
    "WebAuthnSettings",
]


__getattr__ = lazy_names(__name__, _LAZY)
