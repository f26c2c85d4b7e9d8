"""Build an app's second factors from its factor settings (called by ``init_app``)."""

from __future__ import annotations

from collections.abc import Callable

from flask import has_app_context, render_template

from flask_authflow._core.factors import Factor
from flask_authflow._i18n import template_context
from flask_authflow._mail import MailSender
from flask_authflow._outcomes import FactorKind
from flask_authflow._throttle import Throttle
from flask_authflow._web.state import get_state
from flask_authflow.audit._context import audit_context
from flask_authflow.mfa._email_otp import EmailOtpFactor
from flask_authflow.mfa._login_code import LoginCodeFactor
from flask_authflow.mfa._recovery import RecoveryCodeFactor
from flask_authflow.mfa._sealing import FactorSealer
from flask_authflow.mfa._settings import FactorSettings
from flask_authflow.mfa._totp import HotpFactor, TotpFactor

__all__ = ["built_in_factors", "code_mail_html", "code_mail_limit"]


def built_in_factors(
    settings: FactorSettings,
    sealer: FactorSealer,
    mail_sender: Callable[[], MailSender | None],
    throttle: Throttle | None = None,
) -> list[Factor]:
    """The built-in second factors of an app, sealing their secrets with ``sealer``.

    TOTP, HOTP and recovery codes always; e-mail codes always (they need a mail sender only
    when a code is sent: ``AUTHFLOW_SMTP_HOST``, or an outbox given by the application);
    WebAuthn when ``AUTHFLOW_WEBAUTHN_RP_ID`` is set (it needs the ``[webauthn]`` extra).
    """
    factors: list[Factor] = [
        TotpFactor(sealer),
        HotpFactor(sealer),
        RecoveryCodeFactor(sealer),
        EmailOtpFactor(
            sealer,
            mail_sender,
            ttl=settings.email_otp_ttl,
            max_tries=settings.email_otp_max_tries,
            site_name=settings.site_name or "flask-authflow",
            mail_limit=code_mail_limit(throttle) if throttle is not None else None,
            html_body=code_mail_html,
        ),
    ]
    if settings.login_by_code:  # the code is mailed by the sign-in-by-code view, not the factor
        factors.append(
            LoginCodeFactor(
                sealer,
                mail_sender,
                ttl=settings.login_code_ttl,
                max_tries=settings.login_code_max_tries,
                site_name=settings.site_name or "flask-authflow",
            )
        )
    if settings.webauthn_rp_id is not None:
        from flask_authflow.mfa._webauthn import (  # needs the [webauthn] extra
            WebAuthnFactor,
            WebAuthnSettings,
        )

        factors.append(WebAuthnFactor(WebAuthnSettings.from_factor_settings(settings)))
    return factors


def code_mail_html(subject: str, text: str) -> str:
    """The HTML part of an e-mail code's mail: the overridable
    ``authflow/mail/email_code.html`` given the mail's subject and its text's paragraphs
    (an indented paragraph is the code)."""
    paragraphs = [paragraph for paragraph in text.split("\n\n") if paragraph.strip()]
    return render_template(
        "authflow/mail/email_code.html", **template_context(html=True), subject=subject, paragraphs=paragraphs
    )


def code_mail_limit(throttle: Throttle) -> Callable[[str, str, str], None]:
    """The e-mail code factor's mail limit. A code to the account's own address (its e-mail,
    or the address of a confirmed e-mail factor) spends the owner's budget
    (``mail.*``); a confirmation code to any other address (someone enrolling it as their
    factor) spends the strangers' budget (``stranger_mail.*``), so enrolling erin's address
    cannot use up the codes erin needs to sign in."""

    def limit(to: str, tenant: str, user_id: str) -> None:
        if not has_app_context() or _proven(to, tenant, user_id):
            throttle.mail(to, tenant, user_id)
        else:
            throttle.hit("stranger_mail", address=audit_context().client_ip, recipient=to)

    return limit


def _proven(to: str, tenant: str, user_id: str) -> bool:
    store = get_state().service.store
    wanted = to.strip().casefold()
    user = store.get_user(tenant, user_id)
    if user is not None and user.email is not None and user.email.strip().casefold() == wanted:
        return True
    factors = store.list_user_factors(tenant, user_id, kind=FactorKind.EMAIL_OTP)
    return any(str(factor.data.get("address", "")).strip().casefold() == wanted for factor in factors)
