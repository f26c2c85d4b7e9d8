"""Fault injection for the all-or-nothing tests of the account and login flows.

A flow is run once cleanly under :meth:`Faults.trace` to learn what it writes; then each
write in turn is made to fail, and the test asserts that the answer is a typed error, that
nothing of the flow was kept (:func:`snapshot` before and after) and that a retry works::

    from tests.faults import Faults, snapshot

    faults = Faults(engine)                    # listens on the engine until faults.close()
    with faults.trace(app) as trace:           # the clean run: what it wrote, committed and mailed
        assert client.post("/signup", data=form).status_code == 202
    # trace.writes == [Write("INSERT", "authflow_users"), ..., Write("INSERT", "authflow_audit")]
    # trace.commits == 1 (trace.commits_writing(besides={"authflow_sessions"}) leaves the session
    # store's own writes out); trace.faults() == [Fault("store", 1), ..., Fault("audit", 1), Fault("mail", 1)]
    before = snapshot(engine)
    with faults.inject(Fault("store", 2), app):   # the 2nd INSERT/UPDATE/DELETE raises
        assert client.post("/signup", data=form).status_code == 503
    assert snapshot(engine) == before              # nothing of the flow was kept
    assert client.post("/signup", data=form).status_code == 202   # the retry works

Kinds of :class:`Fault`: ``"store"`` (the n-th INSERT, UPDATE or DELETE of the request
raises the driver's ``OperationalError`` before it reaches the database), ``"audit"`` (the
n-th INSERT into ``authflow_audit`` raises, the audit sink failing) and ``"mail"`` (the
app's mail sender raises :class:`~flask_authflow.errors.MailDeliveryError` at its n-th
send). Commits are counted with the engine's ``commit`` event, plus each write that ran in
AUTOCOMMIT (a statement committed on its own).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count
from typing import Any, Literal

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Engine, MetaData, event, select

from flask_authflow._web.state import get_state
from flask_authflow.errors import MailDeliveryError
from flask_authflow.storage._sql.backend import SqlAlchemyBackend

__all__ = [
    "AUDIT_TABLE",
    "Fault",
    "FaultSite",
    "Faults",
    "InjectedFault",
    "Trace",
    "Write",
    "failing_mail",
    "snapshot",
]

#: The table whose inserts are the audit sink's writes.
AUDIT_TABLE = "authflow_audit"
_WRITE = re.compile(r'^\s*(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?([A-Za-z_][A-Za-z0-9_]*)', re.IGNORECASE)
#: The session read on PostgreSQL (issue 30.2): a SELECT whose CTE refreshes the session's
#: last-seen time when it is due. It is the request's read, not a write of a flow: a best-effort
#: touch in AUTOCOMMIT, never in a flow's transaction (its outage serves a guest).
_SESSION_READ = re.compile(r"^\s*WITH\s+session_touch\s+AS\s*\(", re.IGNORECASE)
#: The writes of a statement's data-modifying CTEs (PostgreSQL's ``WITH x AS (UPDATE ...)``).
_CTE_WRITE = re.compile(
    r'\bAS\s*\(\s*(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?([A-Za-z_][A-Za-z0-9_]*)', re.IGNORECASE
)

FaultKind = Literal["store", "audit", "mail"]


class InjectedFault(Exception):
    """Marks a fault this harness injected (the cause of the driver's error it raises)."""


@dataclass(frozen=True)
class Write:
    """One write statement: its verb (INSERT, UPDATE, DELETE) and its table."""

    verb: str
    table: str


@dataclass(frozen=True)
class Fault:
    """Make the ``n``-th (1-based) write of ``kind`` fail: ``"store"`` (any write
    statement), ``"audit"`` (an audit row) or ``"mail"`` (a send of the mail sender)."""

    kind: FaultKind
    n: int

    def __str__(self) -> str:
        return f"{self.kind} #{self.n}"


@dataclass
class Trace:
    """What a request did to the database (and the mail sender) while traced."""

    writes: list[Write] = field(default_factory=list)
    commits: int = 0
    mails: int = 0
    #: The tables each committed transaction wrote, in commit order (a write that ran in
    #: AUTOCOMMIT is a transaction of its own; a commit that wrote nothing is not listed).
    transactions: list[frozenset[str]] = field(default_factory=list)

    def commits_writing(self, *, besides: Iterable[str] = ()) -> int:
        """How many committed transactions wrote a table other than ``besides`` (say the
        session store's tables, whose write may not join the flow's transaction)."""
        ignored = set(besides)
        return sum(1 for tables in self.transactions if tables - ignored)

    @property
    def audit_rows(self) -> int:
        return sum(1 for w in self.writes if w.verb == "INSERT" and w.table == AUDIT_TABLE)

    def faults(self, *, store: bool = True, audit: bool = True, mail: bool = True) -> list[Fault]:
        """Every fault of the traced run: each write, each audit row, each mail sent."""
        found: list[Fault] = []
        if store:
            found += [Fault("store", n) for n in range(1, len(self.writes) + 1)]
        if audit:
            found += [Fault("audit", n) for n in range(1, self.audit_rows + 1)]
        if mail:
            found += [Fault("mail", n) for n in range(1, self.mails + 1)]
        return found


class Faults:
    """Engine listeners that trace writes and commits and make a chosen write fail."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._trace: Trace | None = None
        self._fail: Fault | None = None
        self._seen = 0
        self._open: dict[int, set[str]] = {}
        self.fired: list[Fault] = []
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "commit", self._committed)
        event.listen(engine, "rollback", self._rolled_back)

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._before)
        event.remove(self.engine, "commit", self._committed)
        event.remove(self.engine, "rollback", self._rolled_back)

    def __enter__(self) -> Faults:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def trace(self, app: Flask | None = None) -> Iterator[Trace]:
        """Record the writes and commits of the block, and the mails ``app`` sends in it."""
        self._trace = Trace()
        try:
            if app is None:
                yield self._trace
            else:
                with self._counting_mail(app, self._trace):
                    yield self._trace
        finally:
            self._trace = None

    @contextmanager
    def fail_write(self, n: int) -> Iterator[None]:
        """The ``n``-th write statement of the block raises."""
        with self._failing(Fault("store", n)):
            yield

    @contextmanager
    def fail_audit(self, n: int) -> Iterator[None]:
        """The ``n``-th audit row of the block cannot be written."""
        with self._failing(Fault("audit", n)):
            yield

    @contextmanager
    def inject(self, fault: Fault, app: Flask) -> Iterator[None]:
        """Apply ``fault`` to the block (a mail fault replaces ``app``'s mail sender)."""
        if fault.kind == "mail":
            with failing_mail(app, fault.n, fired=lambda: self.fired.append(fault)):
                yield
        else:
            with self._failing(fault):
                yield

    @contextmanager
    def _counting_mail(self, app: Flask, trace: Trace) -> Iterator[None]:
        state = get_state(app)
        inner = state.mail_sender

        def send(to: str, subject: str, body: str) -> None:
            trace.mails += 1
            if inner is not None:
                inner.send(to, subject, body)

        state.mail_sender = _Sender(send)
        try:
            yield
        finally:
            state.mail_sender = inner

    @contextmanager
    def _failing(self, fault: Fault) -> Iterator[None]:
        self._fail, self._seen = fault, 0
        try:
            yield
        finally:
            self._fail = None

    def _before(self, conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        found = [_WRITE.match(statement)]
        if (
            found[0] is None
            and statement.lstrip()[:4].upper() == "WITH"
            and not _SESSION_READ.match(statement)
        ):
            found = list(_CTE_WRITE.finditer(statement))  # one statement: one write to fail
        writes = [Write(f.group(1).split()[0].upper(), f.group(2).lower()) for f in found if f is not None]
        if not writes:
            return
        write = writes[0]
        if self._trace is not None:
            self._trace.writes.append(write)
            tables = {w.table for w in writes}
            if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
                self._trace.commits += 1
                self._trace.transactions.append(frozenset(tables))
            else:
                self._open.setdefault(id(conn), set()).update(tables)
        fault = self._fail
        if fault is None or (fault.kind == "audit" and write != Write("INSERT", AUDIT_TABLE)):
            return
        self._seen += 1
        if self._seen == fault.n:
            self.fired.append(fault)
            raise conn.dialect.loaded_dbapi.OperationalError("injected fault") from InjectedFault(str(fault))

    def _committed(self, conn: Any) -> None:
        tables = self._open.pop(id(conn), set())
        if self._trace is not None:
            self._trace.commits += 1
            if tables:
                self._trace.transactions.append(frozenset(tables))

    def _rolled_back(self, conn: Any) -> None:
        self._open.pop(id(conn), None)


class _Sender:
    def __init__(self, send: Callable[[str, str, str], None]) -> None:
        self.send = send


@contextmanager
def failing_mail(app: Flask, n: int = 1, *, fired: Callable[[], object] | None = None) -> Iterator[None]:
    """``app``'s mail sender raises :class:`MailDeliveryError` at its ``n``-th send in the block
    (the other sends go through)."""
    state = get_state(app)
    inner = state.mail_sender
    seen = 0

    def send(to: str, subject: str, body: str) -> None:
        nonlocal seen
        seen += 1
        if seen == n:
            if fired is not None:
                fired()
            raise MailDeliveryError("injected fault: the mail server refused the message")
        if inner is not None:
            inner.send(to, subject, body)

    state.mail_sender = _Sender(send)
    try:
        yield
    finally:
        state.mail_sender = inner


def snapshot(
    engine: Engine, *, ignore: Callable[[str, dict[str, Any]], bool] | None = None
) -> dict[str, list[str]]:
    """Every row of every table, sorted (compare two with ``==``). ``ignore(table, row)``
    leaves rows out; by default the audit rows with status ``error`` (the record of the
    failure itself, written after the flow's writes were dropped) are left out."""
    skip = ignore if ignore is not None else _failure_rows
    meta = _REFLECTED.get(engine)
    if meta is None:  # reflected once per engine: a flow adds rows, not tables
        meta = _REFLECTED[engine] = MetaData()
        meta.reflect(engine)
    found: dict[str, list[str]] = {}
    with engine.connect() as conn:
        for name, table in sorted(meta.tables.items()):
            rows = [dict(row._mapping) for row in conn.execute(select(table))]
            found[name] = sorted(repr(sorted(row.items())) for row in rows if not skip(name, row))
    return found


_REFLECTED: weakref.WeakKeyDictionary[Engine, MetaData] = weakref.WeakKeyDictionary()


def _failure_rows(table: str, row: dict[str, Any]) -> bool:
    return table == AUDIT_TABLE and row.get("status") == "error"


#: The browser every matrix client claims to be (the session binds to it).
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0"


@dataclass
class FaultSite:
    """An app under a matrix: its faults, its SQL engine, fresh names and browser clients."""

    app: Flask
    faults: Faults
    numbers: Iterator[int] = field(default_factory=lambda: count(1))

    @property
    def engine(self) -> Any:
        backend = get_state(self.app).backend
        assert isinstance(backend, SqlAlchemyBackend)
        return backend.engine

    def client(self) -> FlaskClient:
        client = self.app.test_client()
        client.environ_base["HTTP_USER_AGENT"] = BROWSER
        return client
