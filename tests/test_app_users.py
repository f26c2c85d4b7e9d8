"""The application's own user rows: the ``user_created`` / ``user_deleted`` hook pair, run
by every path that creates or deletes an account, in the application's transaction."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_authflow import AuthFlow, UserMixin, current_user, signals
from flask_authflow._clock import MockClock
from flask_authflow._core.app_users import NewAccount
from flask_authflow._core.ports import UserRecord
from flask_authflow._web.state import account_admin, get_state
from flask_authflow.errors import UserExists
from flask_authflow.login._password import PasswordHasher
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._pytest_plugin import login_test_client

PASSWORD = "correct horse battery staple"


class Refused(Exception):
    """What a test's hook raises to refuse."""


class SqlApp:
    """A Flask-SQLAlchemy app whose ``Member`` rows the hook pair keeps with the accounts."""

    def __init__(self, database_url: str, clock: MockClock, hasher: PasswordHasher, **config: Any) -> None:
        self.db = db = SQLAlchemy()
        self.refuse_create = False
        self.refuse_delete = False

        class Member(UserMixin, db.Model):  # type: ignore[name-defined,misc]
            id = db.Column(db.String(32), primary_key=True)
            source = db.Column(db.String(32), nullable=False)

        self.Member = Member
        self.app = app = Flask("app_users")
        app.config.update(
            TESTING=True, SQLALCHEMY_DATABASE_URI=database_url, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32)
        )
        app.config.update(config)  # before init_app, which reads it once
        db.init_app(app)
        self.authflow = authflow = AuthFlow(app, backend=SqlAlchemyBackend(db), clock=clock, hasher=hasher)
        with app.app_context():
            db.create_all()

        @authflow.user_loader
        def load(tenant: str, user_id: str) -> Any:
            return db.session.get(Member, user_id)

        @authflow.user_created
        def created(new: NewAccount) -> None:
            db.session.add(Member(id=new.account.user_id, source=new.source))
            db.session.flush()
            if self.refuse_create:
                raise Refused("the application refused after writing its row")

        @authflow.user_deleted
        def deleted(account: UserRecord) -> None:
            db.session.delete(db.session.get(Member, account.user_id))
            db.session.flush()
            if self.refuse_delete:
                raise Refused("the application refused after deleting its row")

        @app.get("/me")
        def me() -> str:
            return f"{current_user.is_authenticated}:{getattr(current_user, 'source', '-')}"

    def members(self) -> dict[str, str]:
        with self.app.app_context():
            return {m.id: m.source for m in self.db.session.scalars(self.db.select(self.Member))}

    def accounts(self) -> dict[str, str]:
        with self.app.app_context():
            return {u.user_id: u.identifier for u in get_state(self.app).backend.list_users()}

    def cli(self, *args: str, stdin: str | None = None) -> Any:
        return self.app.test_cli_runner().invoke(args=["authflow", *args], input=stdin)


@pytest.fixture
def sql_app(database_url: str, mock_clock: MockClock, authflow_hasher: PasswordHasher) -> Iterator[SqlApp]:
    made = SqlApp(database_url, mock_clock, authflow_hasher)
    yield made
    with made.app.app_context():
        made.db.engine.dispose()


def test_the_command_line_creates_the_apps_row_with_the_account(sql_app: SqlApp) -> None:
    result = sql_app.cli(
        "create-user", "alice", "--password-stdin", "--email", "Alice@Example.COM", stdin=PASSWORD
    )
    assert result.exit_code == 0, result.output
    [(user_id, identifier)] = sql_app.accounts().items()
    assert identifier == "alice"
    assert sql_app.members() == {user_id: "cli"}
    with sql_app.app.app_context():
        account = get_state(sql_app.app).backend.get_user("default", user_id)
    assert account is not None and account.email == "alice@example.com"  # one address whatever its case
    assert account.email_verified_at is not None


def test_a_refusing_hook_keeps_neither_the_row_nor_the_account(sql_app: SqlApp) -> None:
    sql_app.refuse_create = True
    result = sql_app.cli("create-user", "alice", "--password-stdin", stdin=PASSWORD)
    assert result.exit_code != 0
    assert sql_app.accounts() == {} and sql_app.members() == {}
    # Nothing half-made blocks a second try.
    sql_app.refuse_create = False
    assert sql_app.cli("create-user", "alice", "--password-stdin", stdin=PASSWORD).exit_code == 0
    assert set(sql_app.accounts()) == set(sql_app.members())


def test_users_delete_removes_the_row_and_sends_user_deleted(sql_app: SqlApp) -> None:
    assert sql_app.cli("create-user", "alice", "--password-stdin", stdin=PASSWORD).exit_code == 0
    sent: list[dict[str, Any]] = []

    def receive(sender: Any, **extra: Any) -> None:
        sent.append(extra)

    with signals.user_deleted.connected_to(receive):
        result = sql_app.cli("users", "delete", "alice", "--yes")
    assert result.exit_code == 0, result.output
    assert sql_app.accounts() == {} and sql_app.members() == {}
    assert [event["user"].identifier for event in sent] == ["alice"]


def test_a_failing_delete_hook_keeps_the_account_and_the_row(sql_app: SqlApp) -> None:
    assert sql_app.cli("create-user", "alice", "--password-stdin", stdin=PASSWORD).exit_code == 0
    sql_app.refuse_delete = True
    sent: list[Any] = []
    with signals.user_deleted.connected_to(lambda sender, **extra: sent.append(extra)):
        assert sql_app.cli("users", "delete", "alice", "--yes").exit_code != 0
    [user_id] = sql_app.accounts()
    assert sql_app.members() == {user_id: "cli"} and sent == []


def test_the_plugins_logged_in_client_is_the_apps_user(sql_app: SqlApp) -> None:
    client = login_test_client(sql_app.app, "bob", password="x")  # the plugin skips the policy
    assert client.get("/me").text == "True:test"
    assert list(sql_app.members().values()) == ["test"]


def test_signals_name_the_source(sql_app: SqlApp) -> None:
    sent: list[tuple[str, str]] = []
    with signals.user_created.connected_to(lambda s, **e: sent.append((e["user"].identifier, e["source"]))):
        with sql_app.app.app_context():
            account_admin(sql_app.app).create_user("default", "carol", PASSWORD, source="signup")
    assert sent == [("carol", "signup")]
    assert list(sql_app.members().values()) == ["signup"]


def test_without_flask_sqlalchemy_a_refused_account_is_removed_again(
    mock_clock: MockClock, authflow_hasher: PasswordHasher
) -> None:
    app = Flask("memory_users")
    app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
    backend = InMemoryBackend(clock=mock_clock)
    authflow = AuthFlow(app, backend=backend, clock=mock_clock, hasher=authflow_hasher)
    seen: list[str] = []

    @authflow.user_created
    def created(new: NewAccount) -> None:
        seen.append(new.account.identifier)
        raise Refused("no row for this one")

    with app.app_context(), pytest.raises(Refused):
        account_admin(app).create_user("default", "dave", PASSWORD)
    assert seen == ["dave"] and backend.list_users() == []


def test_addresses_are_unique_per_tenant_and_found_again(sql_app: SqlApp) -> None:
    with sql_app.app.app_context():
        admin = account_admin(sql_app.app)
        alice = admin.create_user("default", "alice", PASSWORD, email="alice@EXAMPLE.com")
        with pytest.raises(UserExists):
            admin.create_user("default", "alice2", PASSWORD, email="alice@example.com")
        # The failed creation left no row of the application behind.
        assert set(sql_app.members()) == {alice.user_id}
        admin.create_user("acme", "alice", PASSWORD, email="alice@example.com")  # another tenant
        backend = get_state(sql_app.app).backend
        found = backend.find_user_by_email("default", "alice@example.com")
        assert found is not None and found.user_id == alice.user_id
