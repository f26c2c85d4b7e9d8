"""One-time codes by e-mail: 8 digits, valid 5 minutes, 5 tries, single use, bound to the login.

A code goes out when the login reaches a step that e-mail codes pass: on entry when the
step has no other kind, otherwise when the user asks for it (``AuthnRequest.challenge``,
a "send me a code" button), since sending mail is a side effect. The code itself is never
stored: the session flow keeps its HMAC-SHA256 digest under a server key
(``FactorSealer.code_digest``), scoped by the login transaction and the factor id, with
its expiry, the wrong tries so far and the number of codes sent in this login. Sessions
are server-side and encrypted at rest, so even the digest never reaches the browser.

* A code passes only the login transaction it was sent for; a new login (another
  transaction) sends a new code, and the old one matches nothing.
* After ``max_tries`` wrong codes, or once expired, the code is dropped: only a new code
  (``challenge``) can pass. The lockout still counts every wrong code (5 by default lock
  the account, which ends the login first).
* The right code passes once: its slot is emptied and the step is done, and its digest
  is recorded as used in the store (``use_once``) in the step's transaction, so parallel
  requests of one session that all read the code's slot pass it once.
* At most ``max_sends`` codes per login (the first and the resends).

An enrolled e-mail factor is a ``FactorConfig`` of kind
``email_otp`` with ``data={"address": ...}`` (public metadata, shown masked as
``a***@example.com``) and no secret. Enrolling sends a code to the new address; confirming
with it proves the user reads that mailbox, and replaces an earlier address.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from flask_authflow._core.factors import (
    Accepted,
    EnrollContext,
    EnrollmentStart,
    FactorCheck,
    FactorContext,
    Rejected,
    RejectReason,
    StoredEnrollment,
)
from flask_authflow._core.ports import FactorConfig
from flask_authflow._i18n import N_, gettext, ngettext
from flask_authflow._mail import HtmlMailSender, MailSender
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.errors import (
    AuthFlowError,
    ConfigurationError,
    EnrollmentError,
    InvalidInput,
    MailDeliveryError,
)
from flask_authflow.mfa._otp import codes_equal, parse_code
from flask_authflow.mfa._sealing import FactorSealer

__all__ = [
    "EMAIL_OTP_DIGITS",
    "FOREIGN_ENROLLMENT",
    "FOREIGN_TRANSACTION",
    "MAX_ADDRESS_LENGTH",
    "EmailOtpFactor",
    "check_address",
    "imported_address",
    "mask_address",
]

log = logging.getLogger("flask_authflow.login")

#: Digits of an e-mail code (10^8 values: 5 tries guess one with probability 5 in 10^8).
EMAIL_OTP_DIGITS: Final = 8
#: The longest address accepted (RFC 5321's 256-octet path less the angle brackets).
MAX_ADDRESS_LENGTH: Final = 254
#: The longest local part (RFC 5321, 4.5.3.1.1).
_MAX_LOCAL_LENGTH: Final = 64
#: Characters no accepted address holds: they would make it a list, a display name, a
#: quoted string or a route (``a@x.com, b@y.com``, ``Eve <e@x.com>``).
_FORBIDDEN: Final = frozenset('<>,;:()[]\\"')
#: The audit reason of a code presented in another login than the one it was sent for.
FOREIGN_TRANSACTION: Final = "foreign_transaction"
#: The audit reason of an enrollment code presented for another pending factor.
FOREIGN_ENROLLMENT: Final = "foreign_enrollment"


def check_address(value: object) -> str:
    """``value`` if it is one plain e-mail address (``local@domain``), else InvalidInput.

    One ``@``, a non-empty local part (at most 64 characters) and domain, no whitespace
    (CR, LF, spaces, tabs), no control characters, none of ``<>,;:()[]\\"`` (no list, display
    name or quoted string), at most 254 characters. Nothing is trimmed or rewritten: what
    is stored is what the user typed.

    :raises InvalidInput: anything else.
    """
    if not isinstance(value, str) or not value:
        raise InvalidInput(gettext("An e-mail address is required."))
    if len(value) > MAX_ADDRESS_LENGTH:
        raise InvalidInput(
            gettext("An e-mail address has at most %(max)d characters.", max=MAX_ADDRESS_LENGTH)
        )
    if any(char.isspace() or not char.isprintable() for char in value):
        raise InvalidInput(gettext("An e-mail address has no spaces, line breaks or control characters."))
    if any(char in _FORBIDDEN for char in value):
        raise InvalidInput(gettext('An e-mail address is one plain address, without <>,;:()[]\\".'))
    local, at, domain = value.partition("@")
    if not at or "@" in domain:
        raise InvalidInput(gettext("An e-mail address has exactly one @."))
    if not local or len(local) > _MAX_LOCAL_LENGTH:
        raise InvalidInput(
            gettext("The part before the @ must have 1 to %(max)d characters.", max=_MAX_LOCAL_LENGTH)
        )
    if not domain or domain.startswith(".") or domain.endswith(".") or ".." in domain:
        raise InvalidInput(gettext("The part after the @ must be a domain name."))
    return value


def mask_address(address: str) -> str:
    """``alice@example.com`` as shown to whoever is logging in: ``a***@example.com``."""
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain:
        return "***"
    return f"{local[0]}***@{domain}"


def _lifetime(ttl: timedelta) -> str:
    seconds = math.ceil(ttl.total_seconds())
    if seconds % 60 == 0:
        return ngettext("%(num)d minute", "%(num)d minutes", seconds // 60)
    return ngettext("%(num)d second", "%(num)d seconds", seconds)


@dataclass(frozen=True, slots=True)
class _Code:
    """The code waiting in a flow slot (login or enrollment), as read back from the session."""

    digest: str
    expires: float
    tries: int


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _read_code(slot: Mapping[str, Any]) -> _Code | None:
    digest, expires, tries = slot.get("digest"), slot.get("expires"), slot.get("tries")
    if not isinstance(digest, str) or not digest:
        return None
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        return None
    if isinstance(tries, bool) or not isinstance(tries, int):
        return None
    return _Code(digest, float(expires), tries)


class EmailOtpFactor(StoredEnrollment):
    """The ``email_otp`` factor and its enrollment.

    :param sealer: hashes codes under the server's code key (``FactorSealer.code_digest``).
    :param sender: returns the app's :class:`~flask_authflow._mail.MailSender` when a code is
        sent (a callable, so that the sender can be installed or swapped after
        ``init_app``, e.g. a test's outbox); ``None`` means none is configured.
    :param ttl: how long a code is valid (``AUTHFLOW_EMAIL_OTP_TTL``).
    :param max_tries: wrong codes allowed per code (``AUTHFLOW_EMAIL_OTP_MAX_TRIES``).
    :param site_name: named in the e-mails (``AUTHFLOW_SITE_NAME``).
    :param max_sends: codes sent per login (the first one and the resends), and per
        enrollment while its last code is valid.
    """

    __slots__ = ("html_body", "mail_limit", "max_sends", "max_tries", "sealer", "sender", "site_name", "ttl")
    #: A cheap check: reservation, check and settlement share one transaction.
    expensive = False

    #: Sending an e-mail is a side effect: the service challenges this factor on entering a
    #: step only when the step has no other kind; otherwise on request.
    challenge_on_request: Final = True
    digits: Final = EMAIL_OTP_DIGITS
    label: Final = N_("E-mail")

    def __init__(
        self,
        sealer: FactorSealer,
        sender: Callable[[], MailSender | None],
        *,
        ttl: timedelta = timedelta(minutes=5),
        max_tries: int = 5,
        site_name: str = "flask-authflow",
        max_sends: int = 3,
        mail_limit: Callable[[str, str, str], None] | None = None,
        html_body: Callable[[str, str], str] | None = None,
    ) -> None:
        if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
            raise ConfigurationError(f"the e-mail code lifetime must be a positive timedelta, got {ttl!r}")
        for name, value in (("max_tries", max_tries), ("max_sends", max_sends)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"EmailOtpFactor {name} must be a positive integer, got {value!r}")
        if not callable(sender):
            raise ConfigurationError("EmailOtpFactor needs sender: a callable returning the MailSender")
        self.sealer = sealer
        self.sender = sender
        self.ttl = ttl
        self.max_tries = max_tries
        self.max_sends = max_sends
        #: ``(to, tenant, user_id)``, called before each send; raises ``Throttled`` to refuse it.
        self.mail_limit = mail_limit
        #: ``(subject, text) -> html``: the HTML part of a code's mail (the web layer renders
        #: the overridable ``authflow/mail/email_code.html``); ``None``: text only.
        self.html_body = html_body
        # One line: the name goes into a Subject header.
        self.site_name = " ".join(str(site_name).split()) or "flask-authflow"

    @property
    def kind(self) -> FactorKind:
        return FactorKind.EMAIL_OTP

    def check_input(self, credential: FactorCredential) -> None:
        parse_code(credential, EMAIL_OTP_DIGITS)

    # --- sending ---------------------------------------------------------------------------

    @staticmethod
    def new_code() -> str:
        """A fresh code: 8 digits from the system's CSPRNG, leading zeros kept."""
        return f"{secrets.randbelow(10**EMAIL_OTP_DIGITS):0{EMAIL_OTP_DIGITS}d}"

    def _send(self, to: str, subject: str, body: str) -> None:
        sender = self.sender()
        if sender is None:
            raise ConfigurationError(
                "e-mail codes need a mail sender: set AUTHFLOW_SMTP_HOST and AUTHFLOW_SMTP_FROM "
                "(see AUTHFLOW_SMTP_*), or install a MailSender as the app's mail_sender"
            )
        try:
            if self.html_body is not None and isinstance(sender, HtmlMailSender):
                sender.send_html(to, subject, body, self.html_body(subject, body))
            else:
                sender.send(to, subject, body)
        except AuthFlowError:
            raise
        except Exception as exc:  # a sender of the application's own: a typed error, 503
            raise MailDeliveryError("the e-mail could not be sent") from exc

    def _expires(self, now: datetime) -> float:
        return now.timestamp() + self.ttl.total_seconds()

    def _expired(self, code: _Code, now: datetime) -> bool:
        return now.timestamp() > code.expires

    @property
    def expires_in(self) -> int:
        """A code's lifetime in seconds (what ``challenge`` answers as ``expires_in``)."""
        return math.ceil(self.ttl.total_seconds())

    def login_message(self, code: str) -> tuple[str, str]:
        """(subject, body) of the e-mail that carries a login code."""
        site, lifetime = self.site_name, _lifetime(self.ttl)
        subject = gettext("Your %(site)s sign-in code", site=site)
        body = gettext(
            "Your %(site)s sign-in code is:\n\n"
            "    %(code)s\n\n"
            "It expires in %(lifetime)s and works once, in the sign-in that asked for it.\n\n"
            "If you did not try to sign in, someone may know your password: change it, and do "
            "not give this code to anyone.\n",
            site=site,
            code=code,
            lifetime=lifetime,
        )
        return subject, body

    def enrollment_message(self, code: str) -> tuple[str, str]:
        """(subject, body) of the e-mail that confirms a new address."""
        site, lifetime = self.site_name, _lifetime(self.ttl)
        subject = gettext("Confirm your e-mail address for %(site)s", site=site)
        body = gettext(
            "To receive your %(site)s sign-in codes at this address, enter this code:\n\n"
            "    %(code)s\n\n"
            "It expires in %(lifetime)s.\n\n"
            "If you did not ask for this, ignore this e-mail: nothing changes.\n",
            site=site,
            code=code,
            lifetime=lifetime,
        )
        return subject, body

    def _digest(self, scope: str, code: str) -> str:
        return self.sealer.code_digest(scope, code)

    # --- login -----------------------------------------------------------------------------

    @staticmethod
    def _login_scope(transaction: str, factor_id: str) -> str:
        return f"{transaction}:{factor_id}"

    def challenge(self, ctx: FactorContext) -> Mapping[str, Any]:
        """Send a code to the user's address; the slot keeps its digest, not the code.

        :raises ConfigurationError: no mail sender is configured.
        :raises MailDeliveryError: the e-mail could not be sent (nothing is stored then).
        """
        if not ctx.factors:
            return {"error": RejectReason.NOT_ENROLLED.value}
        config = ctx.factors[0]
        address = config.data.get("address")
        if not isinstance(address, str) or not address:
            return {"error": RejectReason.NOT_ENROLLED.value}
        slot = ctx.flow
        same_login = slot.get("transaction") == ctx.transaction
        sends = _int(slot.get("sends")) if same_login else 0
        if sends >= self.max_sends:
            return {"error": "too_many_sends"}
        if self.mail_limit is not None:
            self.mail_limit(address, ctx.tenant, ctx.user_id)
        code = self.new_code()
        subject, body = self.login_message(code)
        self._send(address, subject, body)
        ctx.flow_update = {
            "digest": self._digest(self._login_scope(ctx.transaction, config.factor_id), code),
            "expires": self._expires(ctx.now),
            "tries": 0,
            "sends": sends + 1,
            "transaction": ctx.transaction,
            "factor_id": config.factor_id,
        }
        return {"sent": True, "to": mask_address(address), "expires_in": self.expires_in}

    def verify(self, ctx: FactorContext, credential: FactorCredential) -> FactorCheck:
        """The code sent in this login, within its lifetime and tries; used up when it passes."""
        given = parse_code(credential, EMAIL_OTP_DIGITS)
        slot = ctx.flow
        code = _read_code(slot)
        if code is None:
            return Rejected(RejectReason.NO_CHALLENGE)
        if slot.get("transaction") != ctx.transaction:
            ctx.flow_update = {}
            return Rejected(FOREIGN_TRANSACTION)
        # The code is dropped, the count of codes sent in this login kept (resends stay bounded).
        spent = {"sends": _int(slot.get("sends")), "transaction": ctx.transaction}
        factor_id = slot.get("factor_id")
        config = next((f for f in ctx.factors if f.factor_id == factor_id), None)
        if config is None or not isinstance(factor_id, str):
            ctx.flow_update = spent  # the factor was removed since the code went out
            return Rejected(RejectReason.NOT_ENROLLED)
        if self._expired(code, ctx.now):
            ctx.flow_update = spent
            return Rejected(RejectReason.EXPIRED)
        if code.tries >= self.max_tries:
            ctx.flow_update = spent
            return Rejected(RejectReason.TOO_MANY_TRIES)
        digest = self._digest(self._login_scope(ctx.transaction, factor_id), given)
        if not codes_equal(code.digest, digest):
            ctx.flow_update = {**slot, "tries": code.tries + 1}
            return Rejected(RejectReason.INVALID)
        ctx.flow_update = {}  # single use in this session ...
        # ... and in the store: parallel requests of one session all read the same slot,
        # so the code passes for the one request that records it as used.
        store, expires_at = ctx.store, datetime.fromtimestamp(code.expires, UTC)
        return Accepted(
            config.factor_id,
            commit=lambda: store.use_once(FactorKind.EMAIL_OTP.value, code.digest, expires_at=expires_at),
        )

    # --- enrollment ------------------------------------------------------------------------

    @staticmethod
    def _enroll_scope(factor_id: str) -> str:
        return f"enroll:{factor_id}"

    def begin(self, ctx: EnrollContext, params: Mapping[str, Any]) -> EnrollmentStart:
        """Store the address as a pending factor and send a code there.

        ``params``: ``{"address": "alice@example.com"}``. An earlier pending address of this
        session's enrollment is dropped. At most ``max_sends`` codes go out while the last
        one is valid (then ``EnrollmentError``).

        :raises InvalidInput: no address, or not one plain address (``check_address``).
        :raises ConfigurationError, MailDeliveryError: as ``challenge``; the pending
            factor is removed again.
        """
        address = check_address(params.get("address"))
        slot = ctx.flow
        previous = _read_code(slot)
        live = previous is not None and not self._expired(previous, ctx.now)
        sends = _int(slot.get("sends")) if live else 0
        if sends >= self.max_sends:
            raise EnrollmentError(
                ngettext(
                    "%(num)d code was sent already: enter the last one, or start again in %(lifetime)s.",
                    "%(num)d codes were sent already: enter the last one, or start again in %(lifetime)s.",
                    sends,
                    lifetime=_lifetime(self.ttl),
                )
            )
        if self.mail_limit is not None:  # before the pending factor is stored
            self.mail_limit(address, ctx.tenant, ctx.user_id)
        earlier = slot.get("factor_id")
        if isinstance(earlier, str) and earlier:
            stale = ctx.store.get_factor(ctx.tenant, ctx.user_id, earlier)
            if stale is not None and stale.kind is self.kind and not stale.confirmed:
                ctx.store.delete_factor(ctx.tenant, ctx.user_id, earlier)
        factor_id = secrets.token_urlsafe(16)
        config = FactorConfig(
            user_id=ctx.user_id,
            kind=self.kind,
            created_at=ctx.now,
            factor_id=factor_id,
            confirmed=False,
            data={"address": address, "label": self.label},
        )
        ctx.store.add_factor(ctx.tenant, config)
        code = self.new_code()
        subject, body = self.enrollment_message(code)
        try:
            self._send(address, subject, body)
        except BaseException:
            try:  # no code went out: the pending factor could never be confirmed
                ctx.store.delete_factor(ctx.tenant, ctx.user_id, factor_id)
            except Exception:  # noqa: BLE001 - the send error is the one to report
                log.warning("a pending e-mail factor could not be removed after a failed send")
            raise
        ctx.flow_update = {
            "digest": self._digest(self._enroll_scope(factor_id), code),
            "expires": self._expires(ctx.now),
            "tries": 0,
            "sends": sends + 1,
            "factor_id": factor_id,
        }
        return EnrollmentStart(
            factor_id=factor_id,
            kind=self.kind,
            public={"sent": True, "to": mask_address(address), "expires_in": self.expires_in},
        )

    def confirm(self, ctx: EnrollContext, factor_id: str, credential: FactorCredential) -> FactorCheck:
        """The code sent to the new address, for this pending factor, within its lifetime."""
        given = parse_code(credential, EMAIL_OTP_DIGITS)
        slot = ctx.flow
        code = _read_code(slot)
        if code is None:
            return Rejected(RejectReason.NO_CHALLENGE)
        if slot.get("factor_id") != factor_id:
            return Rejected(FOREIGN_ENROLLMENT)
        if self._expired(code, ctx.now):
            ctx.flow_update = {}
            return Rejected(RejectReason.EXPIRED)
        if code.tries >= self.max_tries:
            ctx.flow_update = {}
            return Rejected(RejectReason.TOO_MANY_TRIES)
        config = ctx.store.get_factor(ctx.tenant, ctx.user_id, factor_id)
        if config is None or config.kind is not self.kind or config.confirmed:
            ctx.flow_update = {}
            return Rejected(RejectReason.NOT_ENROLLED)
        if not codes_equal(code.digest, self._digest(self._enroll_scope(factor_id), given)):
            ctx.flow_update = {**slot, "tries": code.tries + 1}
            return Rejected(RejectReason.INVALID)
        ctx.flow_update = {}
        return Accepted(factor_id)

    def __repr__(self) -> str:
        return (
            f"<EmailOtpFactor ttl={self.ttl} max_tries={self.max_tries} max_sends={self.max_sends} "
            f"site_name={self.site_name!r}>"
        )


def imported_address(user_id: str, address: str, now: datetime) -> FactorConfig:
    """A confirmed e-mail code factor to ``address`` for a user another application sent
    its codes to (an import; the address was proven there).

    :raises InvalidInput: not an e-mail address."""
    return FactorConfig(
        user_id=user_id,
        kind=FactorKind.EMAIL_OTP,
        created_at=now,
        factor_id=secrets.token_urlsafe(16),
        data={"address": check_address(address), "label": EmailOtpFactor.label},
    )
