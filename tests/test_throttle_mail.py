"""Mail sends are limited per recipient and per account across sessions (the e-mail code
factor asks the throttle before every send)."""

from __future__ import annotations

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._outcomes import FactorKind
from flask_authflow._throttle import Throttle, parse_limits
from flask_authflow.errors import Throttled
from flask_authflow.storage._memory import InMemoryBackend
from tests.test_email_otp import Env, logged_in, make_env

EMAIL = FactorKind.EMAIL_OTP


def env_with(limits: dict[str, str]) -> Env:
    clock = MockClock()
    backend = InMemoryBackend(clock=clock)
    throttle = Throttle(parse_limits("t", limits))
    return make_env(backend, clock, mail_limit=throttle.mail)


def test_codes_of_many_logins_stop_at_the_accounts_mail_limit() -> None:
    env = env_with({"mail.account": "3/hour"})
    env.enroll_totp()
    env.enroll_email()
    for _ in range(3):
        session, _ = env.begin()
        env.handle.challenge(EMAIL, session)
    session, _ = env.begin()
    with pytest.raises(Throttled) as refused:
        env.handle.challenge(EMAIL, session)
    assert refused.value.scope == "mail.account"
    assert len(env.outbox) == 3  # nothing went out for the refused one
    assert env.audit.records[-1].event == "factor_challenge"
    assert env.audit.records[-1].reason == "throttled"


def test_confirmation_mails_to_a_foreign_address_stop_at_the_recipients_limit() -> None:
    env = env_with({"mail.recipient": "2/hour", "mail.account": "100/hour"})
    for _ in range(2):  # two sessions, each starts enrolling the same foreign address
        env.handle.begin_enrollment(logged_in(env), EMAIL, {"address": "victim@example.org"})
    before = {f.factor_id for f in env.backend.list_user_factors("acme", env.user_id, include_pending=True)}
    with pytest.raises(Throttled) as refused:
        env.handle.begin_enrollment(logged_in(env), EMAIL, {"address": "Victim@Example.org"})
    assert refused.value.scope == "mail.recipient"
    assert len(env.outbox) == 2
    # No pending factor was stored for the refused send.
    assert {
        f.factor_id for f in env.backend.list_user_factors("acme", env.user_id, include_pending=True)
    } == before
