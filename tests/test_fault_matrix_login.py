"""The fault-injection matrix of the login steps (issue 28 point 5, issue 30 point 3).

Each step is run once cleanly under :meth:`tests.faults.Faults.trace`; then each of its
writes is made to fail in turn (the store at the n-th INSERT/UPDATE/DELETE, the audit sink
at the n-th row), on SQLite and PostgreSQL, and the test asserts a typed answer (the
sign-in page again, or 503), never a 500; that the step left nothing; that the same
request sent again signs in.

What "left nothing" means for a login step: no session was signed in, no success or
failure was counted, no code was used up, no device recorded, no audit row kept. Left out
of the comparison: the session of the step before (the TOTP step's password step; a
session left signed in is still caught) and the rows that record the failure itself: its
``error`` row and the ``login_begin`` row written with it (on success that row is in the
step's one transaction, asserted below).

Commits per request are asserted: ONE. ``POST /login`` writes the begin's audit row, the
password's settlement (verified first, counted after: no reservation commits before
Argon2), its audit row, the device record and its row and, on a SQL session store, the
session together; the TOTP step its reservation, settlement, the code used up, the device,
the rows and the session.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyotp
import pytest
from flask.testing import FlaskClient

from flask_authflow._web.state import account_admin, get_state
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.migrations import upgrade
from tests.appfactory import AppFactory
from tests.faults import AUDIT_TABLE, Fault, Faults, FaultSite, Trace, snapshot
from tests.test_views import csrf_of

pytestmark = pytest.mark.authflow_stores("sql")

PASSWORD = "a long enough passphrase 42"


@dataclass
class Site(FaultSite):
    def user(self) -> str:
        name = f"user{next(self.numbers)}"
        with self.app.app_context():
            account_admin(self.app).create_user("default", name, PASSWORD)
        return name


@pytest.fixture
def site(app_factory: AppFactory, database_url: str) -> Iterator[Site]:
    upgrade(database_url)
    app = app_factory(AUTHFLOW_DATABASE_URL=database_url, AUTHFLOW_VIEWS=True, AUTHFLOW_THROTTLE=False)
    backend = get_state(app).backend
    assert isinstance(backend, SqlAlchemyBackend)
    with Faults(backend.engine) as faults:
        yield Site(app, faults)


def _status(answer: Any) -> str:
    """``signed in`` (a redirect away from the sign-in pages), ``refused`` (the sign-in
    page again, a typed answer) or the HTTP status of anything else."""
    answer.close()
    if answer.status_code == 302 and "/login" not in (answer.location or ""):
        return "signed in"
    if answer.status_code in (200, 302, 401, 429, 503):
        return "refused"
    return str(answer.status_code)


def _password_form(client: FlaskClient, name: str) -> dict[str, str]:
    return {"username": name, "password": PASSWORD, "csrf_token": csrf_of(client.get("/login").text)}


Act = Callable[[], str]


def password_step(site: Site) -> Act:
    name, client = site.user(), site.client()
    form = _password_form(client, name)
    return lambda: _status(client.post("/login", data=form))


def totp_step(site: Site) -> Act:
    name = site.user()
    with site.app.app_context():
        admin = account_admin(site.app)
        uri = admin.enroll_totp("default", name)
    secret = re.search(r"secret=([A-Z2-7]+)", uri)
    assert secret is not None
    client = site.client()
    step = client.post("/login", data=_password_form(client, name))
    assert step.status_code == 302 and step.location.startswith("/login/factor")
    now = get_state(site.app).service.clock.now()
    form = {
        "code": pyotp.TOTP(secret.group(1)).at(now),
        "csrf_token": csrf_of(client.get("/login/factor").text),
    }
    return lambda: _status(client.post("/login/factor", data=form))


STEPS: dict[str, Callable[[Site], Act]] = {"password step": password_step, "TOTP step": totp_step}


def _outside_the_step(table: str, row: dict[str, Any]) -> bool:
    if table == "authflow_sessions":  # the begin step's session; a signed-in one is the step's
        return row.get("state") != "authenticated"
    if table == "authflow_lockouts":  # an empty counter (the reservation's row lock) counts nothing
        return (row.get("failures"), row.get("locked_until"), row.get("last_success_at")) == (0, None, None)
    # The failure's own record: its ``error`` row and, written with it, the begin's row.
    return table == AUDIT_TABLE and (row.get("status") == "error" or row.get("event") == "login_begin")


def _traced(site: Site, prepare: Callable[[Site], Act]) -> Trace:
    act = prepare(site)
    with site.faults.trace(site.app) as trace:
        assert act() == "signed in"
    return trace


def _run_fault(site: Site, prepare: Callable[[Site], Act], fault: Fault) -> str:
    act = prepare(site)
    before = snapshot(site.engine, ignore=_outside_the_step)
    site.faults.fired.clear()
    with site.faults.inject(fault, site.app):
        status = act()
    assert site.faults.fired == [fault], f"{fault} did not fire"
    assert status == "refused", f"{fault}: {status}"
    after = snapshot(site.engine, ignore=_outside_the_step)
    kept = {
        name: sorted(set(rows) ^ set(before.get(name, [])))
        for name, rows in after.items()
        if rows != before.get(name)
    }
    assert not kept, f"{fault}: kept {kept}"
    assert act() == "signed in", f"{fault}: the retry did not sign in"
    return "refused, nothing kept, retry signs in"


def _write_of(trace: Trace, fault: Fault) -> int:
    """The index (1-based) in ``trace.writes`` of the write ``fault`` hits."""
    if fault.kind == "store":
        return fault.n
    audits = [
        n for n, write in enumerate(trace.writes, 1) if write.table == AUDIT_TABLE and write.verb == "INSERT"
    ]
    return audits[fault.n - 1]


@pytest.mark.parametrize("step", sorted(STEPS))
def test_each_write_of_a_login_step_fails_alone(site: Site, step: str) -> None:
    prepare = STEPS[step]
    trace = _traced(site, prepare)
    # Every write of the step, the device's included, in one transaction; after it only the
    # web layer's save of the session again (the sign-in rotated its CSRF token).
    step_writes, *later = trace.transactions
    # (The success is its counters' latest success: the step writes no attempt row.)
    assert {"authflow_lockouts", AUDIT_TABLE, "authflow_sessions", "authflow_devices"} <= step_writes
    assert all(tables == {"authflow_sessions"} for tables in later), trace.transactions
    committed = _step_writes(trace, len(later))
    rows = []
    for fault in trace.faults():
        n = _write_of(trace, fault)
        table = trace.writes[n - 1].table
        check = _run_fault if n <= committed else _after_commit
        rows.append((step, str(fault), table, check(site, prepare, fault)))
    assert rows
    print("\n".join(" | ".join(row) for row in rows))


def _step_writes(trace: Trace, later: int) -> int:
    """How many of the request's writes are the step's: all but the last ``later`` session saves."""
    return len(trace.writes) - later


def _after_commit(site: Site, prepare: Callable[[Site], Act], fault: Fault) -> str:
    """The web layer's save of the session after the step committed: the sign-in stands or
    the answer is typed, never a 500."""
    act = prepare(site)
    with site.faults.inject(fault, site.app):
        status = act()
    assert status in ("signed in", "refused"), f"{fault}: {status}"
    return f"{status} (after the step's commit: web layer)"
