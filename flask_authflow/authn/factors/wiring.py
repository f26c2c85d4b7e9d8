"""Build an app's factors from its typed configuration (called by ``init_app``)."""

from __future__ import annotations

from collections.abc import Callable

from ...config import AuthFlowConfig
from ...mail import MailSender
from ..service import AuthnService
from .email_otp import EmailOtpFactor
from .recovery import RecoveryCodeFactor
from .sealing import FactorSealer, factor_sealer
from .totp import HotpFactor, TotpFactor

__all__ = ["install_factors"]


def install_factors(
    service: AuthnService, config: AuthFlowConfig, mail_sender: Callable[[], MailSender | None]
) -> FactorSealer:
    """Register the built-in second factors on ``service`` and return the app's sealer.

    TOTP, HOTP and recovery codes always; e-mail codes always (they need a mail sender only
    when a code is sent: ``AUTHFLOW_SMTP_HOST``, or the test outbox); WebAuthn when
    ``AUTHFLOW_WEBAUTHN_RP_ID`` is set (it needs the ``[webauthn]`` extra).
    """
    sealer = factor_sealer(config)
    service.register_factor(TotpFactor(sealer))
    service.register_factor(HotpFactor(sealer))
    service.register_factor(RecoveryCodeFactor(sealer))
    service.freshness = config.freshness
    service.site_name = config.site_name or "flask-authflow"
    service.passkey_login_allowed = config.passkey_login_allowed
    service.register_factor(
        EmailOtpFactor(
            sealer,
            mail_sender,
            ttl=config.email_otp_ttl,
            max_tries=config.email_otp_max_tries,
            site_name=service.site_name,
        )
    )
    if config.webauthn_rp_id is not None:
        from .webauthn import WebAuthnFactor, WebAuthnSettings  # needs the [webauthn] extra

        service.register_factor(WebAuthnFactor(WebAuthnSettings.from_config(config)))
    return sealer
