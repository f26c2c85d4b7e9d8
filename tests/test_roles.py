"""Roles and permissions: the decorators (Flask-Security-Too's meanings), ``current_user``'s
checks, the 403 page and JSON, audited changes that apply on the next request, parallel
changes, and the ``flask authflow roles`` / ``users add-role`` commands."""

from __future__ import annotations

import json
import secrets
import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask, render_template_string
from jinja2 import ChoiceLoader, DictLoader

from flask_authflow import (
    AuthFlow,
    UserMixin,
    current_user,
    permissions_accepted,
    permissions_required,
    roles_accepted,
    roles_required,
)
from flask_authflow._web import services
from flask_authflow._web.state import get_state
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.signals import roles_changed
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.schema import audit_table, user_roles_table
from flask_authflow.testing._users import add_user

JSON = {"Accept": "application/json"}
HTML = {"Accept": "text/html,application/xhtml+xml"}


def _views(app: Flask) -> None:
    @app.get("/admin")
    @roles_required("admin")
    def admin() -> str:
        return "admin page"

    @app.get("/both")
    @roles_required("admin", "editor")
    def both() -> str:
        return "both"

    @app.get("/either")
    @roles_accepted("admin", "editor")
    def either() -> str:
        return "either"

    @app.get("/edit")
    @permissions_required("documents:edit", "documents:read")
    def edit() -> str:
        return "edit"

    @app.get("/read")
    @permissions_accepted("documents:read", "documents:review")
    async def read() -> str:
        return "read"

    @app.get("/whoami")
    def whoami() -> dict[str, Any]:
        return {
            "admin": current_user.has_role("admin"),
            "edit": current_user.has_permission("documents:edit"),
        }


@pytest.fixture
def app(mock_clock, authflow_hasher) -> Flask:
    authflow_app = Flask(__name__)
    authflow_app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
    AuthFlow(
        authflow_app,
        backend=InMemoryBackend(clock=mock_clock),
        session_store=MemorySessionStore(clock=mock_clock),
        clock=mock_clock,
        hasher=authflow_hasher,
    )
    _views(authflow_app)
    with authflow_app.app_context():
        services.roles().create("admin", description="Runs the site")
        services.roles().create("editor")
        services.roles().grant_permission("editor", "documents:edit")
        services.roles().grant_permission("editor", "documents:read")
    return authflow_app


def _user_id(app: Flask, name: str = "alice") -> str:
    user = get_state(app).backend.find_user("default", name)
    assert user is not None
    return user.user_id


def _give(app: Flask, *names: str, user: str = "alice") -> None:
    with app.app_context():
        for name in names:
            assert services.roles().grant(_user_id(app, user), name)


# -- the decorators -------------------------------------------------------------------------


def test_a_guest_is_asked_to_log_in_not_refused(authflow_client) -> None:
    for path in ("/admin", "/either", "/edit", "/read"):
        response = authflow_client.get(path, headers=JSON)
        assert response.status_code == 401, path
        assert response.json["error"] == "unauthenticated"


def test_without_roles_every_guarded_view_is_refused_with_json_403(logged_in_client) -> None:
    for path in ("/admin", "/both", "/either", "/edit", "/read"):
        response = logged_in_client.get(path, headers=JSON)
        assert response.status_code == 403, path
        assert response.json["error"] == "permission_denied"
        assert response.headers["Cache-Control"] == "no-store"
    assert logged_in_client.get("/whoami").json == {"admin": False, "edit": False}


def test_a_browser_gets_the_403_page(logged_in_client) -> None:
    response = logged_in_client.get("/admin", headers=HTML)
    assert response.status_code == 403
    assert response.mimetype == "text/html"
    assert "<h1>Not allowed</h1>" in response.text
    assert response.headers["Cache-Control"] == "no-store"


def test_roles_required_needs_every_role_and_roles_accepted_one(app, logged_in_client) -> None:
    _give(app, "editor")
    assert logged_in_client.get("/either").text == "either"
    assert logged_in_client.get("/both", headers=JSON).status_code == 403
    assert logged_in_client.get("/admin", headers=JSON).status_code == 403
    _give(app, "admin")
    assert logged_in_client.get("/both").text == "both"
    assert logged_in_client.get("/admin").text == "admin page"


def test_permissions_required_needs_every_permission_and_accepted_one(app, logged_in_client) -> None:
    with app.app_context():
        services.roles().create("reader")
        services.roles().grant_permission("reader", "documents:read")
    _give(app, "reader")
    assert logged_in_client.get("/read").text == "read"
    assert logged_in_client.get("/edit", headers=JSON).status_code == 403  # edit is missing
    _give(app, "editor")
    assert logged_in_client.get("/edit").text == "edit"
    assert logged_in_client.get("/whoami").json == {"admin": False, "edit": True}


def test_a_role_change_applies_on_the_next_request_and_ends_no_session(app, logged_in_client) -> None:
    assert logged_in_client.get("/admin", headers=JSON).status_code == 403
    _give(app, "admin")
    assert logged_in_client.get("/admin").status_code == 200
    with app.app_context():
        assert services.roles().revoke(_user_id(app), "admin")
    response = logged_in_client.get("/admin", headers=JSON)
    assert response.status_code == 403  # still signed in: a 403, not a 401
    assert logged_in_client.get("/either", headers=JSON).status_code == 403


def test_roles_are_read_once_per_request(app, logged_in_client, monkeypatch) -> None:
    _give(app, "admin")
    backend = get_state(app).backend
    calls: list[str] = []
    original = backend.roles_of
    monkeypatch.setattr(backend, "roles_of", lambda *a: calls.append("roles") or original(*a))

    @app.get("/many")
    def many() -> str:
        return str(sum(current_user.has_role("admin") for _ in range(10)))

    assert logged_in_client.get("/many").text == "10"
    assert calls == ["roles"]


def test_a_role_change_is_audited_and_signalled(app, logged_in_client) -> None:
    seen: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        seen.append(kwargs)

    with roles_changed.connected_to(receiver):
        _give(app, "admin")
        with app.app_context():
            assert not services.roles().grant(_user_id(app), "admin")  # no change: no row
            assert services.roles().revoke(_user_id(app), "admin")
    events = [
        (row.event, row.reason, row.user_id)
        for row in get_state(app).backend.audit_rows
        if row.event.startswith("role_")
    ]
    user_id = _user_id(app)
    assert events == [("role_added", "admin", user_id), ("role_removed", "admin", user_id)]
    assert [(s["action"], s["role"], s["user_id"]) for s in seen] == [
        ("role_added", "admin", user_id),
        ("role_removed", "admin", user_id),
    ]


def test_decorators_refuse_bad_names_when_they_decorate() -> None:
    with pytest.raises(TypeError):
        roles_required()
    with pytest.raises(TypeError):
        roles_accepted(lambda: "view")  # type: ignore[arg-type]  # used bare, as @roles_accepted
    with pytest.raises(ValueError):
        permissions_required("no spaces")


def test_parallel_role_changes_over_sql_leave_one_row_and_no_error(tmp_path: Path, authflow_hasher) -> None:
    app = Flask(__name__)
    app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
    backend = SqlAlchemyBackend(f"sqlite:///{tmp_path / 'roles.db'}")
    AuthFlow(app, backend=backend, hasher=authflow_hasher)
    user = add_user(backend, "default", "alice", "pw")
    with app.app_context():
        services.roles().create("admin")
    errors: list[BaseException] = []
    barrier = threading.Barrier(20)

    def flip(index: int) -> None:
        try:
            with app.app_context():
                barrier.wait(30)
                if index % 2:
                    services.roles().grant(user.user_id, "admin")
                else:
                    services.roles().revoke(user.user_id, "admin")
                services.roles().grant(user.user_id, "admin")
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=flip, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    with backend.engine.connect() as conn:
        rows = conn.execute(sa.select(user_roles_table)).all()
    assert [(r.tenant, r.user_id, r.role) for r in rows] == [("default", user.user_id, "admin")]
    assert backend.roles_of("default", user.user_id) == ["admin"]
    # Every change that happened was audited once: added - removed = the one row left.
    with backend.engine.connect() as conn:
        events = (
            conn.execute(sa.select(audit_table.c.event).where(audit_table.c.event.like("role_%")))
            .scalars()
            .all()
        )
    assert events.count("role_added") - events.count("role_removed") == 1
    backend.close()


# -- the commands ---------------------------------------------------------------------------


def _cli(app: Flask, *args: str) -> Any:
    return app.test_cli_runner().invoke(args=["authflow", *args])


def test_cli_manages_roles_and_a_users_roles(app: Flask, login_client) -> None:
    client = login_client("alice")  # creates alice
    assert client.get("/admin", headers=JSON).status_code == 403
    result = _cli(app, "roles", "create", "auditor", "--description", "Reads the logs")
    assert result.exit_code == 0, result.output
    assert _cli(app, "roles", "grant", "auditor", "logs:read").exit_code == 0
    listed = _cli(app, "roles", "list", "--json")
    assert {"name": "auditor", "description": "Reads the logs", "permissions": ["logs:read"]} in json.loads(
        listed.output
    )
    result = _cli(app, "users", "add-role", "ALICE", "admin")
    assert result.exit_code == 0, result.output
    assert "now holds role 'admin'" in result.output
    assert client.get("/admin").text == "admin page"  # the same session, on its next request
    assert _cli(app, "users", "remove-role", "alice", "admin").exit_code == 0
    assert client.get("/admin", headers=JSON).status_code == 403
    assert _cli(app, "roles", "revoke", "auditor", "logs:read").exit_code == 0
    assert "auditor (Reads the logs): -" in _cli(app, "roles", "list").output
    assert _cli(app, "roles", "delete", "auditor").exit_code == 0
    assert "auditor" not in _cli(app, "roles", "list").output


def test_cli_refuses_unknown_users_and_roles_with_a_message(app: Flask, login_client) -> None:
    login_client("alice")
    for args, message in (
        (("users", "add-role", "nobody", "admin"), "no user 'nobody'"),
        (("users", "add-role", "alice", "ghost"), "no role 'ghost'"),
        (("users", "remove-role", "alice", "ghost"), "no role 'ghost'"),
        (("roles", "grant", "ghost", "x"), "no role 'ghost'"),
        (("roles", "delete", "ghost"), "no role 'ghost'"),
        (("roles", "create", "admin"), "already exists"),
        (("roles", "create", "bad name"), "role name is 1 to 64"),
    ):
        result = _cli(app, *args)
        assert result.exit_code == 1, (args, result.output)
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output
    failed = _cli(app, "users", "add-role", "alice", "ghost", "--json")
    assert json.loads(failed.output)["error"] == "role_not_found"


def test_cli_deletes_a_role_in_use_only_with_force(app: Flask, login_client) -> None:
    client = login_client("alice")
    assert _cli(app, "users", "add-role", "alice", "admin").exit_code == 0
    refused = _cli(app, "roles", "delete", "admin")
    assert refused.exit_code == 1 and "--force" in refused.output
    assert client.get("/admin").status_code == 200
    assert _cli(app, "roles", "delete", "admin", "--force").exit_code == 0
    assert client.get("/admin", headers=JSON).status_code == 403
    events = [row.event for row in get_state(app).backend.audit_rows]
    assert events.count("role_added") == 1 and events.count("role_deleted") == 1


# -- templates, user loaders, unknown names -------------------------------------------------


def test_templates_read_roles_through_current_user(app: Flask, logged_in_client) -> None:
    template = "{% if current_user.has_role('admin') %}admin{% else %}plain{% endif %}"

    @app.get("/nav")
    def nav() -> str:
        return render_template_string(template)

    assert logged_in_client.get("/nav").text == "plain"
    _give(app, "admin")
    assert logged_in_client.get("/nav").text == "admin"


def test_the_checks_work_on_the_applications_user_objects(app: Flask, logged_in_client) -> None:
    class Member(UserMixin):
        def __init__(self, user_id: str) -> None:
            self.id = user_id

    get_state(app).hooks.user_loader = lambda tenant, user_id: Member(user_id)

    @app.get("/member")
    def member() -> dict[str, Any]:
        return {
            "type": type(current_user._get_current_object()).__name__,
            "admin": current_user.has_role("admin"),
        }

    assert logged_in_client.get("/member").json == {"type": "Member", "admin": False}
    _give(app, "admin")
    assert logged_in_client.get("/member").json == {"type": "Member", "admin": True}
    assert logged_in_client.get("/admin").text == "admin page"
    # A user the loader no longer finds holds nothing and is treated as a guest.
    get_state(app).hooks.user_loader = lambda tenant, user_id: None
    assert logged_in_client.get("/admin", headers=JSON).status_code == 401


def test_a_view_naming_a_role_nobody_created_refuses_with_403(app: Flask, logged_in_client) -> None:
    @app.get("/ghost")
    @roles_accepted("ghost")
    def ghost() -> str:
        return "never"

    response = logged_in_client.get("/ghost", headers=JSON)
    assert response.status_code == 403
    assert response.json["error"] == "permission_denied"


# -- migration 0003 -------------------------------------------------------------------------


def test_revision_0003_adds_the_role_tables_and_keeps_what_a_store_created(
    database_url: str, authflow_hasher
) -> None:
    from flask_authflow.storage._sql import migrations
    from tests.test_migrations import schema_differences

    engine = sa.create_engine(database_url)
    try:
        migrations.upgrade(engine, "0002")
        assert "authflow_roles" not in sa.inspect(engine).get_table_names()
        # A store of this version built on it creates the role tables from the models...
        store = SqlAlchemyBackend(engine)
        store.create_role("acme", "admin")
        # ... and the upgrade keeps them (and the row) instead of failing on them.
        assert (migrations.upgrade(engine).before, migrations.current(engine)) == ("0002", migrations.head())
        assert schema_differences(engine) == []
        assert [r.name for r in store.list_roles("acme")] == ["admin"]
        assert migrations.downgrade(engine, "0002").after == "0002"
        assert not {"authflow_roles", "authflow_user_roles"} & set(sa.inspect(engine).get_table_names())
        assert migrations.upgrade(engine).after == migrations.head()
        assert schema_differences(engine) == []
    finally:
        engine.dispose()


def test_deleting_a_user_drops_its_roles_without_foreign_key_enforcement(
    tmp_path: Path, authflow_hasher
) -> None:
    # An application's own SQLite engine: SQLite enforces no foreign key unless told to.
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'plain.db'}")
    try:
        store = SqlAlchemyBackend(engine)
        alice = add_user(store, "acme", "alice", "pw")
        store.create_role("acme", "admin")
        store.add_user_role("acme", alice.user_id, "admin")
        store.delete_user("acme", "alice")
        with engine.connect() as conn:
            assert conn.execute(sa.select(user_roles_table)).all() == []
        store.delete_role("acme", "admin")  # no longer in use
    finally:
        engine.dispose()


def test_an_application_restyles_the_403_page_with_its_own_template(app: Flask, logged_in_client) -> None:
    app.jinja_env.loader = ChoiceLoader(
        [DictLoader({"authflow/forbidden.html": "<p id=own>ours</p>"}), app.jinja_env.loader]
    )
    response = logged_in_client.get("/admin", headers=HTML)
    assert response.status_code == 403
    assert response.text == "<p id=own>ours</p>"
