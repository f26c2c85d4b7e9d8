"""Sign-up verification codes: attempts throttled per address, network and (account,
network) before the code is checked (issue 28, point 4).

Five wrong codes from anyone who knew a newcomer's username voided her verification link.
Now a stranger is answered 429 (with ``Retry-After``) long before that, and the hard cap
of wrong codes per token (:data:`~flask_authflow.login._verification.CODE_ATTEMPTS`) is
out of one network's reach.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient

from flask_authflow._web.state import get_state
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login._account_tokens import AccountTokenInvalid, token_digest
from flask_authflow.login._verification import CODE_ATTEMPTS
from flask_authflow.testing._pytest_plugin import Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.concurrency import run_together
from tests.parts import child_processes
from tests.test_signup import code_in, sign_up, token_in
from tests.test_views import Site, make_site

WRONG = "AAAA-AAAA"


def _site(app_factory: AppFactory, **limits: Any) -> Site:
    made = make_site(
        app_factory,
        AUTHFLOW_REGISTRATION=True,
        AUTHFLOW_EXTERNAL_URL="https://app.example.com",
        AUTHFLOW_THROTTLE_LIMITS=limits,
    )
    get_state(made.app).mail_sender = Outbox()
    return made


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    return _site(app_factory)


def _from(site: Site, address: str) -> FlaskClient:
    client = site.client()
    client.environ_base["REMOTE_ADDR"] = address
    return client


def _mail(site: Site) -> str:
    sender = get_state(site.app).mail_sender
    assert isinstance(sender, Outbox)
    return sender.messages[-1].body


def _try(client: FlaskClient, username: str = "erin", code: str = WRONG) -> Any:
    return client.post("/signup/verify", json={"username": username, "code": code})


def _attempts(site: Site, token: str) -> int:
    found = site.backend.find_account_token(token_digest(token))
    assert found is not None
    return found.code_attempts


def test_a_strangers_wrong_codes_are_throttled_and_leave_her_link_working(site: Site) -> None:
    sign_up(site, "erin", "erin@example.com")
    link = token_in(_mail(site))
    stranger = _from(site, "203.0.113.9")
    assert [_try(stranger).status_code for _ in range(5)] == [401] * 5
    refused = _try(stranger)
    assert refused.status_code == 429 and refused.json["error"] == "throttled"
    assert int(refused.headers["Retry-After"]) >= 1
    assert _attempts(site, link) == 5  # the throttled request checked nothing
    # Other addresses of the stranger's network share the (account, network) count.
    assert _try(_from(site, "203.0.113.10")).status_code == 429
    answer = site.client().post("/signup/verify", json={"token": link})
    assert answer.status_code == 200 and answer.json["status"] == "email_confirmed"


def test_her_own_code_works_from_her_network_after_a_stranger_was_throttled(site: Site) -> None:
    sign_up(site, "erin", "erin@example.com")
    code = code_in(_mail(site))
    stranger = _from(site, "203.0.113.9")
    for _ in range(6):
        _try(stranger).close()
    assert _try(_from(site, "192.0.2.20"), code=code).status_code == 200


def test_unknown_usernames_are_throttled_the_same(site: Site) -> None:
    client = _from(site, "203.0.113.9")
    assert [_try(client, "nobody").status_code for _ in range(6)] == [401] * 5 + [429]


def test_one_address_is_throttled_across_accounts(app_factory: AppFactory) -> None:
    site = _site(app_factory, **{"code.address": "3/hour"})
    client = _from(site, "203.0.113.9")
    answers = [_try(client, name).status_code for name in ("ann", "bea", "cat", "dot")]
    assert answers == [401, 401, 401, 429]
    assert _try(_from(site, "198.51.100.1"), "dot").status_code == 401  # another network is not


def test_the_hard_cap_of_wrong_codes_voids_the_token(app_factory: AppFactory) -> None:
    site = _site(app_factory, **{"code.address": None, "code.network": None, "code.pair": None})
    sign_up(site, "erin", "erin@example.com")
    body = _mail(site)
    client = _from(site, "203.0.113.9")
    for _ in range(CODE_ATTEMPTS):
        _try(client).close()
    assert _attempts(site, token_in(body)) == CODE_ATTEMPTS
    assert _try(client, code=code_in(body)).status_code == 401
    assert site.client().post("/signup/verify", json={"token": token_in(body)}).status_code == 410


def test_parallel_wrong_codes_from_one_address_get_exactly_the_pairs_share(site: Site) -> None:
    sign_up(site, "erin", "erin@example.com")
    link = token_in(_mail(site))

    def attempt() -> int:
        answer = _try(_from(site, "203.0.113.9"))
        answer.close()
        return answer.status_code

    answers = run_together([attempt] * 20)
    assert sorted(answers) == [401] * 5 + [429] * 15
    assert _attempts(site, link) == 5
    assert site.client().post("/signup/verify", json={"token": link}).status_code == 200


# --- the hard cap's counter, raced by several processes on PostgreSQL ---------------------------


def _wrong_codes(url: str, user_id: str, tries: int, start: Any, out: Any) -> None:
    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    backend = SqlAlchemyBackend(url, create_tables=False)
    start.wait(30)
    refused = 0
    for _ in range(tries):
        try:
            account_tokens.use_code(
                backend, "acme", user_id, "signup", WRONG, datetime.now(UTC), max_attempts=CODE_ATTEMPTS
            )
        except AccountTokenInvalid:
            refused += 1
    backend.close()
    out.put(refused)


def _race_wrong_codes(url: str, user_id: str, processes: int, tries: int) -> None:
    spawn = child_processes()
    start, out = spawn.Event(), spawn.Queue()
    workers = [
        spawn.Process(target=_wrong_codes, args=(url, user_id, tries, start, out)) for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(1.5)
    start.set()
    assert sum(out.get(timeout=120) for _ in workers) == processes * tries
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0


@pytest.mark.multiprocess
@pytest.mark.parametrize(("processes", "tries"), [(3, 20), (4, 30)])
def test_wrong_codes_from_several_processes_lose_no_count_and_stop_at_the_cap(
    postgres_server: Any, processes: int, tries: int
) -> None:
    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        user = add_user(backend, "acme", "erin", "a long enough passphrase 42", email="erin@example.com")
        issued = account_tokens.issue(
            backend,
            kind="signup",
            tenant="acme",
            user_id=user.user_id,
            now=datetime.now(UTC),
            ttl=timedelta(hours=1),
        )
        _race_wrong_codes(url, user.user_id, processes, tries)
        found = backend.find_account_token(issued.record.token_hash)
        assert found is not None
        total = processes * tries
        assert found.code_attempts == min(total, CODE_ATTEMPTS)  # every wrong code counted once
        now = datetime.now(UTC)
        if total < CODE_ATTEMPTS:  # under the cap: her code still works
            used = account_tokens.use_code(
                backend, "acme", user.user_id, "signup", issued.code, now, max_attempts=CODE_ATTEMPTS
            )
            assert used.token_hash == issued.record.token_hash
        else:  # at the cap: the token is void, her code too
            with pytest.raises(AccountTokenInvalid):
                account_tokens.use_code(
                    backend, "acme", user.user_id, "signup", issued.code, now, max_attempts=CODE_ATTEMPTS
                )
    finally:
        backend.close()


# --- the throttle's counts shared by several processes through Redis ----------------------------


def _code_attempts(url: str, tenant: str, tries: int, start: Any, out: Any) -> None:
    from limits.storage import storage_from_string

    from flask_authflow._throttle import Throttle, parse_limits
    from flask_authflow.errors import Throttled

    throttle = Throttle(parse_limits("t", {"code.pair": "5/hour"}), storage_from_string(url))
    start.wait(30)
    passed = 0
    for _ in range(tries):
        try:
            throttle.code_attempt(tenant, "erin", "203.0.113.9")
            passed += 1
        except Throttled:
            pass
    out.put(passed)


@pytest.mark.multiprocess
def test_code_attempts_from_several_processes_share_one_count(redis_server: Any) -> None:
    spawn = child_processes()
    start, out = spawn.Event(), spawn.Queue()
    tenant = f"t-{time.time_ns()}"  # a key space of its own on the shared server
    workers = [
        spawn.Process(target=_code_attempts, args=(redis_server.url(5), tenant, 5, start, out))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    time.sleep(1.5)
    start.set()
    passed = sum(out.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    # One count for all: 5 of the 20 get through, plus at most one per other process that
    # tested in the same instant (test-then-count is atomic within a process only).
    assert 5 <= passed <= 5 + len(workers) - 1
