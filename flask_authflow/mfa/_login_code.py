"""The code of a sign-in by e-mailed code (``AUTHFLOW_LOGIN_BY_CODE``): the e-mail code
factor's codes, hashing and attempt counting, used as the *first* step of a login.

``LoginCodeFactor`` is an ``EmailOtpFactor`` (:doc:`/email_otp`) of
its own kind (``login_code``) that needs no enrolled factor: the address is the account's
verified e-mail, and the code is not sent by the factor but made by ``issue`` for the
login flow (``flask_authflow.login._login_code``), which composes the mail (a code and a
link) and delivers it after the answer went out. Everything else is the e-mail code's:
8 digits from the CSPRNG, only the HMAC-SHA256 digest kept (scoped by the login
transaction), ``max_tries`` wrong codes then the code is dead, an expiry, and single use
in the store (``use_once``) in the step's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from flask_authflow._core.factors import FactorCheck, FactorContext
from flask_authflow._core.ports import FactorConfig
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.mfa._email_otp import EmailOtpFactor

__all__ = ["LOGIN_CODE_ID", "LoginCodeFactor"]

#: The factor id a login code's digest is scoped by (no factor is enrolled for it).
LOGIN_CODE_ID: Final = "login_code"


class LoginCodeFactor(EmailOtpFactor):
    """The ``login_code`` factor: an e-mailed code that is the first step of a login."""

    __slots__ = ()

    @property
    def kind(self) -> FactorKind:
        return FactorKind.LOGIN_CODE

    def issue(self, ctx: FactorContext) -> str:
        """A new code for the login of ``ctx``: its digest, expiry and try count go to
        ``ctx.flow_update``; the code is returned for the mail (never stored)."""
        code = self.new_code()
        ctx.flow_update = {
            "digest": self._digest(self._login_scope(ctx.transaction, LOGIN_CODE_ID), code),
            "expires": self._expires(ctx.now),
            "tries": 0,
            "sends": 1,
            "transaction": ctx.transaction,
            "factor_id": LOGIN_CODE_ID,
        }
        return code

    def challenge(self, ctx: FactorContext) -> Mapping[str, Any]:
        """No resend within a login: asking for a code again starts a new sign-in by code
        (its own transaction, its own mail budget), so the old code dies with it."""
        return {"error": "request_again"}

    def verify(self, ctx: FactorContext, credential: FactorCredential) -> FactorCheck:
        """The e-mail code's check, against the login's code (no enrolled factor)."""
        kind = FactorKind.LOGIN_CODE
        ctx.factors = (FactorConfig(ctx.user_id, kind, ctx.now, factor_id=LOGIN_CODE_ID),)
        return super().verify(ctx, credential)

    def __repr__(self) -> str:
        return f"<LoginCodeFactor ttl={self.ttl} max_tries={self.max_tries}>"
