"""The fault-injection matrix: every account flow is one transaction (docs/security.rst,
"Transactions").

For each flow a clean run is traced first (tests/faults.py): its write statements, its
audit rows, its mails and its commits. Then each of those writes is made to fail in turn
(the store at the n-th INSERT/UPDATE/DELETE, the audit sink at the n-th row, the mail
sender at the n-th send), on SQLite and on PostgreSQL, and the test asserts:

* the answer is a typed error (503 for a store, audit or mail failure), never a 500;
* nothing of the flow was kept: every table reads as before (the ``error`` audit row that
  records the failure itself aside);
* the same request sent again succeeds.

A flow whose mail goes out after its commit (it must answer the same whether an account
matched) keeps its change when the mail fails; the failure is logged and the retry still
works: its row in the matrix says ``kept, logged``.

The number of commits of each flow's request is asserted: at most one.

Each flow's store faults are its first write to each table and its last write; with
``AUTHFLOW_FAULT_MATRIX=full`` every write fails in turn. With
``AUTHFLOW_FAULT_MATRIX_TABLE=<file>`` the run appends the table's rows (flow, database,
commits, failing write, outcome) to that file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyotp
import pytest
from flask.testing import FlaskClient

from flask_authflow._clock import MockClock
from flask_authflow._web import services
from flask_authflow._web.api_auth import token_service
from flask_authflow._web.state import account_admin, get_state
from flask_authflow._web.views.blueprint import register_views
from flask_authflow.errors import AuthFlowError
from flask_authflow.login._accounts import AccountAdmin
from flask_authflow.login._password import PasswordHasher
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.migrations import upgrade
from flask_authflow.testing._pytest_plugin import Outbox
from tests.appfactory import AppFactory
from tests.faults import AUDIT_TABLE, Fault, Faults, FaultSite, Trace, snapshot
from tests.test_app_users import Refused, SqlApp
from tests.test_views import csrf_of

pytestmark = pytest.mark.authflow_stores("sql")

PASSWORD = "a long enough passphrase 42"
NEW_PASSWORD = "another long passphrase 43"


@dataclass
class Site(FaultSite):
    outbox: Outbox = field(default_factory=Outbox)

    def fresh_name(self) -> str:
        return f"user{next(self.numbers)}"

    def user(self) -> str:
        """A new verified account with a password; its identifier."""
        name = self.fresh_name()
        with self.app.app_context():
            admin = account_admin(self.app)
            address, now = f"{name}@example.com", _now(self)
            admin.create_user("default", name, PASSWORD, email=address, email_verified_at=now)
        return name

    def signed_in(self, name: str) -> FlaskClient:
        client = self.client()
        form = {"username": name, "password": PASSWORD, "csrf_token": csrf_of(client.get("/login").text)}
        assert client.post("/login", data=form).status_code == 302
        return client

    def mailed(self, to: str, what: str = "token") -> str:
        body = [m for m in self.outbox.messages if m.to == to][-1].body
        pattern = r"token=([A-Za-z0-9_-]{43})" if what == "token" else r"code[^:]*: ([A-Z2-7]{4}-[A-Z2-7]{4})"
        found = re.search(pattern, body)
        assert found is not None, body
        return found.group(1)


def _now(site: Site) -> Any:
    return get_state(site.app).service.clock.now()


def post(client: FlaskClient, path: str, **kwargs: Any) -> int:
    """POST and close the answer (which delivers a mail sent after it); the status."""
    answer = client.post(path, **kwargs)
    answer.close()
    return answer.status_code


@pytest.fixture
def site(app_factory: AppFactory, database_url: str) -> Iterator[Site]:
    upgrade(database_url)
    app = app_factory(
        AUTHFLOW_DATABASE_URL=database_url,
        AUTHFLOW_VIEWS=True,
        AUTHFLOW_REGISTRATION=True,
        AUTHFLOW_PASSWORD_RESET=True,
        AUTHFLOW_THROTTLE=False,
        AUTHFLOW_EXTERNAL_URL="http://localhost",
    )
    outbox = Outbox()
    get_state(app).mail_sender = outbox
    backend = get_state(app).backend
    assert isinstance(backend, SqlAlchemyBackend)
    with Faults(backend.engine) as faults:
        yield Site(app, faults, outbox=outbox)


# --- the flows: each prepares its precondition and returns the request (sent twice) -----------

#: A prepared request: sends it, returns the HTTP status (or the typed error's status).
Act = Callable[[], int]


def signup(site: Site) -> Act:
    name = site.fresh_name()
    body = {"username": name, "email": f"{name}@example.com", "password": PASSWORD}
    return lambda: post(site.client(), "/signup", json=body)


def _signed_up(site: Site) -> str:
    name = site.fresh_name()
    body = {"username": name, "email": f"{name}@example.com", "password": PASSWORD}
    assert post(site.client(), "/signup", json=body) == 202
    return name


def verify_link(site: Site) -> Act:
    token = site.mailed(f"{_signed_up(site)}@example.com")
    return lambda: post(site.client(), "/signup/verify", json={"token": token})


def verify_code(site: Site) -> Act:
    name = _signed_up(site)
    body = {"username": name, "code": site.mailed(f"{name}@example.com", "code")}
    return lambda: post(site.client(), "/signup/verify", json=body)


def resend(site: Site) -> Act:
    name = _signed_up(site)
    return lambda: post(site.client(), "/signup/resend", json={"username": name})


def reset_request(site: Site) -> Act:
    name = site.user()
    return lambda: post(site.client(), "/password/forgot", json={"username": name})


def reset_complete(site: Site) -> Act:
    name = site.user()
    assert post(site.client(), "/password/forgot", json={"username": name}) == 202
    body = {"token": site.mailed(f"{name}@example.com"), "password": NEW_PASSWORD}
    return lambda: post(site.client(), "/password/reset", json=body)


def email_change_request(site: Site) -> Act:
    client = site.signed_in(site.user())
    address = f"{site.fresh_name()}@example.org"
    return lambda: post(client, "/account/email", json={"email": address})


def email_change_confirm(site: Site) -> Act:
    client = site.signed_in(site.user())
    address = f"{site.fresh_name()}@example.org"
    assert post(client, "/account/email", json={"email": address}) == 202
    token = site.mailed(address)
    return lambda: post(site.client(), "/account/email/confirm", json={"token": token})


def _admin_call(site: Site, call: Callable[[AccountAdmin], object]) -> int:
    """Run an :class:`AccountAdmin` call as a request of the app; 200 or its typed error's status."""
    return _in_request(site, lambda: call(account_admin(site.app)))


def _in_request(site: Site, call: Callable[[], object]) -> int:
    """Run ``call`` in a request of the app; 200 or its typed error's status."""
    with site.app.test_request_context("/", environ_base={"REMOTE_ADDR": "192.0.2.10"}):
        try:
            call()
        except AuthFlowError as exc:
            return exc.status
    return 200


def _role_holder(site: Site, *, holds: bool) -> tuple[str, str]:
    """A new user and a new role (held by the user when ``holds``): (user id, role)."""
    name, role = site.user(), f"role{next(site.numbers)}"
    with site.app.test_request_context("/"):
        user = get_state(site.app).backend.find_user("default", name)
        assert user is not None
        services.roles().create(role)
        if holds:
            services.roles().grant(user.user_id, role)
    return user.user_id, role


def role_add(site: Site) -> Act:
    user_id, role = _role_holder(site, holds=False)
    return lambda: _in_request(site, lambda: services.roles().grant(user_id, role))


def role_remove(site: Site) -> Act:
    user_id, role = _role_holder(site, holds=True)
    return lambda: _in_request(site, lambda: services.roles().revoke(user_id, role))


def role_delete(site: Site) -> Act:
    _, role = _role_holder(site, holds=True)
    return lambda: _in_request(site, lambda: services.roles().delete(role, force=True))


def password_change(site: Site) -> Act:
    name = site.user()
    site.signed_in(name)  # a session, an API token and a reset link for the change to end
    with site.app.app_context():
        user = get_state(site.app).backend.find_user("default", name)
        assert user is not None
        token_service(site.app).create("default", user.user_id, "script")
    assert post(site.client(), "/password/forgot", json={"username": name}) == 202
    return lambda: _admin_call(site, lambda admin: admin.change_password("default", name, NEW_PASSWORD))


def logout_everywhere(site: Site) -> Act:
    name = site.user()
    site.signed_in(name)
    with site.app.app_context():
        user = get_state(site.app).backend.find_user("default", name)
        assert user is not None
        user_id = user.user_id
        token_service(site.app).create("default", user_id, "script")
    return lambda: _admin_call(site, lambda admin: admin.logout_everywhere("default", user_id))


def api_token_create(site: Site) -> Act:
    client = site.signed_in(site.user())
    form = {"name": "deploy script", "csrf_token": csrf_of(client.get("/account").text)}
    return lambda: post(client, "/account/api-tokens", data=form)


def api_token_revoke(site: Site) -> Act:
    name = site.user()
    client = site.signed_in(name)
    with site.app.app_context():
        user = get_state(site.app).backend.find_user("default", name)
        assert user is not None
        token_service(site.app).create("default", user.user_id, "deploy script")
    form = {"name": "deploy script", "csrf_token": csrf_of(client.get("/account").text)}
    return lambda: post(client, "/account/api-tokens/revoke", data=form)


def create_user(site: Site) -> Act:
    name = site.fresh_name()
    return lambda: _admin_call(
        site, lambda admin: admin.create_user("default", name, PASSWORD, email=f"{name}@example.com")
    )


def _factor_form(client: FlaskClient) -> dict[str, str]:
    return {"csrf_token": csrf_of(client.get("/account/factors").text)}


def _begin_totp(client: FlaskClient) -> tuple[str, str]:
    """Start a TOTP enrollment on the pages: its factor id and its key."""
    page = client.post("/account/factors/totp", data=_factor_form(client))
    assert page.status_code == 200
    secret = re.search(r'id="totp-secret">([A-Z2-7]+)<', page.text)
    factor_id = re.search(r'name="factor_id" value="([^"]+)"', page.text)
    assert secret is not None and factor_id is not None
    return factor_id.group(1), secret.group(1)


def _totp_code(site: Site, secret: str) -> str:
    return str(pyotp.TOTP(secret).at(_now(site)))


def totp_enroll_begin(site: Site) -> Act:
    client = site.signed_in(site.user())
    form = _factor_form(client)
    return lambda: post(client, "/account/factors/totp", data=form)


def _two_sessions(site: Site) -> FlaskClient:
    """A new user signed in twice (the change ends the other session); the second client."""
    name = site.user()
    site.signed_in(name)
    return site.signed_in(name)


def totp_enroll_confirm(site: Site) -> Act:
    client = _two_sessions(site)
    factor_id, secret = _begin_totp(client)
    form = {**_factor_form(client), "factor_id": factor_id, "code": _totp_code(site, secret)}
    return lambda: post(client, "/account/factors/totp/confirm", data=form)


def factor_remove(site: Site) -> Act:
    client = _two_sessions(site)
    factor_id, secret = _begin_totp(client)
    form = {**_factor_form(client), "factor_id": factor_id, "code": _totp_code(site, secret)}
    assert post(client, "/account/factors/totp/confirm", data=form) == 302
    form = _factor_form(client)
    return lambda: post(client, f"/account/factors/{factor_id}/remove", data=form)


@dataclass(frozen=True)
class Flow:
    prepare: Callable[[Site], Act]
    #: The status of a request that worked.
    ok: int
    #: The mail goes out after the commit (the answer may not tell whether an account matched).
    mail_after_commit: bool = False
    #: The user's sessions end first, outside the flow's unit (a session store may be
    #: another service): a later failure leaves the user logged out and nothing else changed.
    sessions_first: bool = False


FLOWS: dict[str, Flow] = {
    "signup": Flow(signup, 202),
    "signup verification (link)": Flow(verify_link, 200),
    "signup verification (code)": Flow(verify_code, 200),
    "signup resend": Flow(resend, 202, mail_after_commit=True),
    "password reset request": Flow(reset_request, 202, mail_after_commit=True),
    "password reset completion": Flow(reset_complete, 200, mail_after_commit=True, sessions_first=True),
    "e-mail change request": Flow(email_change_request, 202, mail_after_commit=True),
    "e-mail change confirmation": Flow(email_change_confirm, 200, mail_after_commit=True),
    "password change": Flow(password_change, 200, sessions_first=True),
    "log out everywhere": Flow(logout_everywhere, 200, sessions_first=True),
    "API token create": Flow(api_token_create, 201),
    "API token revoke": Flow(api_token_revoke, 302),
    "TOTP enrollment (begin)": Flow(totp_enroll_begin, 200),
    "TOTP enrollment (confirm)": Flow(totp_enroll_confirm, 302, mail_after_commit=True, sessions_first=True),
    "factor removal": Flow(factor_remove, 302, mail_after_commit=True, sessions_first=True),
    "role add": Flow(role_add, 200),
    "role remove": Flow(role_remove, 200),
    "role delete": Flow(role_delete, 200),
    "AccountAdmin.create_user": Flow(create_user, 200),
}


def _traced(site: Site, flow: Flow) -> Trace:
    act = flow.prepare(site)
    with site.faults.trace(site.app) as trace:
        status = act()
    assert status == flow.ok, f"the clean run answered {status}"
    return trace


#: The session store's tables (and the device trust that ends with a session): their writes
#: are not part of an account flow's transaction (sessions may live in Redis).
SESSION_LAYER = frozenset({"authflow_sessions", "authflow_devices"})


def _session_layer(table: str, row: dict[str, Any]) -> bool:
    return table in SESSION_LAYER or (table == AUDIT_TABLE and row.get("status") == "error")


def _after_the_flow(trace: Trace, fault: Fault) -> bool:
    """``fault`` hits a write of the session layer after the flow's last write of its own."""
    if fault.kind != "store" or trace.writes[fault.n - 1].table not in SESSION_LAYER:
        return False
    own = [n for n, write in enumerate(trace.writes, 1) if write.table not in SESSION_LAYER]
    return not own or fault.n > own[-1]


def _run_fault(site: Site, flow: Flow, fault: Fault, trace: Trace) -> str:
    """One cell of the matrix: the flow with ``fault``; its outcome, asserted."""
    act = flow.prepare(site)
    ignore = _session_layer if flow.sessions_first else None
    before = snapshot(site.engine, ignore=ignore)
    site.faults.fired.clear()
    with site.faults.inject(fault, site.app):
        status = act()
    assert site.faults.fired == [fault], f"{fault} did not fire"
    if fault.kind == "mail" and flow.mail_after_commit:
        assert status == flow.ok, f"{fault}: answered {status}"
        return "change kept, failure logged"
    if _after_the_flow(trace, fault):  # the session store's write once the flow committed
        assert status in (flow.ok, 503), f"{fault}: answered {status}"
        return f"{status}, change kept (session write after the commit)"
    assert status == 503, f"{fault}: answered {status}"
    after = snapshot(site.engine, ignore=ignore)
    kept = {
        name: sorted(set(rows) ^ set(before.get(name, [])))
        for name, rows in after.items()
        if rows != before.get(name)
    }
    assert not kept, f"{fault}: kept {kept}"
    retry = act()
    assert retry == flow.ok, f"{fault}: the retry answered {retry}"
    return "503, nothing kept, retry ok"


def representative(trace: Trace) -> list[Fault]:
    """The faults a run tries: every audit row and mail, and the store's first write to each
    table plus its last write (``AUTHFLOW_FAULT_MATRIX=full``: every write)."""
    faults = trace.faults()
    if os.environ.get("AUTHFLOW_FAULT_MATRIX") == "full":
        return faults
    first: dict[str, int] = {}
    for n, write in enumerate(trace.writes, 1):
        first.setdefault(write.table, n)
    chosen = {*first.values(), len(trace.writes)}
    return [fault for fault in faults if fault.kind != "store" or fault.n in chosen]


def _describe(trace: Trace, fault: Fault) -> str:
    if fault.kind != "store":
        return str(fault)
    write = trace.writes[fault.n - 1]
    return f"{fault} ({write.verb} {write.table})"


@pytest.mark.parametrize("name", list(FLOWS))
def test_each_write_of_the_flow_fails_alone_and_nothing_is_kept(site: Site, name: str, request: Any) -> None:
    flow = FLOWS[name]
    trace = _traced(site, flow)
    commits = trace.commits_writing(besides=SESSION_LAYER)
    assert commits <= 1, f"{name} committed {commits} times: {trace.transactions}"
    store = request.node.callspec.params["database_url"]
    lines = []
    for fault in representative(trace):
        outcome = _run_fault(site, flow, fault, trace)
        lines.append(f"| {name} | {store} | {commits} | {_describe(trace, fault)} | {outcome} |\n")
    table = os.environ.get("AUTHFLOW_FAULT_MATRIX_TABLE")  # where to append the matrix's rows
    if table:
        with open(table, "a", encoding="utf-8") as out:
            out.writelines(lines)


# --- the two reproduced findings ------------------------------------------------------------------


def test_a_refused_signup_keeps_no_account_and_its_retry_signs_up(site: Site) -> None:
    body = {"username": "gina", "email": "gina@example.com", "password": PASSWORD}
    with site.faults.fail_audit(1):
        assert post(site.client(), "/signup", json=body) == 503
    with site.app.app_context():
        assert get_state(site.app).backend.find_user("default", "gina") is None
    assert post(site.client(), "/signup", json=body) == 202
    [mail] = site.outbox.messages
    assert mail.to == "gina@example.com" and site.mailed("gina@example.com")  # the link, not a notice


def test_a_refused_verification_leaves_its_link_usable(site: Site) -> None:
    token = site.mailed(f"{_signed_up(site)}@example.com")
    with site.faults.fail_audit(1):
        assert post(site.client(), "/signup/verify", json={"token": token}) == 503
    assert post(site.client(), "/signup/verify", json={"token": token}) == 200


# --- joining the application's transaction never ends it ------------------------------------------


@pytest.fixture
def sql_app(database_url: str, mock_clock: MockClock, authflow_hasher: PasswordHasher) -> Iterator[SqlApp]:
    made = SqlApp(database_url, mock_clock, authflow_hasher)
    yield made
    with made.app.app_context():
        made.db.engine.dispose()


def _app_row_and_account(sql_app: SqlApp, *, refuse: bool = False) -> None:
    """In a view of the app's: its own pending row, then ``create_user`` with the hook."""
    sql_app.refuse_create = refuse
    db = sql_app.db
    db.session.add(sql_app.Member(id="own-row", source="app"))
    db.session.flush()
    account_admin(sql_app.app).create_user("default", "erin", PASSWORD)


def test_create_user_with_a_hook_leaves_the_apps_rollback_to_the_app(sql_app: SqlApp) -> None:
    with sql_app.app.test_request_context("/"):
        _app_row_and_account(sql_app)
        sql_app.db.session.rollback()
    assert sql_app.members() == {} and sql_app.accounts() == {}  # neither its row nor the account


def test_create_user_with_a_hook_commits_with_the_apps_commit(sql_app: SqlApp) -> None:
    with sql_app.app.test_request_context("/"):
        _app_row_and_account(sql_app)
        assert sql_app.accounts() == {}  # nothing committed yet: the app's commit decides
        sql_app.db.session.commit()
    [(user_id, identifier)] = sql_app.accounts().items()
    assert identifier == "erin" and sql_app.members() == {"own-row": "app", user_id: "admin"}


def test_a_refusing_hook_in_the_apps_transaction_undoes_only_the_librarys_part(sql_app: SqlApp) -> None:
    with sql_app.app.test_request_context("/"):
        with pytest.raises(Refused):
            _app_row_and_account(sql_app, refuse=True)
        sql_app.db.session.commit()  # the app goes on with its own work
    assert sql_app.members() == {"own-row": "app"} and sql_app.accounts() == {}


@pytest.fixture
def signup_sql_app(
    database_url: str, mock_clock: MockClock, authflow_hasher: PasswordHasher
) -> Iterator[SqlApp]:
    made = SqlApp(
        database_url,
        mock_clock,
        authflow_hasher,
        AUTHFLOW_REGISTRATION=True,
        AUTHFLOW_EXTERNAL_URL="http://localhost",
        AUTHFLOW_THROTTLE=False,
    )
    yield made
    with made.app.app_context():
        made.db.engine.dispose()


def test_signup_with_a_hook_commits_once_with_the_apps_row(signup_sql_app: SqlApp) -> None:
    """Sign-up owns the session's transaction: the account, the hook's row, the token and
    the audit row commit once; a failing audit write keeps none of them."""
    sql_app = signup_sql_app
    app = sql_app.app
    register_views(app)
    get_state(app).mail_sender = Outbox()
    with app.app_context():
        engine = sql_app.db.engine
    body = {"username": "frank", "email": "frank@example.com", "password": PASSWORD}
    with Faults(engine) as faults:
        before = snapshot(engine)
        with faults.inject(Fault("audit", 1), app):
            assert post(app.test_client(), "/signup", json=body) == 503
        assert snapshot(engine) == before
        with faults.trace(app) as trace:
            assert post(app.test_client(), "/signup", json=body) == 202
    assert trace.commits == 1 and trace.mails == 1
    [user_id] = sql_app.accounts()
    assert sql_app.members() == {user_id: "signup"}
