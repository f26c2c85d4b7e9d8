"""The fault-injection matrix of the federated flows (issue 28 point 5).

Each flow (a first sign-in that creates the account, the same with the application's
``user_created`` or ``provision_user`` hook on Flask-SQLAlchemy, a returning user, linking
a provider from the account page, unlinking it) is run once cleanly under
:meth:`tests.faults.Faults.trace`; then each of its writes is made to fail in turn (the
store at the n-th INSERT/UPDATE/DELETE, the audit sink at the n-th row, the mail sender at
its n-th notice), on SQLite and PostgreSQL, and the test asserts a typed answer (never a
500), that nothing of the flow was kept, and that the flow run again works; a failing
notice keeps the change (notices go after the commit).

Only the request that does the flow is traced: the callback (or the unlink form). The
redirect to the provider that starts a ceremony writes the session on its own, before.
Left out of the comparison: the session rows of that start (a signed-in session is still
caught; on the account page the signed-in session is saved again with its ceremony used
up whatever happens), and the audit row that records the failure itself (status
``failure`` or ``error``).

Commits per request: one. A sign-in's account, hook rows, link, provider tokens, audit
rows, device record (written by the ``login_succeeded`` receiver inside the unit) and, on
the SQL session store, the signed-in session commit together; with a memory or Redis
session store the session is the one write after that commit.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import count
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from flask import Flask, request
from flask.testing import FlaskClient
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import text

from flask_authflow import AuthFlow, UserMixin
from flask_authflow._clock import MockClock
from flask_authflow._core.app_users import NewAccount
from flask_authflow._web.state import account_admin, get_state
from flask_authflow._web.views import csrf_token
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.login._password import PasswordHasher
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.migrations import upgrade
from flask_authflow.testing._provider import TestOpenIDProvider
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT, Outbox
from tests.faults import AUDIT_TABLE, Fault, Faults, Trace, snapshot
from tests.federation_support import CLIENT_ID, CLIENT_SECRET, PROVIDER, REDIRECT_URI
from tests.test_views import csrf_of

pytestmark = pytest.mark.authflow_stores("sql")

PASSWORD = "a long enough passphrase 42"

#: A started flow: run its request, answer its outcome.
Finish = Callable[[], str]


@dataclass
class Site:
    app: Flask
    engine: Any
    faults: Faults
    provider: TestOpenIDProvider
    db: SQLAlchemy | None = None
    numbers: Iterator[int] = field(default_factory=lambda: count(1))

    def client(self) -> FlaskClient:
        client = self.app.test_client()
        client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
        return client

    def sub(self) -> str:
        """A provider identity nobody signed in with yet, signed in at the provider."""
        sub = f"Sub-{next(self.numbers)}-{secrets.token_hex(3)}"
        self.provider.login_as(sub, email=f"{sub.lower()}@example.com", email_verified=True)
        return sub

    def callback_of(self, start: Any) -> str:
        """Follow a redirect to the provider; the callback's path and query."""
        assert start.status_code == 302, start.text
        answer = _browser(self.provider).get(start.location, allow_redirects=False, timeout=5)
        assert answer.status_code == 302, answer.text
        callback = urlsplit(answer.headers["Location"])
        assert f"{callback.scheme}://{callback.netloc}{callback.path}" == REDIRECT_URI
        return f"{callback.path}?{callback.query}"

    def password_user(self, client: FlaskClient) -> str:
        """A password account, signed in on ``client``."""
        name = f"user{next(self.numbers)}"
        with self.app.app_context():
            now = get_state(self.app).clock.now()
            address = f"{name}@example.com"  # verified: linking mails it a security notice
            account_admin(self.app).create_user(
                "default", name, PASSWORD, email=address, email_verified_at=now
            )
        form = {"username": name, "password": PASSWORD, "csrf_token": csrf_of(client.get("/login").text)}
        assert client.post("/login", data=form).status_code == 302
        return name


def _browser(provider: TestOpenIDProvider) -> requests.Session:
    """The browser's view of the provider (its pages are served in-process)."""
    session = requests.Session()
    for prefix, adapter in provider.http_adapters().items():
        session.mount(prefix, adapter)
    return session


def _settings(provider: TestOpenIDProvider) -> dict[str, Any]:
    provider.register_client(CLIENT_ID, CLIENT_SECRET, [REDIRECT_URI])
    return {
        PROVIDER: {
            "discovery_url": provider.discovery_url,
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "redirect_uri": REDIRECT_URI,
            "post_login_redirect": "/dashboard",
        }
    }


def _routes(app: Flask) -> None:
    app.add_url_rule("/token", "token", csrf_token)


@pytest.fixture
def site(app_factory: Any, database_url: str, oidc_provider: TestOpenIDProvider) -> Iterator[Site]:
    upgrade(database_url)
    app = app_factory(
        AUTHFLOW_DATABASE_URL=database_url,
        AUTHFLOW_VIEWS=True,
        AUTHFLOW_THROTTLE=False,
        AUTHFLOW_EXTERNAL_URL="http://localhost",
        AUTHFLOW_OAUTH_PROVIDERS=_settings(oidc_provider),
        http_client=RequestsHttpClient(adapters=oidc_provider.http_adapters()),
    )
    _routes(app)
    get_state(app).mail_sender = Outbox()
    backend = get_state(app).backend
    assert isinstance(backend, SqlAlchemyBackend)
    with Faults(backend.engine) as faults:
        yield Site(app, backend.engine, faults, oidc_provider)


@pytest.fixture
def hooked(
    database_url: str,
    oidc_provider: TestOpenIDProvider,
    mock_clock: MockClock,
    authflow_hasher: PasswordHasher,
) -> Iterator[Site]:
    """A Flask-SQLAlchemy app whose ``user_created`` hook writes a ``Member`` row."""
    upgrade(database_url)
    db = SQLAlchemy()

    class FedMember(UserMixin, db.Model):  # type: ignore[name-defined,misc]
        __tablename__ = "fed_members"
        id = db.Column(db.String(32), primary_key=True)
        source = db.Column(db.String(32), nullable=False)

    app = Flask("fed_hooked")
    app.config.update(
        TESTING=True,
        SQLALCHEMY_DATABASE_URI=database_url,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_VIEWS=True,
        AUTHFLOW_THROTTLE=False,
        AUTHFLOW_OAUTH_PROVIDERS=_settings(oidc_provider),
    )
    db.init_app(app)
    authflow = AuthFlow(
        app,
        backend=SqlAlchemyBackend(db),
        clock=mock_clock,
        hasher=authflow_hasher,
        http_client=RequestsHttpClient(adapters=oidc_provider.http_adapters()),
    )
    with app.app_context():
        db.create_all()
        engine = db.engine

    @authflow.user_created
    def created(new: NewAccount) -> None:
        db.session.add(FedMember(id=new.account.user_id, source=new.source))
        db.session.flush()

    app.extensions["fed_member"] = FedMember
    app.extensions["fed_authflow"] = authflow
    _routes(app)
    try:
        with Faults(engine) as faults:
            yield Site(app, engine, faults, oidc_provider, db)
    finally:
        with app.app_context():
            db.drop_all()
            engine.dispose()


# --- the flows --------------------------------------------------------------------------------


def _answer(response: Any) -> str:
    """``done`` (a redirect away from the sign-in and error pages), ``refused`` (a typed
    answer: 4xx or 503) or the HTTP status of anything else (a 500)."""
    response.close()
    if response.status_code == 302 and "/login" not in (response.location or ""):
        return "done"
    if 400 <= response.status_code < 500 or response.status_code == 503:
        return "refused"
    return str(response.status_code)


def _sign_in(site: Site) -> Finish:
    """A callback of the identity signed in at the provider, on a new browser."""
    client = site.client()
    callback = site.callback_of(client.get(f"/auth/login/{PROVIDER}"))
    return lambda: _answer(client.get(callback))


def first_sign_in(site: Site) -> Finish:
    site.sub()
    return _sign_in(site)


def returning_user(site: Site) -> Finish:
    site.sub()
    assert _sign_in(site)() == "done"
    return _sign_in(site)


def link(site: Site) -> Finish:
    client = site.client()
    site.password_user(client)
    site.sub()
    start = client.post(f"/auth/link/{PROVIDER}", data={"csrf_token": client.get("/token").text})
    callback = site.callback_of(start)
    return lambda: _answer(client.get(callback))


def unlink(site: Site) -> Finish:
    client = site.client()
    site.password_user(client)
    site.sub()
    start = client.post(f"/auth/link/{PROVIDER}", data={"csrf_token": client.get("/token").text})
    assert _answer(client.get(site.callback_of(start))) == "done"
    token = client.get("/token").text
    return lambda: _answer(client.post(f"/auth/unlink/{PROVIDER}", data={"csrf_token": token}))


FLOWS: dict[str, Callable[[Site], Finish]] = {
    "first sign-in": first_sign_in,
    "returning user": returning_user,
    "link": link,
    "unlink": unlink,
}


def _outside_the_flow(table: str, row: dict[str, Any]) -> bool:
    if table == "authflow_sessions":  # the ceremony's start; a signed-in one is the flow's
        return row.get("state") != "authenticated"
    return table == AUDIT_TABLE and row.get("status") in ("failure", "error")


def _outside_the_account_page(table: str, row: dict[str, Any]) -> bool:
    """Linking and unlinking sign nobody in: the signed-in session of the account page is
    saved again with its ceremony used up, whatever happens (its state is not the flow's)."""
    return table == "authflow_sessions" or _outside_the_flow(table, row)


#: The flows that run on a signed-in account page.
ACCOUNT_PAGE = frozenset({"link", "unlink"})


def _traced(site: Site, prepare: Callable[[Site], Finish]) -> Trace:
    finish = prepare(site)
    with site.faults.trace(site.app) as trace:
        assert finish() == "done"
    return trace


def _run_fault(site: Site, prepare: Callable[[Site], Finish], fault: Fault) -> str:
    finish = prepare(site)
    ignore = _outside_the_account_page if prepare.__name__ in ACCOUNT_PAGE else _outside_the_flow
    before = snapshot(site.engine, ignore=ignore)
    site.faults.fired.clear()
    with site.faults.inject(fault, site.app):
        answer = finish()
    assert site.faults.fired == [fault], f"{fault} did not fire"
    assert answer == "refused", f"{fault}: {answer}"
    after = snapshot(site.engine, ignore=ignore)
    kept = {
        name: sorted(set(rows) ^ set(before.get(name, [])))
        for name, rows in after.items()
        if rows != before.get(name)
    }
    assert not kept, f"{fault}: kept {kept}"
    assert prepare(site)() == "done", f"{fault}: the flow run again did not work"
    return "refused, nothing kept, retry works"


def _mail_fails(site: Site, prepare: Callable[[Site], Finish], fault: Fault) -> str:
    """A security notice is sent after the commit: a failing mail keeps the change."""
    finish = prepare(site)
    before = snapshot(site.engine, ignore=_outside_the_account_page)
    site.faults.fired.clear()
    with site.faults.inject(fault, site.app):
        answer = finish()
    assert site.faults.fired == [fault], f"{fault} did not fire"
    assert answer == "done", f"{fault}: {answer}"
    assert snapshot(site.engine, ignore=_outside_the_account_page) != before  # the change is kept
    return "done, change kept (the notice goes after the commit)"


def _matrix(site: Site, name: str, prepare: Callable[[Site], Finish]) -> list[tuple[str, str, str, str]]:
    trace = _traced(site, prepare)
    # A sign-in commits once: the account (and the app's hook rows), the link, the audit
    # rows, the device record and the signed-in session. Linking commits the link, the
    # audit row and the session (its ceremony used up) once; unlinking its rows once.
    assert trace.commits == 1, trace.transactions
    rows = []
    for fault in trace.faults():
        if fault.kind == "mail":
            rows.append((name, str(fault), "(notice)", _mail_fails(site, prepare, fault)))
            continue
        n = fault.n if fault.kind == "store" else _audit_write(trace, fault.n)
        rows.append((name, str(fault), trace.writes[n - 1].table, _run_fault(site, prepare, fault)))
    assert rows
    return rows


def _audit_write(trace: Trace, n: int) -> int:
    audits = [
        i for i, write in enumerate(trace.writes, 1) if write.table == AUDIT_TABLE and write.verb == "INSERT"
    ]
    return audits[n - 1]


@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_each_write_of_a_federated_flow_fails_alone(site: Site, flow: str) -> None:
    rows = _matrix(site, flow, FLOWS[flow])
    print("\n" + "\n".join(" | ".join(row) for row in rows))


def test_a_first_sign_in_with_the_apps_user_created_hook(hooked: Site) -> None:
    rows = _matrix(hooked, "first sign-in, user_created hook", first_sign_in)
    print("\n" + "\n".join(" | ".join(row) for row in rows))
    model = hooked.app.extensions["fed_member"]
    assert hooked.db is not None
    with hooked.app.app_context():
        members = {m.id: m.source for m in hooked.db.session.scalars(hooked.db.select(model))}
    assert members and set(members.values()) == {"federation"}


# --- the application's own pending work ----------------------------------------------------------


@pytest.mark.slow  # on SQLite the sign-in waits out the engine's 5 s busy_timeout, then answers 503
def test_a_callback_neither_commits_nor_rolls_back_the_apps_pending_rows(hooked: Site) -> None:
    """A view's own row is pending in ``db.session`` when the callback runs: the sign-in
    runs beside it (its hook rows in a savepoint of the application's transaction) and
    the application's commit or rollback decides its row."""
    db, model, app = hooked.db, hooked.app.extensions["fed_member"], hooked.app
    assert db is not None
    seen: dict[str, bool] = {}

    @app.before_request
    def own_row() -> None:
        if request.endpoint == "authflow_oauth.callback":
            db.session.add(model(id="own-row", source="app"))

    @app.after_request
    def check(response: Any) -> Any:
        if request.endpoint != "authflow_oauth.callback":
            return response
        with hooked.engine.connect() as other:
            committed = other.execute(db.select(model.id).where(model.id == "own-row")).first()
        seen["pending"] = db.session.get(model, "own-row") is not None
        seen["committed"] = committed is not None
        db.session.commit()  # the application's decision
        return response

    hooked.sub()
    answer = _sign_in(hooked)()
    assert seen == {"pending": True, "committed": False}  # not ended by the callback
    with app.app_context():
        members = {m.id: m.source for m in db.session.scalars(db.select(model))}
    assert members.pop("own-row") == "app"  # the application's commit kept it
    if hooked.engine.dialect.name == "sqlite":
        # One writer: the application's transaction holds SQLite's write lock, so the
        # sign-in's unit cannot write beside it; it answers 503 and keeps nothing.
        assert answer == "refused" and members == {}
    else:
        assert answer == "done" and set(members.values()) == {"federation"}


def test_a_first_sign_in_with_the_apps_provision_user_hook(hooked: Site) -> None:
    """``provision_user`` writes a row of the application's and creates the account (whose
    ``user_created`` hook writes another): all of it commits once with the link and the
    login, or none of it."""
    db, model, app = hooked.db, hooked.app.extensions["fed_member"], hooked.app
    assert db is not None

    authflow: AuthFlow = app.extensions["fed_authflow"]

    @authflow.provision_user
    def provision(identity: Any, tenant: str) -> str:
        account = account_admin(app).create_user(tenant, identity.local_identifier, None, source="provision")
        db.session.add(model(id=f"p-{account.user_id}"[:32], source="provisioned"))
        return account.user_id

    rows = _matrix(hooked, "first sign-in, provision_user hook", first_sign_in)
    print("\n" + "\n".join(" | ".join(row) for row in rows))
    assert any(table == "fed_members" for _, _, table, _ in rows)
    with app.app_context():
        sources = sorted({m.source for m in db.session.scalars(db.select(model))})
    assert sources == ["provision", "provisioned"]


def test_a_refused_sign_in_keeps_its_audit_row_and_nothing_else(site: Site) -> None:
    """A disabled account's sign-in is refused inside the callback's unit: the unit is
    rolled back, and the row that records the refusal is written on its own."""
    sub = site.sub()
    assert _sign_in(site)() == "done"
    with site.app.app_context():
        account_admin(site.app).disable("default", f"{PROVIDER}:{sub}")
    site.provider.login_as(sub, email=f"{sub.lower()}@example.com", email_verified=True)
    finish = _sign_in(site)

    def outside(table: str, row: dict[str, Any]) -> bool:  # the audit rows: read below
        return table == AUDIT_TABLE or _outside_the_flow(table, row)

    before = snapshot(site.engine, ignore=outside)
    with site.engine.connect() as conn:
        rows_before = conn.execute(text("SELECT count(*) FROM authflow_audit")).scalar_one()
    assert finish() == "refused"
    assert snapshot(site.engine, ignore=outside) == before
    with site.engine.connect() as conn:
        refusals = conn.execute(text("SELECT event, status, reason FROM authflow_audit ORDER BY id")).all()[
            rows_before:
        ]
    assert [tuple(row) for row in refusals] == [("login", "refused", "account_disabled")]


def test_with_a_session_store_that_cannot_join_the_session_is_the_one_write_after(
    app_factory: Any, database_url: str, oidc_provider: TestOpenIDProvider, mock_clock: MockClock
) -> None:
    """A memory (or Redis) session store cannot join the unit: the callback's writes
    commit once, and the signed-in session is written after that commit; a failing write
    of the unit signs nobody in."""
    upgrade(database_url)
    sessions = MemorySessionStore(clock=mock_clock)
    app = app_factory(
        AUTHFLOW_DATABASE_URL=database_url,
        AUTHFLOW_THROTTLE=False,
        AUTHFLOW_OAUTH_PROVIDERS=_settings(oidc_provider),
        http_client=RequestsHttpClient(adapters=oidc_provider.http_adapters()),
        session_store=sessions,
    )
    backend = get_state(app).backend
    assert isinstance(backend, SqlAlchemyBackend)
    with Faults(backend.engine) as faults:
        site = Site(app, backend.engine, faults, oidc_provider)
        sub = site.sub()
        finish = _sign_in(site)
        with faults.inject(Fault("audit", 1), app):
            assert finish() == "refused"
        assert backend.find_link(oidc_provider.issuer, sub) is None  # no account, no link, no login
        oidc_provider.login_as(sub, email=f"{sub.lower()}@example.com", email_verified=True)
        finish = _sign_in(site)
        with faults.trace(app) as trace:
            assert finish() == "done"
    assert trace.commits == 1 and "authflow_sessions" not in {w.table for w in trace.writes}
    link = backend.find_link(oidc_provider.issuer, sub)
    assert link is not None
    signed_in = sessions.list_user_sessions("default", link.user_id)
    assert [record.state.value for record in signed_in] == ["authenticated"]
