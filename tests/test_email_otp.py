"""E-mail one-time codes through the real login service: sent, read, accepted once, refused
when expired, reused, foreign, guessed or malformed; the resend button; enrollment."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from jinja2 import ChoiceLoader, PackageLoader

from flask_authflow._clock import MockClock
from flask_authflow._core.factors import (
    EnrollContext,
    FactorContext,
    Rejected,
    RejectReason,
)
from flask_authflow._core.ports import AttemptKey, FactorConfig
from flask_authflow._core.session import AuthSession, AuthState, begin_flow
from flask_authflow._mail import MailSender, SmtpSender
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorRequired,
    InvalidCredential,
    Locked,
)
from flask_authflow.audit._sinks import MemoryAuditSink
from flask_authflow.errors import (
    ConfigurationError,
    EnrollmentError,
    InvalidInput,
    LoginNotStarted,
    MailDeliveryError,
)
from flask_authflow.login._lockout import LockoutPolicy
from flask_authflow.login._service import TRANSACTION_KEY, AuthnRequest, AuthnService
from flask_authflow.mfa._email_otp import (
    EMAIL_OTP_DIGITS,
    FOREIGN_ENROLLMENT,
    FOREIGN_TRANSACTION,
    EmailOtpFactor,
    check_address,
    mask_address,
)
from flask_authflow.mfa._sealing import FactorSealer
from flask_authflow.mfa._totp import TotpFactor
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing import Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import HtmlOutbox
from tests.authn_support import CTX, FAST_HASHER, new_session
from tests.smtp_server import SmtpTestServer, smtp_server  # noqa: F401 - the real SMTP server fixture

Store = InMemoryBackend | SqlAlchemyBackend
EMAIL = FactorKind.EMAIL_OTP
SLOT = "factor:" + EMAIL.value
ENROLL_SLOT = "enroll:" + EMAIL.value
PASSWORD = "correct horse battery staple"
SITE = "Acme Portal"
CODE_RE = re.compile(r"^    ([0-9]{8})\r?$", re.MULTILINE)


def code_of(body: str) -> str:
    found = CODE_RE.findall(body)
    assert len(found) == 1, body
    return str(found[0])


@dataclass
class Env:
    service: AuthnService
    backend: Store
    clock: MockClock
    outbox: Outbox
    audit: MemoryAuditSink
    sealer: FactorSealer
    factor: EmailOtpFactor
    user_id: str
    sender: list[MailSender | None] = field(default_factory=list)

    @property
    def handle(self) -> AuthnRequest:
        return self.service.with_audit_context(CTX)

    def last_code(self) -> str:
        return code_of(self.outbox[-1].body)

    def begin(self, session: AuthSession | None = None) -> tuple[AuthSession, Any]:
        """A new login of alice through her password; (session, outcome of the password)."""
        session = session if session is not None else new_session(self.clock)
        assert isinstance(self.handle.begin_login("alice", "acme", session), FactorRequired)
        return session, self.handle.verify_factor(FactorCredential.password(PASSWORD), session)

    def verify(self, session: AuthSession, code: str) -> Any:
        return self.handle.verify_factor(FactorCredential.code(EMAIL, code), session)

    def reasons(self) -> list[str | None]:
        return [
            r.reason for r in self.audit.records if r.event == "factor_verify" and r.factor == EMAIL.value
        ]

    def add_factor(self, kind: FactorKind, data: dict[str, Any], secret: str = "") -> str:
        factor_id = secrets.token_urlsafe(16)
        self.backend.add_factor(
            "acme",
            FactorConfig(
                user_id=self.user_id,
                kind=kind,
                created_at=self.clock.now(),
                secret=secret,
                factor_id=factor_id,
                data=data,
                confirmed=False,
            ),
        )
        assert self.backend.confirm_factor("acme", self.user_id, factor_id, replace_kind=True)
        return factor_id

    def enroll_email(self, address: str = "alice@example.com") -> str:
        return self.add_factor(EMAIL, {"address": address})

    def enroll_totp(self) -> str:
        factor_id = secrets.token_urlsafe(16)
        key = b"JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
        self.backend.add_factor(
            "acme",
            FactorConfig(
                user_id=self.user_id,
                kind=FactorKind.TOTP,
                created_at=self.clock.now(),
                secret=self.sealer.seal(factor_id, key),
                factor_id=factor_id,
                confirmed=False,
            ),
        )
        assert self.backend.confirm_factor("acme", self.user_id, factor_id, replace_kind=True)
        return factor_id


def make_env(
    backend: Store,
    clock: MockClock,
    *,
    lockout: LockoutPolicy | None = None,
    **factor_options: Any,
) -> Env:
    outbox = Outbox()
    audit = MemoryAuditSink()
    sealer = FactorSealer.from_key(secrets.token_bytes(32))
    holder: list[MailSender | None] = [outbox]
    factor = EmailOtpFactor(sealer, lambda: holder[0], site_name=SITE, **factor_options)
    service = AuthnService(
        backend,
        backend,
        audit_sink=audit,
        hasher=FAST_HASHER,
        clock=clock,
        lockout=lockout,
        account_tokens=backend,
    )
    service.register_factor(factor)
    service.register_factor(TotpFactor(sealer))
    service.site_name = SITE
    user = add_user(backend, "acme", "alice", PASSWORD)
    return Env(service, backend, clock, outbox, audit, sealer, factor, user.user_id, holder)


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, clock: MockClock, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield InMemoryBackend(clock=clock)
        return
    store = SqlAlchemyBackend(f"sqlite:///{tmp_path / 'authflow.db'}", clock=clock)
    yield store
    store.close()


@pytest.fixture
def env(backend: Store, clock: MockClock) -> Env:
    return make_env(backend, clock)


@pytest.fixture
def memory_env(clock: MockClock) -> Env:
    return make_env(InMemoryBackend(clock=clock), clock)


@pytest.fixture
def codes(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``codes("11111111", "22222222")``: the next codes sent, in order (distinct on purpose)."""

    def plan(*values: str) -> None:
        queue = list(values)
        monkeypatch.setattr(EmailOtpFactor, "new_code", staticmethod(lambda: queue.pop(0)))

    return plan


# --- the code is sent, read and accepted ------------------------------------------------------


def test_only_kind_of_the_step_sends_on_entry_and_the_code_passes(env: Env) -> None:
    env.enroll_email()
    session, outcome = env.begin()
    assert isinstance(outcome, FactorRequired)
    assert outcome.kinds == (EMAIL,)
    assert outcome.challenges[EMAIL] == {"sent": True, "to": "a***@example.com", "expires_in": 300}
    assert session.state is AuthState.AUTHENTICATING
    assert len(env.outbox) == 1
    message = env.outbox[0]
    assert message.to == "alice@example.com"
    assert SITE in message.subject and SITE in message.body
    assert "5 minutes" in message.body
    assert env.user_id not in message.subject + message.body
    code = code_of(message.body)
    assert len(code) == EMAIL_OTP_DIGITS

    assert env.verify(session, code) == Authenticated(env.user_id, "acme")
    assert session.is_authenticated and session.flow is None
    assert env.reasons()[-1] is None  # the success row
    # used: the same code on the finished login is no login step at all
    assert isinstance(env.verify(session, code), InvalidCredential)


def test_code_passes_until_the_last_second_of_its_lifetime(memory_env: Env) -> None:
    env = memory_env
    env.enroll_email()
    session, _ = env.begin()
    env.clock.advance(timedelta(minutes=5))
    assert isinstance(env.verify(session, env.last_code()), Authenticated)


def test_code_is_kept_only_as_a_digest_bound_to_the_login(env: Env) -> None:
    factor_id = env.enroll_email()
    session, _ = env.begin()
    code = env.last_code()
    flow = session.record.flow
    assert flow is not None
    slot = flow[SLOT]
    assert code not in json.dumps(dict(flow))
    transaction = flow[TRANSACTION_KEY]
    assert slot["transaction"] == transaction and slot["factor_id"] == factor_id
    assert slot["digest"] == env.sealer.code_digest(f"{transaction}:{factor_id}", code)
    assert slot["tries"] == 0 and slot["sends"] == 1
    assert slot["expires"] == env.clock.now().timestamp() + 300
    # another server key gives another digest: a dumped session does not let one test codes offline
    assert slot["digest"] != FactorSealer.from_key(b"k" * 32).code_digest(f"{transaction}:{factor_id}", code)


def test_beside_totp_the_code_is_sent_only_on_request(env: Env) -> None:
    env.enroll_totp()
    env.enroll_email()
    session, outcome = env.begin()
    assert isinstance(outcome, FactorRequired)
    assert outcome.kinds == (FactorKind.TOTP, EMAIL)
    assert outcome.challenges[EMAIL] == {"on_request": True}
    assert len(env.outbox) == 0
    assert SLOT not in (session.record.flow or {})
    # without a code requested, nothing can pass
    assert isinstance(env.verify(session, "12345678"), InvalidCredential)
    assert env.reasons()[-1] == RejectReason.NO_CHALLENGE.value

    asked = env.handle.challenge(EMAIL, session)
    assert asked.challenges[EMAIL]["sent"] is True and asked.challenges[EMAIL]["to"] == "a***@example.com"
    assert len(env.outbox) == 1
    assert [(r.event, r.status, r.factor) for r in env.audit.records][-1] == (
        "factor_challenge",
        "sent",
        EMAIL.value,
    )
    assert env.verify(session, env.last_code()) == Authenticated(env.user_id, "acme")


# --- refusals -----------------------------------------------------------------------------------


def test_expired_code_is_refused_and_dropped(env: Env) -> None:
    env.enroll_email()
    session, _ = env.begin()
    code = env.last_code()
    env.clock.advance(timedelta(minutes=5, seconds=1))
    assert isinstance(env.verify(session, code), InvalidCredential)
    assert env.reasons()[-1] == RejectReason.EXPIRED.value
    assert session.state is AuthState.AUTHENTICATING  # a later step waits for another try
    assert "digest" not in session.record.flow[SLOT]  # type: ignore[index]
    assert isinstance(env.verify(session, code), InvalidCredential)
    assert env.reasons()[-1] == RejectReason.NO_CHALLENGE.value
    # a new code does pass
    env.handle.challenge(EMAIL, session)
    assert isinstance(env.verify(session, env.last_code()), Authenticated)


def test_used_code_is_refused_in_a_new_login(env: Env, codes: Callable[..., None]) -> None:
    env.enroll_email()
    codes("11111111", "22222222")
    session, _ = env.begin()
    assert isinstance(env.verify(session, "11111111"), Authenticated)

    again, _ = env.begin(session)  # a new login on the same browser, then another browser
    assert env.last_code() == "22222222"
    assert isinstance(env.verify(again, "11111111"), InvalidCredential)
    assert env.reasons()[-1] == RejectReason.INVALID.value
    assert again.state is AuthState.AUTHENTICATING
    assert isinstance(env.verify(again, "22222222"), Authenticated)


def test_code_of_another_login_is_refused(env: Env, codes: Callable[..., None]) -> None:
    env.enroll_email()
    codes("11111111", "22222222")
    first, _ = env.begin()
    second, _ = env.begin()
    assert isinstance(env.verify(second, "11111111"), InvalidCredential)
    assert env.reasons()[-1] == RejectReason.INVALID.value
    assert isinstance(env.verify(first, "22222222"), InvalidCredential)
    assert isinstance(env.verify(first, "11111111"), Authenticated)
    assert isinstance(env.verify(second, "22222222"), Authenticated)


def test_slot_of_another_transaction_is_refused(memory_env: Env, codes: Callable[..., None]) -> None:
    """Even the login's whole slot carried into another login does not pass there."""
    env = memory_env
    env.enroll_email()
    codes("11111111", "22222222")
    first, _ = env.begin()
    carried = dict((first.record.flow or {})[SLOT])
    second, _ = env.begin()
    second.transition(lambda r: begin_flow(r, {**(r.flow or {}), SLOT: carried}))
    assert isinstance(env.verify(second, "11111111"), InvalidCredential)
    assert env.reasons()[-1] == FOREIGN_TRANSACTION


def test_after_max_tries_even_the_right_code_is_refused(backend: Store, clock: MockClock) -> None:
    """With a lockout laxer than the code's tries, the code's own limit shows."""
    env = make_env(backend, clock, lockout=LockoutPolicy(max_failures=20))
    env.enroll_email()
    session, _ = env.begin()
    code = env.last_code()
    wrong = f"{(int(code) + 1) % 10**8:08d}"
    for tries in range(1, 6):
        assert isinstance(env.verify(session, wrong), InvalidCredential)
        assert session.record.flow[SLOT]["tries"] == tries  # type: ignore[index]
    assert isinstance(env.verify(session, code), InvalidCredential)
    assert env.reasons()[-1] == RejectReason.TOO_MANY_TRIES.value
    assert isinstance(env.verify(session, code), InvalidCredential)
    assert env.reasons()[-1] == RejectReason.NO_CHALLENGE.value
    # a new code, asked for, starts afresh
    env.handle.challenge(EMAIL, session)
    assert isinstance(env.verify(session, env.last_code()), Authenticated)


def test_default_lockout_locks_on_the_fifth_wrong_code(env: Env) -> None:
    """The default lockout (5 failures) and the code's 5 tries meet: the lock comes first,
    it ends the login, and the right code no longer passes anything."""
    env.enroll_email()
    session, _ = env.begin()
    code = env.last_code()
    wrong = f"{(int(code) + 1) % 10**8:08d}"
    for _ in range(4):
        assert isinstance(env.verify(session, wrong), InvalidCredential)
    assert isinstance(env.verify(session, wrong), Locked)
    assert session.state is not AuthState.AUTHENTICATING
    assert isinstance(env.verify(session, code), InvalidCredential)
    assert not session.is_authenticated
    assert isinstance(env.handle.begin_login("alice", "acme", new_session(env.clock)), Locked)


@pytest.mark.parametrize(
    "code",
    [
        "1234567",
        "123456789",
        "1234a678",
        " 12345678",
        "12345678 ",
        "\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18",  # full-width 12345678
        "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667",  # Arabic-Indic 01234567
        "",
        "+1234567",
    ],
    ids=["short", "long", "letter", "space", "trailing", "fullwidth", "arabic-indic", "empty", "sign"],
)
def test_malformed_codes_are_refused_before_any_check(memory_env: Env, code: str) -> None:
    env = memory_env
    env.enroll_email()
    session, _ = env.begin()
    for _ in range(6):  # more than the tries: none is counted
        with pytest.raises(InvalidInput):
            env.verify(session, code)
    assert session.record.flow[SLOT]["tries"] == 0  # type: ignore[index]
    assert isinstance(env.verify(session, env.last_code()), Authenticated)


def test_removed_factor_does_not_pass_with_its_code(memory_env: Env) -> None:
    env = memory_env
    factor_id = env.enroll_email()
    env.enroll_totp()
    session, _ = env.begin()
    env.handle.challenge(EMAIL, session)
    assert env.backend.delete_factor("acme", env.user_id, factor_id)
    assert isinstance(env.verify(session, env.last_code()), InvalidCredential)
    assert env.reasons()[-1] == RejectReason.NOT_ENROLLED.value


# --- the resend button ----------------------------------------------------------------------


def test_resends_are_limited_per_login_and_each_replaces_the_last(env: Env) -> None:
    env.enroll_email()
    session, _ = env.begin()
    sent = [env.last_code()]
    for _ in range(2):
        outcome = env.handle.challenge(EMAIL, session)
        assert outcome.challenges[EMAIL]["sent"] is True
        sent.append(env.last_code())
    assert len(env.outbox) == 3
    refused = env.handle.challenge(EMAIL, session)
    assert refused.challenges[EMAIL] == {"error": "too_many_sends"}
    assert len(env.outbox) == 3
    if sent[0] != sent[2]:  # an earlier code is dead once a new one went out
        assert isinstance(env.verify(session, sent[0]), InvalidCredential)
        assert env.reasons()[-1] == RejectReason.INVALID.value
    assert isinstance(env.verify(session, sent[2]), Authenticated)
    # a new login may send again
    env.begin()
    assert len(env.outbox) == 4


def test_exhausted_tries_do_not_reset_the_send_count(clock: MockClock) -> None:
    env = make_env(InMemoryBackend(clock=clock), clock, max_tries=1, max_sends=2)
    env.enroll_email()
    session, _ = env.begin()
    code = env.last_code()
    wrong = f"{(int(code) + 1) % 10**8:08d}"
    env.verify(session, wrong)
    env.verify(session, code)  # too many tries: the code is dropped
    assert env.reasons()[-1] == RejectReason.TOO_MANY_TRIES.value
    assert env.handle.challenge(EMAIL, session).challenges[EMAIL]["sent"] is True
    assert env.handle.challenge(EMAIL, session).challenges[EMAIL] == {"error": "too_many_sends"}
    assert len(env.outbox) == 2


def test_challenge_needs_a_pending_email_step(memory_env: Env) -> None:
    env = memory_env
    env.enroll_totp()
    session, _ = env.begin()
    with pytest.raises(LoginNotStarted):
        env.handle.challenge(EMAIL, session)
    assert len(env.outbox) == 0


# --- the mail sender ----------------------------------------------------------------------


def test_no_sender_is_a_configuration_error_naming_the_key(memory_env: Env) -> None:
    env = memory_env
    env.enroll_totp()
    env.enroll_email()
    env.sender[0] = None
    session, _ = env.begin()
    with pytest.raises(ConfigurationError, match="AUTHFLOW_SMTP_HOST"):
        env.handle.challenge(EMAIL, session)
    assert SLOT not in (session.record.flow or {})
    # on entry (the step's only kind) the error is the challenge's answer
    other = make_env(InMemoryBackend(clock=env.clock), env.clock)
    other.enroll_email()
    other.sender[0] = None
    _, outcome = other.begin()
    assert outcome.challenges[EMAIL] == {"error": "configuration_error"}


def test_failing_sender_is_a_typed_503_and_stores_nothing(memory_env: Env) -> None:
    env = memory_env
    env.enroll_totp()
    env.enroll_email()

    class Broken:
        def send(self, to: str, subject: str, body: str) -> None:
            raise OSError("connection refused")

    env.sender[0] = Broken()
    session, _ = env.begin()
    with pytest.raises(MailDeliveryError) as raised:
        env.handle.challenge(EMAIL, session)
    assert raised.value.status == 503
    assert isinstance(raised.value.__cause__, OSError)
    assert SLOT not in (session.record.flow or {})


# --- enrollment ---------------------------------------------------------------------------


def logged_in(env: Env) -> AuthSession:
    session, outcome = env.begin()
    assert isinstance(outcome, Authenticated)
    return session


def test_enrollment_sends_a_code_to_the_new_address_and_confirms(env: Env) -> None:
    session = logged_in(env)
    start = env.handle.begin_enrollment(session, EMAIL, {"address": "alice@example.com"})
    assert start.kind is EMAIL
    assert start.public == {"sent": True, "to": "a***@example.com", "expires_in": 300}
    assert env.outbox[-1].to == "alice@example.com"
    assert SITE in env.outbox[-1].subject
    pending = env.backend.get_factor("acme", env.user_id, start.factor_id)
    assert pending is not None and not pending.confirmed
    assert pending.data["address"] == "alice@example.com" and pending.secret == ""
    assert env.backend.list_user_factors("acme", env.user_id, kind=EMAIL) == []

    confirmed = env.handle.confirm_enrollment(
        session, EMAIL, start.factor_id, FactorCredential.code(EMAIL, env.last_code())
    )
    assert confirmed.confirmed and confirmed.factor_id == start.factor_id
    assert [f.factor_id for f in env.backend.list_user_factors("acme", env.user_id, kind=EMAIL)] == [
        start.factor_id
    ]
    # the next login asks for a code sent to that address
    _, outcome = env.begin()
    assert isinstance(outcome, FactorRequired) and outcome.kinds == (EMAIL,)
    assert env.outbox[-1].to == "alice@example.com"


def test_new_address_replaces_the_old_one_once_confirmed(env: Env) -> None:
    old = env.enroll_email("old@example.com")
    session, _ = env.begin()
    assert isinstance(env.verify(session, env.last_code()), Authenticated)
    start = env.handle.begin_enrollment(session, EMAIL, {"address": "new@example.net"})
    assert env.outbox[-1].to == "new@example.net"
    # until confirmed, logins still use the old address
    assert [f.factor_id for f in env.backend.list_user_factors("acme", env.user_id, kind=EMAIL)] == [old]
    env.handle.confirm_enrollment(
        session, EMAIL, start.factor_id, FactorCredential.code(EMAIL, env.last_code())
    )
    factors = env.backend.list_user_factors("acme", env.user_id, kind=EMAIL, include_pending=True)
    assert [(f.factor_id, f.data["address"]) for f in factors] == [(start.factor_id, "new@example.net")]
    env.begin()
    assert env.outbox[-1].to == "new@example.net"


def test_wrong_enrollment_code_confirms_nothing(env: Env) -> None:
    session = logged_in(env)
    start = env.handle.begin_enrollment(session, EMAIL, {"address": "alice@example.com"})
    code = env.last_code()
    wrong = f"{(int(code) + 1) % 10**8:08d}"
    with pytest.raises(EnrollmentError):
        env.handle.confirm_enrollment(session, EMAIL, start.factor_id, FactorCredential.code(EMAIL, wrong))
    # nothing confirmed by the wrong code; the user may correct a typo with the right one
    assert env.backend.list_user_factors("acme", env.user_id, kind=EMAIL) == []
    env.handle.confirm_enrollment(session, EMAIL, start.factor_id, FactorCredential.code(EMAIL, code))
    assert len(env.backend.list_user_factors("acme", env.user_id, kind=EMAIL)) == 1


def test_wrong_enrollment_codes_use_up_the_tries(env: Env) -> None:
    session = logged_in(env)
    start = env.handle.begin_enrollment(session, EMAIL, {"address": "alice@example.com"})
    code = env.last_code()
    wrong = FactorCredential.code(EMAIL, f"{(int(code) + 1) % 10**8:08d}")
    for _ in range(5):  # AUTHFLOW_EMAIL_OTP_MAX_TRIES
        with pytest.raises(EnrollmentError):
            env.handle.confirm_enrollment(session, EMAIL, start.factor_id, wrong)
    with pytest.raises(EnrollmentError):  # the code is dead: even the right one is refused now
        env.handle.confirm_enrollment(session, EMAIL, start.factor_id, FactorCredential.code(EMAIL, code))
    assert env.backend.list_user_factors("acme", env.user_id, kind=EMAIL) == []


def test_expired_enrollment_code_confirms_nothing(memory_env: Env) -> None:
    env = memory_env
    session = logged_in(env)
    start = env.handle.begin_enrollment(session, EMAIL, {"address": "alice@example.com"})
    env.clock.advance(timedelta(minutes=5, seconds=1))
    with pytest.raises(EnrollmentError):
        env.handle.confirm_enrollment(
            session, EMAIL, start.factor_id, FactorCredential.code(EMAIL, env.last_code())
        )
    assert env.backend.list_user_factors("acme", env.user_id, kind=EMAIL) == []
    assert any(r.event == "factor_enroll" and r.reason == "expired" for r in env.audit.records)


def test_enrollment_code_is_bound_to_its_pending_factor(memory_env: Env) -> None:
    env = memory_env
    session = logged_in(env)
    first = env.handle.begin_enrollment(session, EMAIL, {"address": "one@example.com"})
    first_code = env.last_code()
    second = env.handle.begin_enrollment(session, EMAIL, {"address": "two@example.com"})
    # the earlier pending address is dropped; its code no longer confirms anything
    assert env.backend.get_factor("acme", env.user_id, first.factor_id) is None
    with pytest.raises(EnrollmentError):
        env.handle.confirm_enrollment(
            session, EMAIL, first.factor_id, FactorCredential.code(EMAIL, first_code)
        )
    assert env.backend.list_user_factors("acme", env.user_id, kind=EMAIL) == []
    assert env.backend.get_factor("acme", env.user_id, second.factor_id) is not None


def test_enrollment_sends_are_limited(clock: MockClock) -> None:
    env = make_env(InMemoryBackend(clock=clock), clock, max_sends=2)
    session = logged_in(env)
    env.handle.begin_enrollment(session, EMAIL, {"address": "one@example.com"})
    env.handle.begin_enrollment(session, EMAIL, {"address": "two@example.com"})
    with pytest.raises(EnrollmentError):
        env.handle.begin_enrollment(session, EMAIL, {"address": "three@example.com"})
    assert [m.to for m in env.outbox.messages] == ["one@example.com", "two@example.com"]
    clock.advance(timedelta(minutes=5, seconds=1))  # the last code expired: the count restarts
    env.handle.begin_enrollment(session, EMAIL, {"address": "three@example.com"})
    assert env.outbox[-1].to == "three@example.com"


@pytest.mark.parametrize(
    "address",
    [
        None,
        "",
        "alice",
        "alice@",
        "@example.com",
        "a@b@example.com",
        "alice@example.com\r\nBcc: eve@example.net",
        "alice@example.com\n",
        "alice @example.com",
        " alice@example.com",
        "alice@exa\tmple.com",
        "Alice <alice@example.com>",
        "alice@example.com, eve@example.net",
        "alice@example..com",
        "a" * 65 + "@example.com",
        "alice@" + "a" * 250 + ".com",
        12345,
    ],
)
def test_bad_addresses_are_refused_before_anything_is_stored_or_sent(memory_env: Env, address: Any) -> None:
    env = memory_env
    session = logged_in(env)
    with pytest.raises(InvalidInput):
        env.handle.begin_enrollment(session, EMAIL, {"address": address})
    assert len(env.outbox) == 0
    assert env.backend.list_user_factors("acme", env.user_id, kind=EMAIL, include_pending=True) == []


def test_failed_enrollment_send_leaves_no_pending_factor(memory_env: Env) -> None:
    env = memory_env
    session = logged_in(env)

    class Broken:
        def send(self, to: str, subject: str, body: str) -> None:
            raise ConnectionResetError

    env.sender[0] = Broken()
    with pytest.raises(MailDeliveryError):
        env.handle.begin_enrollment(session, EMAIL, {"address": "alice@example.com"})
    assert env.backend.list_user_factors("acme", env.user_id, kind=EMAIL, include_pending=True) == []


def test_enrollment_code_of_another_pending_factor_is_refused(memory_env: Env) -> None:
    env = memory_env

    def context(flow: dict[str, Any]) -> EnrollContext:
        return EnrollContext(
            tenant="acme",
            user_id=env.user_id,
            account_name="alice",
            issuer_name=SITE,
            now=env.clock.now(),
            store=env.backend,
            flow=flow,
        )

    first_ctx = context({})
    first = env.factor.begin(first_ctx, {"address": "one@example.com"})
    first_code = env.last_code()
    second_ctx = context({})  # another session's enrollment
    second = env.factor.begin(second_ctx, {"address": "two@example.com"})
    assert first_ctx.flow_update is not None
    confirming = context(first_ctx.flow_update)
    credential = FactorCredential.code(EMAIL, first_code)
    assert env.factor.confirm(confirming, second.factor_id, credential) == Rejected(FOREIGN_ENROLLMENT)
    # One pending enrollment per kind and user: the second start replaced the first.
    assert env.backend.get_factor("acme", env.user_id, first.factor_id) is None
    assert not env.factor.confirm(confirming, first.factor_id, credential)


def test_list_and_disable(memory_env: Env) -> None:
    env = memory_env
    factor_id = env.enroll_email()
    totp_id = env.enroll_totp()
    ctx = EnrollContext(
        tenant="acme",
        user_id=env.user_id,
        account_name="alice",
        issuer_name=SITE,
        now=env.clock.now(),
        store=env.backend,
        flow={},
    )
    assert [f.factor_id for f in env.factor.list(ctx)] == [factor_id]
    assert not env.factor.disable(ctx, totp_id)  # not an e-mail factor
    assert env.factor.disable(ctx, factor_id)
    assert env.factor.list(ctx) == []


# --- the parts on their own ---------------------------------------------------------------


def test_codes_are_eight_digits_with_leading_zeros(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("flask_authflow.mfa._email_otp.secrets.randbelow", lambda n: 42)
    assert EmailOtpFactor.new_code() == "00000042"
    monkeypatch.undo()
    assert all(re.fullmatch(r"[0-9]{8}", EmailOtpFactor.new_code()) for _ in range(50))


def test_verify_without_a_slot_or_factor(memory_env: Env) -> None:
    env = memory_env
    ctx = FactorContext(
        tenant="acme",
        user_id=env.user_id,
        now=env.clock.now(),
        store=env.backend,
        factors=(),
        flow={},
        transaction="t1",
    )
    assert env.factor.challenge(ctx) == {"error": "not_enrolled"}
    assert ctx.flow_update is None and len(env.outbox) == 0
    assert env.factor.verify(ctx, FactorCredential.code(EMAIL, "12345678")) == Rejected(
        RejectReason.NO_CHALLENGE
    )


def test_check_and_mask_address() -> None:
    assert check_address("a.b+tag@sub.example.com") == "a.b+tag@sub.example.com"
    assert mask_address("alice@example.com") == "a***@example.com"
    assert mask_address("x@example.com") == "x***@example.com"
    assert mask_address("broken") == "***"


def test_constructor_refuses_nonsense() -> None:
    sealer = FactorSealer.from_key(b"k" * 32)
    with pytest.raises(ConfigurationError):
        EmailOtpFactor(sealer, lambda: None, ttl=timedelta(0))
    with pytest.raises(ConfigurationError):
        EmailOtpFactor(sealer, lambda: None, max_tries=0)
    with pytest.raises(ConfigurationError):
        EmailOtpFactor(sealer, lambda: None, max_sends=True)
    factor = EmailOtpFactor(sealer, lambda: None, site_name="Acme\r\nBcc: eve@example.net")
    assert factor.site_name == "Acme Bcc: eve@example.net"
    assert "\n" not in factor.login_message("12345678")[0]
    assert factor.challenge_on_request is True and factor.kind is EMAIL and factor.replaces_kind


# --- through a real SMTP server -----------------------------------------------------------


def test_code_travels_through_a_real_smtp_server(
    memory_env: Env,
    smtp_server: SmtpTestServer,  # noqa: F811
) -> None:
    """STARTTLS with a verified certificate and a login, to aiosmtpd on 127.0.0.1; the code
    read from the message the server received passes the login."""
    env = memory_env
    env.enroll_email("alice@example.com")
    env.sender[0] = SmtpSender(smtp_server.settings())
    session, outcome = env.begin()
    assert outcome.challenges[EMAIL]["sent"] is True
    assert len(env.outbox) == 0 and len(smtp_server.messages) == 1
    received = smtp_server.messages[0]
    assert received.rcpt_tos == ("alice@example.com",)
    assert received.over_tls and received.login == smtp_server.username
    assert str(received.message["To"]) == "alice@example.com"
    assert str(received.message["Subject"]) == f"Your {SITE} sign-in code"
    body = received.message.get_body(("plain",))
    assert body is not None
    code = code_of(body.get_content())
    assert isinstance(env.verify(session, code), Authenticated)


def test_a_step_up_sends_the_code_but_not_to_a_locked_account(env: Env) -> None:
    env.enroll_email()
    session, _ = env.begin()
    assert isinstance(env.verify(session, env.last_code()), Authenticated)
    sent = len(env.outbox)
    step = env.handle.begin_step_up(session, strongest=True)
    assert step.factors == (EMAIL,) and len(env.outbox) == sent + 1  # the only kind: sent at once
    assert isinstance(env.verify(session, env.last_code()), Authenticated)  # the step-up passed
    env.backend.set_lock(AttemptKey("acme", "alice", EMAIL.value), env.clock.now() + timedelta(minutes=15))
    env.handle.begin_step_up(session, strongest=True)
    assert len(env.outbox) == sent + 1  # a locked account gets no e-mail


# --- the HTML part --------------------------------------------------------------------------------


def test_a_code_mail_has_an_html_part_from_the_overridable_template(clock: MockClock) -> None:
    from flask import Flask

    from flask_authflow._web.factor_wiring import code_mail_html

    app = Flask(__name__, root_path=str(Path(__file__).parent))
    app.jinja_loader = ChoiceLoader([PackageLoader("flask_authflow._web", "templates")])
    env = make_env(InMemoryBackend(clock=clock), clock, html_body=code_mail_html)
    html_outbox = HtmlOutbox()
    env.sender[0] = html_outbox
    env.enroll_email()
    with app.test_request_context():
        env.begin()
    [message] = html_outbox.messages
    [html] = html_outbox.html
    code = message.body.split("\n\n")[1].strip()
    assert code.isdigit() and f">{code}</p>" in html and "monospace" in html
    assert "<title>" in html and SITE in html


def test_the_html_part_escapes_what_it_is_given() -> None:
    from flask import Flask

    from flask_authflow._web.factor_wiring import code_mail_html

    app = Flask(__name__)
    app.jinja_loader = ChoiceLoader([PackageLoader("flask_authflow._web", "templates")])
    with app.test_request_context():
        html = code_mail_html("<b>site</b> code", "Hello <script>x</script>\n\n    12345678\n\nbye")
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;b&gt;site" in html
    assert html.count("<p") == 3
