"""Mail budgets strangers cannot spend (issue 28, point 4).

Twenty forgot-password requests for erin from strangers used up the one per-recipient mail
limit: her own reset mail was then dropped silently and her e-mail-code login answered 429.
The mails anyone can trigger now spend the strangers' budget (``stranger_mail``); the mails
she asks for after proving something spend hers (``mail``); her own forgot-password request
from a network where she signed in spends hers too.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from flask.testing import FlaskClient

from flask_authflow._throttle import Throttle, parse_limits
from flask_authflow._web.state import get_state
from flask_authflow.errors import Throttled
from flask_authflow.testing._pytest_plugin import Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.parts import child_processes
from tests.test_views import (
    Site,
    enroll_email,
    factor_step,
    factors_token,
    login,
    logout,
    make_site,
    real_factors,
)

PASSWORD = "erin's own long passphrase"
ERIN = "erin@example.com"
#: Two networks of strangers, two addresses each: no address or network limit is reached.
STRANGERS = ("203.0.113.7", "203.0.113.8", "198.51.100.7", "198.51.100.8")


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    made = make_site(
        app_factory,
        AUTHFLOW_PASSWORD_RESET=True,
        AUTHFLOW_REGISTRATION=True,
        AUTHFLOW_EXTERNAL_URL="https://app.example.com",
    )
    real_factors(made.app)
    get_state(made.app).mail_sender = Outbox()
    add_user(made.backend, "default", "erin", PASSWORD, email=ERIN)
    return made


def _outbox(site: Site) -> Outbox:
    sender = get_state(site.app).mail_sender
    assert isinstance(sender, Outbox)
    return sender


def _from(site: Site, address: str) -> FlaskClient:
    client = site.client()
    client.environ_base["REMOTE_ADDR"] = address
    return client


def _forgot(client: FlaskClient, **body: str) -> tuple[int, object]:
    answer = client.post("/password/forgot", json=body or {"username": "erin"})
    answer.close()  # runs the delivery, which waits for the answer to go out
    return answer.status_code, answer.json


def _mails_to_erin(site: Site) -> int:
    return sum(1 for message in _outbox(site).messages if message.to == ERIN)


def _stranger_attack(site: Site, requests: int = 20) -> list[tuple[int, object]]:
    return [_forgot(_from(site, STRANGERS[number % len(STRANGERS)])) for number in range(requests)]


def test_strangers_requests_leave_erin_her_reset_mail_and_her_code_login(site: Site) -> None:
    erin = _from(site, "192.0.2.10")
    login(erin, "erin", PASSWORD)
    enroll_email(erin, _outbox(site), ERIN)  # her e-mail code, on her own budget
    logout(erin)
    before = _mails_to_erin(site)

    answers = _stranger_attack(site)
    assert answers == [(202, {"status": "sent_if_known"})] * 20
    # The strangers' budget still stops the mail-bombing: 5 an hour reach her, no more.
    assert _mails_to_erin(site) - before == 5

    # Her own request, from the network she signs in from (another address of it), is sent.
    assert _forgot(_from(site, "192.0.2.77")) == (202, {"status": "sent_if_known"})
    assert _outbox(site).messages[-1].to == ERIN
    assert "/password/reset?token=" in _outbox(site).messages[-1].body
    # And her e-mail-code login is not refused: the code is mailed, and it signs her in.
    sent = len(_outbox(site).messages)
    assert login(erin, "erin", PASSWORD).location == "/login/factor"
    assert len(_outbox(site).messages) == sent + 1
    code = _outbox(site).messages[-1].body.split()
    digits = next(word for word in code if word.isdigit() and len(word) == 8)
    assert factor_step(erin, digits, kind="email_otp").location == "/account"


def test_an_unknown_requester_past_the_strangers_budget_gets_the_same_answer_and_a_log_line(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    _stranger_attack(site, 5)
    assert _mails_to_erin(site) == 5
    with caplog.at_level(logging.WARNING, logger="flask_authflow.mail"):
        refused = _forgot(_from(site, "198.51.100.9"))
    unknown = _forgot(_from(site, "198.51.100.9"), username="nobody")
    assert refused == unknown == (202, {"status": "sent_if_known"})
    assert _mails_to_erin(site) == 5  # not sent ...
    assert any(
        "stranger_mail.recipient" in record.getMessage() for record in caplog.records
    )  # ... not silent


def test_sign_up_mails_spend_the_strangers_budget_not_the_owners(site: Site) -> None:
    for number in range(7):  # "this address is already yours" notices, from strangers
        answer = _from(site, STRANGERS[number % 4]).post(
            "/signup",
            json={"username": f"mallory{number}", "email": ERIN, "password": "a long enough passphrase 42"},
        )
        answer.close()
        assert answer.status_code == 202
    assert _mails_to_erin(site) == 5
    erin = _from(site, "192.0.2.10")
    login(erin, "erin", PASSWORD)
    enroll_email(erin, _outbox(site), ERIN)  # the owner's budget is untouched
    assert _mails_to_erin(site) == 6


def test_enrolling_her_address_as_someone_elses_factor_spends_the_strangers_budget(site: Site) -> None:
    erin = _from(site, "192.0.2.10")
    login(erin, "erin", PASSWORD)
    enroll_email(erin, _outbox(site), ERIN)
    logout(erin)
    _stranger_attack(site, 5)  # the strangers' share for her address is spent
    assert _mails_to_erin(site) == 6
    add_user(site.backend, "default", "mallory", PASSWORD)
    mallory = _from(site, "198.51.100.99")
    login(mallory, "mallory", PASSWORD)
    refused = mallory.post(
        "/account/factors/email", data={"address": ERIN, "csrf_token": factors_token(mallory)}
    )
    assert refused.status_code == 429  # a confirmation code to her address: the strangers' budget
    assert _mails_to_erin(site) == 6
    assert login(erin, "erin", PASSWORD).location == "/login/factor"
    assert _mails_to_erin(site) == 7  # her own code is not refused


# --- the throttle's two budgets -------------------------------------------------------------------


def _throttle(**limits: str) -> Throttle:
    return Throttle(parse_limits("t", limits))


def test_a_request_from_the_owners_network_or_device_spends_her_budget() -> None:
    throttle = _throttle(**{"stranger_mail.recipient": "100/hour", "mail.recipient": "100/hour"})
    account = ("default", "u-erin")
    assert throttle.stranger_mail(ERIN, address="192.0.2.5", account=account) == "stranger_mail"
    throttle.owner_signed_in("default", "u-erin", "192.0.2.5")
    assert throttle.stranger_mail(ERIN, address="192.0.2.200", account=account) == "mail"
    assert throttle.stranger_mail(ERIN, address="192.0.3.1", account=account) == "stranger_mail"
    assert throttle.stranger_mail(ERIN, address="192.0.3.1", account=account, device_user="u-erin") == "mail"
    assert throttle.stranger_mail(ERIN, address="192.0.3.1", account=account, device_user="u-eve") == (
        "stranger_mail"
    )
    # Another account's network is not hers; an address nobody knows belongs to nobody.
    assert throttle.stranger_mail(ERIN, address="192.0.2.5", account=("default", "u-bob")) == "stranger_mail"
    throttle.owner_signed_in("default", "u-erin", None)
    throttle.owner_signed_in("default", "u-erin", "garbage")
    assert throttle.stranger_mail(ERIN, address="garbage", account=account) == "stranger_mail"
    assert throttle.stranger_mail(ERIN, address=None, account=account) == "stranger_mail"


def test_the_strangers_budget_and_the_owners_never_share_a_count() -> None:
    throttle = _throttle(**{"stranger_mail.recipient": "2/hour", "mail.recipient": "2/hour"})
    for _ in range(2):
        throttle.stranger_mail(ERIN, address="203.0.113.7")
    with pytest.raises(Throttled) as refused:
        throttle.stranger_mail(ERIN, address="203.0.113.8")
    assert refused.value.scope == "stranger_mail.recipient"
    throttle.mail(ERIN, "default", "u-erin")  # the e-mail code after her password
    throttle.mail(ERIN, "default", "u-erin")
    with pytest.raises(Throttled) as own:
        throttle.mail(ERIN, "default", "u-erin")
    assert own.value.scope == "mail.recipient"


def test_a_disabled_throttle_counts_no_budget() -> None:
    throttle = Throttle.disabled()
    throttle.owner_signed_in("default", "u-erin", "192.0.2.5")
    for _ in range(50):
        assert (
            throttle.stranger_mail(ERIN, address="192.0.2.5", account=("default", "u-erin"))
            == "stranger_mail"
        )


def _learn(url: str, tenant: str) -> None:
    from limits.storage import storage_from_string

    Throttle(parse_limits("t", {}), storage_from_string(url)).owner_signed_in(tenant, "u-erin", "192.0.2.5")


def _ask(url: str, tenant: str, out: Any) -> None:
    from limits.storage import storage_from_string

    throttle = Throttle(parse_limits("t", {}), storage_from_string(url))
    out.put(throttle.stranger_mail(ERIN, address="192.0.2.77", account=(tenant, "u-erin")))


@pytest.mark.multiprocess
def test_a_sign_in_served_by_one_process_makes_her_network_known_to_the_others(redis_server: Any) -> None:
    spawn = child_processes()
    tenant = f"t-{time.time_ns()}"  # a key space of its own on the shared server
    out = spawn.Queue()
    stranger = spawn.Process(target=_ask, args=(redis_server.url(5), tenant, out))
    stranger.start()
    assert out.get(timeout=60) == "stranger_mail"
    stranger.join(30)
    learner = spawn.Process(target=_learn, args=(redis_server.url(5), tenant))
    learner.start()
    learner.join(60)
    asker = spawn.Process(target=_ask, args=(redis_server.url(5), tenant, out))
    asker.start()
    assert out.get(timeout=60) == "mail"
    asker.join(30)
    assert learner.exitcode == asker.exitcode == 0
