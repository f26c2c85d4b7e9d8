"""Change of username (login/username_change.py, ``/account/username``): behind a fresh login,
audited, unique per tenant (one winner of parallel changes, across processes on
PostgreSQL), with sign-up's rules for identifiers; a notice to the account's address."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flask_authflow._web.state import get_state
from flask_authflow.errors import UserExists
from flask_authflow.testing._pytest_plugin import Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.concurrency import run_together
from tests.parts import child_processes
from tests.test_views import PASSWORD, Site, csrf_of, login, make_site


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    made = make_site(app_factory)
    get_state(made.app).mail_sender = Outbox()
    made.backend.set_email(
        "default", made.user_id("alice"), "alice@example.com", verified_at=made.clock.now()
    )
    return made


def sent(site: Site) -> list[Any]:
    sender = get_state(site.app).mail_sender
    assert isinstance(sender, Outbox)
    return sender.messages


def signed_in(site: Site, who: str = "alice", password: str = PASSWORD) -> Any:
    client = site.client()
    assert login(client, username=who, password=password).status_code == 302
    return client


def rename(client: Any, name: object) -> Any:
    answer = client.post("/account/username", json={"username": name})
    answer.close()  # the notice goes out once the answer was sent
    return answer


def test_the_username_changes_at_once_and_the_owner_is_told(site: Site) -> None:
    client = signed_in(site)
    user_id = site.user_id()
    answer = rename(client, "  Alice.Liddell ")
    assert answer.status_code == 200
    assert answer.json == {"status": "username_changed", "username": "alice.liddell"}
    assert site.backend.find_user("default", "alice") is None
    assert site.backend.find_user("default", "alice.liddell").user_id == user_id
    assert client.get("/private").text == "private page"  # the session stays signed in
    [notice] = sent(site)
    assert notice.to == "alice@example.com" and "alice.liddell" in notice.body and "alice" in notice.body
    row = [r for r in site.backend.audit_rows if r.event == "username_changed"][-1]
    assert (row.status, row.identifier, row.reason, row.user_id) == (
        "success",
        "alice.liddell",
        "from:alice",
        user_id,
    )
    # The new name signs in; the old one is free for someone else.
    assert login(site.client(), username="Alice.Liddell").location == "/account"
    assert login(site.client(), username="alice").status_code == 401


def test_the_form_page_and_its_answer(site: Site) -> None:
    client = signed_in(site)
    form = client.get("/account/username")
    assert form.status_code == 200 and 'id="username-change-form"' in form.text
    assert 'id="change-username-link"' in client.get("/account").text
    done = client.post("/account/username", data={"username": "dodo", "csrf_token": csrf_of(form.text)})
    assert done.status_code == 200 and 'id="username-changed"' in done.text
    refused = client.post("/account/username", data={"username": "dodo2", "csrf_token": "forged"})
    assert refused.status_code == 400 and site.backend.find_user("default", "dodo2") is None


def test_without_notices_no_mail_goes(app_factory: AppFactory) -> None:
    made = make_site(app_factory, AUTHFLOW_SECURITY_NOTICES=False)
    get_state(made.app).mail_sender = Outbox()
    made.backend.set_email("default", made.user_id(), "alice@example.com", verified_at=made.clock.now())
    assert rename(signed_in(made), "dodo").status_code == 200
    assert sent(made) == []


def test_it_needs_a_signed_in_fresh_session(site: Site) -> None:
    assert rename(site.client(), "dodo").status_code == 401
    assert site.client().get("/account/username").location.startswith("/login")
    client = signed_in(site)
    site.clock.advance(11 * 60)  # older than the freshness window (10 minutes)
    stale = rename(client, "dodo")
    assert stale.status_code == 401 and stale.json["error"] == "step_up_required"
    form = client.get("/account/username").text
    to_step_up = client.post("/account/username", data={"username": "dodo", "csrf_token": csrf_of(form)})
    assert to_step_up.status_code == 302 and to_step_up.location.startswith("/step-up")
    assert site.backend.find_user("default", "dodo") is None
    rows = [r for r in site.backend.audit_rows if r.event == "username_changed"]
    assert rows and all(r.status == "refused" for r in rows)


@pytest.mark.parametrize(
    ("name", "status", "code"),
    [
        ("", 400, "invalid_input"),  # missing
        ("   ", 400, "invalid_input"),  # empty once stripped
        (12, 400, "invalid_input"),  # not a string
        ("x" * 255, 400, "invalid_input"),  # too long
        ("evil\u202etxt", 400, "invalid_input"),  # a control (bidi) character
        ("google:12345", 400, "invalid_input"),  # ':' is reserved for provider accounts
        ("bob@example.com", 400, "identifier_not_own_address"),  # someone else's address
        ("ALICE", 400, "username_unchanged"),  # the same name, however typed
        ("Bob", 409, "user_exists"),  # taken, whatever its case
    ],
)
def test_each_bad_name_is_refused_and_nothing_changes(
    site: Site, name: object, status: int, code: str
) -> None:
    client = signed_in(site)
    answer = rename(client, name)
    assert answer.status_code == status and answer.json["error"] == code
    assert site.backend.get_user("default", site.user_id()).identifier == "alice"
    assert sent(site) == []


def test_an_address_as_username_must_be_the_own_verified_one(site: Site) -> None:
    client = signed_in(site)
    assert rename(client, "Alice@Example.com").json["username"] == "alice@example.com"
    bob_id = site.user_id("bob")
    site.backend.set_email("default", bob_id, "bob@example.com", verified_at=None)
    bob = signed_in(site, "bob", "bob's own password")
    unverified = rename(bob, "bob@example.com")
    assert unverified.status_code == 400 and unverified.json["error"] == "identifier_not_own_address"


def test_changes_are_throttled(app_factory: AppFactory) -> None:
    made = make_site(app_factory, AUTHFLOW_THROTTLE_LIMITS={"signup.address": "2/hour"})
    client = signed_in(made)
    assert rename(client, "one").status_code == 200
    assert rename(client, "two").status_code == 200
    third = rename(client, "three")
    assert third.status_code == 429 and third.json["error"] == "throttled" and third.headers["Retry-After"]
    assert made.backend.find_user("default", "two") is not None


def test_a_body_that_is_not_an_object_is_refused(site: Site) -> None:
    client = signed_in(site)
    answer = client.post("/account/username", json=["alice2"])
    assert answer.status_code == 400 and answer.json["error"] == "invalid_input"
    too_long = client.post("/account/username", json={"username": "x" * 2000})
    assert too_long.status_code == 400


def test_parallel_changes_to_one_name_have_one_winner(site: Site) -> None:
    for n in range(4):
        add_user(site.backend, "default", f"user{n}", f"password of user number {n}")
    clients = [signed_in(site, f"user{n}", f"password of user number {n}") for n in range(4)]
    answers = run_together([lambda c=c: rename(c, "the-one") for c in clients])
    assert sorted(a.status_code for a in answers) == [200, 409, 409, 409]
    winner = site.backend.find_user("default", "the-one")
    assert winner is not None
    assert sum(site.backend.find_user("default", f"user{n}") is None for n in range(4)) == 1


def test_parallel_renames_on_sqlite_have_one_winner(tmp_path: Path) -> None:
    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    backend = SqlAlchemyBackend(f"sqlite:///{tmp_path / 'users.db'}")
    try:
        users = [backend.create_user("acme", f"racer{n}").user_id for n in range(4)]

        def take(user_id: str) -> bool:
            try:
                backend.set_identifier("acme", user_id, "the-one")
            except UserExists:
                return False
            return True

        results = run_together([lambda u=u: take(u) for u in users])
        assert sorted(results) == [False, False, False, True]
        assert backend.find_user("acme", "the-one") is not None
    finally:
        backend.close()


# --- several processes on PostgreSQL ---------------------------------------------------------------

RACERS = 3


def _take_name(url: str, user_id: str, barrier: Any, out: Any) -> None:
    """What a change of username decides: one statement renaming the user to the taken-or-not name."""
    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    backend = SqlAlchemyBackend(url, create_tables=False)
    try:
        barrier.wait(60)
        try:
            backend.set_identifier("acme", user_id, "the-one")
            out.put(True)
        except UserExists:
            out.put(False)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
        barrier.abort()
        out.put(repr(exc))
    finally:
        backend.close()


@pytest.mark.multiprocess
def test_one_process_wins_a_name_on_postgresql(postgres_server: Any) -> None:
    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        users = [backend.create_user("acme", f"racer{n}").user_id for n in range(RACERS)]
        spawn = child_processes()
        barrier, out = spawn.Barrier(RACERS), spawn.Queue()
        processes = [spawn.Process(target=_take_name, args=(url, u, barrier, out)) for u in users]
        for process in processes:
            process.start()
        results = [out.get(timeout=120) for _ in processes]
        for process in processes:
            process.join(30)
        assert sorted(results, key=str) == [False] * (RACERS - 1) + [True], results
        winner = backend.find_user("acme", "the-one")
        assert winner is not None and winner.user_id in users
    finally:
        backend.close()


# --- the command line ------------------------------------------------------------------------------


def _cli(site: Site, *args: str) -> Any:
    return site.app.test_cli_runner().invoke(args=["authflow", *args])


def test_an_operator_renames_a_user_and_the_owner_is_told(site: Site) -> None:
    result = _cli(site, "users", "rename", "Alice", "Alice.Liddell")
    assert result.exit_code == 0, result.output
    assert "'alice' is now 'alice.liddell'" in result.output
    assert site.backend.find_user("default", "alice.liddell") is not None
    [notice] = sent(site)
    assert notice.to == "alice@example.com" and "alice.liddell" in notice.body
    row = [r for r in site.backend.audit_rows if r.event == "username_changed"][-1]
    assert (row.status, row.reason) == ("success", "from:alice")
    as_json = _cli(site, "users", "rename", "alice.liddell", "alice", "--json")
    assert as_json.exit_code == 0 and '"previous": "alice.liddell"' in as_json.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("users", "rename", "nobody", "x"), "no user 'nobody'"),
        (("users", "rename", "alice", "bob"), "already exists"),
        (("users", "rename", "alice", "a:b"), "may not contain ':'"),
        (("users", "rename", "alice", "bob@example.com"), "must be the address"),
    ],
)
def test_the_command_refuses_with_a_message(site: Site, args: tuple[str, ...], message: str) -> None:
    result = _cli(site, *args)
    assert result.exit_code == 1, result.output
    assert message in result.output and "Traceback" not in result.output
    assert site.backend.find_user("default", "alice") is not None and sent(site) == []
