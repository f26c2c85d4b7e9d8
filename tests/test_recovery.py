"""Recovery ends everything an attacker left (docs/security.rst, "Recovery ends everything an
attacker left"): a completed password reset, a password change and "log out everywhere"
end the user's sessions, API tokens and pending account tokens (reset, change of e-mail,
verification) and clear the account-wide lock; ending one session ends that one only.

Each test plays the attack through the pages, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from flask_authflow import login_required
from flask_authflow._clock import MockClock
from flask_authflow._core.ports import ApiTokenRecord, AttemptKey
from flask_authflow._core.session import sid_hash
from flask_authflow._web.api_auth import token_service
from flask_authflow._web.state import account_admin, get_state
from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.errors import AuditWriteError
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login import _recovery as recovery
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.migrations import upgrade
from flask_authflow.testing._pytest_plugin import Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.authn_support import CTX, FAST_HASHER, new_session
from tests.test_views import csrf_of

# The app's own SQL stores: the plugin's in-memory ones would replace them.
pytestmark = pytest.mark.authflow_stores("sql")

PASSWORD = "correct horse battery"
NEW = "a brand new passphrase 9"
ATTACKER = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
OWNER = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) Version/17.4 Mobile/15E148 Safari/604.1"


@dataclass
class Site:
    app: Flask
    outbox: Outbox
    clock: MockClock
    user_id: str

    def client(self, agent: str = OWNER, address: str = "192.0.2.10") -> FlaskClient:
        client = self.app.test_client()
        client.environ_base["HTTP_USER_AGENT"] = agent
        client.environ_base["REMOTE_ADDR"] = address
        return client

    def signed_in(
        self, agent: str = OWNER, password: str = PASSWORD, address: str = "192.0.2.10"
    ) -> FlaskClient:
        client = self.client(agent, address)
        assert login(client, password).status_code == 302
        return client

    def rows(self, event: str) -> list[AuditRecord]:
        return [row for row in get_state(self.app).backend.audit_rows if row.event == event]

    def token_mailed_to(self, address: str) -> str:
        body = [message for message in self.outbox.messages if message.to == address][-1].body
        found = re.search(r"token=([A-Za-z0-9_-]{43})", body)
        assert found is not None, body
        return found.group(1)

    def api_token(self) -> str:
        with self.app.app_context():
            return token_service(self.app).create("default", self.user_id, "attacker script").value

    def api_works(self, value: str) -> bool:
        answer = self.client().get("/api/me", headers={"Authorization": f"Bearer {value}"})
        return answer.status_code == 200


def login(client: FlaskClient, password: str = PASSWORD) -> Any:
    page = client.get("/login")
    form = {"username": "alice", "password": password, "csrf_token": csrf_of(page.text)}
    return client.post("/login", data=form)


@pytest.fixture
def site(app_factory: AppFactory, database_url: str, mock_clock: MockClock) -> Iterator[Site]:
    upgrade(database_url)
    app = app_factory(
        AUTHFLOW_DATABASE_URL=database_url,
        AUTHFLOW_VIEWS=True,
        AUTHFLOW_PASSWORD_RESET=True,
        AUTHFLOW_LOCKOUT_MAX_FAILURES=2,
        AUTHFLOW_LOCKOUT_ACCOUNT_MAX_FAILURES=4,
    )
    outbox = Outbox()
    get_state(app).mail_sender = outbox

    @app.get("/api/me")
    @login_required(api=True)
    def me() -> str:
        return "me"

    with app.app_context():
        user = account_admin(app).create_user(
            "default", "alice", PASSWORD, email="alice@example.com", email_verified_at=mock_clock.now()
        )
    yield Site(app, outbox, mock_clock, user.user_id)


def attacker_asks_for_email_change(site: Site) -> str:
    """The attacker, signed in with a stolen password, asks to move the account's mail to
    his address; the confirmation link reaches him."""
    attacker = site.signed_in(ATTACKER, address="203.0.113.7")
    asked = attacker.post("/account/email", json={"email": "mallory@evil.example"})
    asked.close()  # the mail goes out once the answer was sent
    assert asked.status_code == 202
    return site.token_mailed_to("mallory@evil.example")


def confirm_email_change(site: Site, token: str) -> int:
    answer = site.client(ATTACKER, "203.0.113.7").post("/account/email/confirm", json={"token": token})
    answer.close()
    return answer.status_code


def reset_by_mail(site: Site, client: FlaskClient | None = None) -> Any:
    """The owner asks for a reset link and sets a new password with it."""
    client = client if client is not None else site.client()
    asked = client.post("/password/forgot", json={"email": "alice@example.com"})
    asked.close()
    done = client.post(
        "/password/reset", json={"token": site.token_mailed_to("alice@example.com"), "password": NEW}
    )
    done.close()
    assert done.status_code == 200, done.json
    return done.json


def change_password(site: Site, client: FlaskClient) -> None:
    page = client.get("/account")
    form = {
        "current_password": PASSWORD,
        "new_password": NEW,
        "new_password_confirm": NEW,
        "csrf_token": csrf_of(page.text),
    }
    answer = client.post("/account/password", data=form)
    answer.close()
    assert answer.status_code == 302 and "notice=password_changed" in answer.location


def logout_everywhere(client: FlaskClient) -> None:
    page = client.get("/account")
    answer = client.post("/account/sessions/revoke-others", data={"csrf_token": csrf_of(page.text)})
    assert answer.status_code == 302 and "notice=others_revoked" in answer.location


# --- finding: a pending change of e-mail survived the owner's recovery ---------------------------


def test_a_reset_voids_the_attackers_pending_email_change(site: Site) -> None:
    token = attacker_asks_for_email_change(site)
    answer = reset_by_mail(site)
    assert confirm_email_change(site, token) == 410  # used: voided by the reset
    assert answer["email_change_voided"] is True and answer["account_tokens_voided"] == {"email_change": 1}
    with site.app.app_context():
        assert get_state(site.app).backend.find_user("default", "alice").email == "alice@example.com"
    [voided] = site.rows("account_tokens_voided")
    assert voided.reason == "email_change=1" and voided.user_id == site.user_id


def test_a_password_change_voids_the_attackers_pending_email_change(site: Site) -> None:
    token = attacker_asks_for_email_change(site)
    change_password(site, site.signed_in())
    assert confirm_email_change(site, token) == 410
    with site.app.app_context():
        assert get_state(site.app).backend.find_user("default", "alice").email == "alice@example.com"


def test_logout_everywhere_voids_the_attackers_pending_email_change(site: Site) -> None:
    token = attacker_asks_for_email_change(site)
    logout_everywhere(site.signed_in())
    assert confirm_email_change(site, token) == 410
    [row] = site.rows("logout_everywhere")
    assert row.status == "success" and row.user_id == site.user_id


# --- finding: API tokens survived a password reset ----------------------------------------------


def test_a_reset_ends_the_api_tokens(site: Site) -> None:
    value = site.api_token()
    assert site.api_works(value)
    answer = reset_by_mail(site)
    assert not site.api_works(value)
    assert answer["api_tokens_revoked"] == 1
    [row] = site.rows("api_tokens_revoked")
    assert row.reason == "password_reset" and row.client_ip == "192.0.2.10" and row.user_agent == OWNER


def test_a_password_change_and_logout_everywhere_end_the_api_tokens(site: Site) -> None:
    value = site.api_token()
    change_password(site, site.signed_in())
    assert not site.api_works(value)
    again = site.api_token()
    logout_everywhere(site.signed_in(password=NEW))
    assert not site.api_works(again)
    assert [row.reason for row in site.rows("api_tokens_revoked")] == [
        "password_changed",
        "logout_everywhere",
    ]


# --- finding: a reset link mailed before a password change still worked after it -----------------


def test_an_old_reset_link_is_dead_after_a_password_change(site: Site) -> None:
    client = site.client()
    client.post("/password/forgot", json={"email": "alice@example.com"}).close()
    old_link = site.token_mailed_to("alice@example.com")
    change_password(site, site.signed_in())
    used = client.post("/password/reset", json={"token": old_link, "password": "the attackers choice 1"})
    assert used.status_code == 410 and used.json["error"] == "account_token_used"
    assert site.signed_in(password=NEW)


def test_an_old_reset_link_is_dead_after_logout_everywhere(site: Site) -> None:
    client = site.client()
    client.post("/password/forgot", json={"email": "alice@example.com"}).close()
    old_link = site.token_mailed_to("alice@example.com")
    logout_everywhere(site.signed_in())
    used = client.post("/password/reset", json={"token": old_link, "password": "the attackers choice 1"})
    assert used.status_code == 410 and used.json["error"] == "account_token_used"


# --- finding: a completed reset left the account-wide lock ---------------------------------------


def lock_the_account(site: Site) -> None:
    """Wrong passwords from two IPv6 /64 networks: each locks its own pair, and together
    they reach the account-wide threshold (2 and 4 here)."""
    for network in ("2001:db8:1:1", "2001:db8:2:2"):
        for host in (1, 2):
            attempt = login(site.client(ATTACKER, f"{network}::{host}"), "not the password at all")
            assert attempt.status_code != 302


def test_a_completed_reset_clears_the_account_wide_lock(site: Site) -> None:
    lock_the_account(site)
    locked = login(site.client(address="198.51.100.20"))
    assert locked.status_code != 302  # the owner, from her own address, is locked out too
    answer = reset_by_mail(site, site.client(address="198.51.100.20"))
    assert login(site.client(address="198.51.100.20"), NEW).status_code == 302
    assert answer["lock_cleared"] is True
    [row] = site.rows("lockout_cleared")
    assert row.reason == "password_reset" and row.client_ip == "198.51.100.20"


# --- finding: ending one session took every API token --------------------------------------------


def test_the_cli_single_session_revoke_keeps_the_api_tokens(site: Site) -> None:
    value = site.api_token()
    phone, laptop = site.signed_in(), site.signed_in(ATTACKER)
    with site.app.app_context():
        store = get_state(site.app).session_store
        hashes = [sid_hash(record.sid) for record in store.list_user_sessions("default", site.user_id)]
    result = site.app.test_cli_runner().invoke(
        args=["authflow", "sessions", "revoke", "--user", "alice", "--session", hashes[0]]
    )
    assert result.exit_code == 0, result.output
    assert site.api_works(value)
    assert "API tokens are kept" in result.output
    assert [phone.get("/account").status_code, laptop.get("/account").status_code].count(200) == 1
    assert site.rows("api_tokens_revoked") == []


def test_the_account_pages_end_this_session_keeps_the_api_tokens(site: Site) -> None:
    value = site.api_token()
    other, mine = site.signed_in(ATTACKER), site.signed_in()
    page = mine.get("/account")
    others = re.findall(r'data-session="([0-9a-f]{64})" data-current="false"', page.text)
    assert len(others) == 1
    answer = mine.post(f"/account/sessions/{others[0]}/revoke", data={"csrf_token": csrf_of(page.text)})
    assert answer.status_code == 302 and "notice=session_revoked" in answer.location
    assert other.get("/account").status_code != 200 and mine.get("/account").status_code == 200
    assert site.api_works(value)


# --- finding: a password change wrote no audit row of its own ------------------------------------


def test_a_password_change_writes_its_row_with_the_requests_context(site: Site) -> None:
    site.api_token()
    client = site.signed_in(address="198.51.100.30")
    login_row = [row for row in site.rows("factor_verify") if row.status == "success"][-1]
    change_password(site, client)
    [row] = site.rows("password_changed")
    assert (row.status, row.user_id, row.tenant) == ("success", site.user_id, "default")
    assert (row.client_ip, row.user_agent) == ("198.51.100.30", OWNER)
    assert row.device_id is not None and row.device_id == login_row.device_id
    [side] = site.rows("api_tokens_revoked")
    assert (side.client_ip, side.user_agent, side.device_id) == (row.client_ip, row.user_agent, row.device_id)
    assert side.request_id == row.request_id


# --- what the owner is told ----------------------------------------------------------------------


def test_the_notice_lists_what_ended(site: Site) -> None:
    site.api_token()
    attacker_asks_for_email_change(site)
    reset_by_mail(site)
    notice = site.outbox.messages[-1]
    assert notice.to == "alice@example.com" and "reset" in notice.subject
    assert "1 signed-in session" in notice.body and "1 API token" in notice.body
    assert "pending change of the account's e-mail address" in notice.body
    assert "token=" not in notice.body


# --- a fault leaves nothing half-done ------------------------------------------------------------


class FailingSink:
    """The store's audit rows, but the write of ``event`` fails (a full disk, a lost connection)."""

    def __init__(self, backend: Any, event: str) -> None:
        self.backend, self.event = backend, event

    def write(self, record: AuditRecord) -> None:
        if record.event == self.event:
            raise AuditWriteError()
        self.backend.write(record)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    clock = MockClock()
    if request.param == "memory":
        backend: Any = InMemoryBackend(clock=clock)
    else:
        url = (
            f"sqlite:///{tmp_path / 'fault.db'}"
            if request.param == "sqlite"
            else request.getfixturevalue("postgres_server").new_database()
        )
        backend = SqlAlchemyBackend(url, clock=clock)
    add_user(backend, "acme", "alice", PASSWORD, email="alice@example.com", email_verified_at=clock.now())
    yield backend
    if request.param != "memory":
        backend.close()


@pytest.mark.parametrize("failing", ["password_changed", "api_tokens_revoked", "account_tokens_voided"])
def test_a_failed_audit_write_leaves_everything_as_it_was(store: Any, failing: str) -> None:
    clock = store.clock
    user = store.find_user("acme", "alice")
    revoked: list[str] = []
    service = AuthnService(
        store,
        store,
        hasher=FAST_HASHER,
        clock=clock,
        audit_sink=FailingSink(store, failing),
        api_token_store=store,
        account_tokens=store,
    )
    service.revoke_sessions = lambda tenant, user_id, keep, reason: revoked.append(reason) or 0
    change = account_tokens.issue(
        store, kind="email_change", tenant="acme", user_id=user.user_id, now=clock.now(),
        ttl=timedelta(hours=1), payload={"email": "mallory@evil.example"},
    )  # fmt: skip
    store.add_api_token(
        ApiTokenRecord("tok1", "acme", user.user_id, "script", "0" * 64, (), clock.now(), None)
    )
    until = clock.now() + timedelta(minutes=15)
    store.set_lock(AttemptKey("acme", "alice", "password"), until)
    with pytest.raises(AuditWriteError):
        recovery.change_password(service, CTX, new_session(clock), "acme", user.user_id, NEW)
    assert store.get_password_hash("acme", user.user_id) is not None
    assert FAST_HASHER.verify(store.get_password_hash("acme", user.user_id), PASSWORD)
    assert store.live_account_token("acme", user.user_id, "email_change", clock.now()) == change.record
    assert [token.name for token in store.list_api_tokens("acme", user.user_id)] == ["script"]
    assert store.locked_until("acme", "alice", clock.now()) == until
    assert revoked == ["password_changed"]  # the sessions end first, before the unit: safe to lose
    done = recovery.change_password(
        AuthnService(
            store, store, hasher=FAST_HASHER, clock=clock, api_token_store=store, account_tokens=store
        ),
        CTX, new_session(clock), "acme", user.user_id, NEW,
    )  # fmt: skip
    assert (done.api_tokens, dict(done.account_tokens), done.lock_cleared) == (1, {"email_change": 1}, True)


# --- a reset by mail proves the address ----------------------------------------------------------


def test_a_reset_through_the_mailed_link_marks_the_address_verified(site: Site) -> None:
    with site.app.app_context():
        backend = get_state(site.app).backend
        bob = account_admin(site.app).create_user("default", "bob", PASSWORD, email="bob@example.com")
        assert bob.email_verified_at is None
    client = site.client()
    client.post("/password/forgot", json={"email": "bob@example.com"}).close()
    done = client.post(
        "/password/reset", json={"token": site.token_mailed_to("bob@example.com"), "password": NEW}
    )
    done.close()
    assert done.status_code == 200 and done.json["email_verified"] is True
    assert backend.find_user("default", "bob").email_verified_at == site.clock.now()
    [row] = site.rows("email_confirmed")
    assert (row.user_id, row.reason) == (bob.user_id, "password_reset")


def test_a_link_mailed_to_an_earlier_address_proves_nothing(site: Site) -> None:
    with site.app.app_context():
        backend = get_state(site.app).backend
        bob = account_admin(site.app).create_user("default", "bob", PASSWORD, email="bob@example.com")
    client = site.client()
    client.post("/password/forgot", json={"email": "bob@example.com"}).close()
    token = site.token_mailed_to("bob@example.com")
    backend.set_email("default", bob.user_id, "bob@elsewhere.example", verified_at=None)
    done = client.post("/password/reset", json={"token": token, "password": NEW})
    done.close()
    assert done.status_code == 200 and done.json["email_verified"] is False
    assert backend.find_user("default", "bob").email_verified_at is None
    assert site.rows("email_confirmed") == []
