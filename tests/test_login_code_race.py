"""20 parallel uses of one sign-in code: exactly one signs in (issue 31, point 1).

Every request of the asking browser's session reads the same code slot; the race is
decided by the store (the code's single-use record, in the step's unit of work), never by
a Python lock: on SQLite with threads, and on PostgreSQL with several processes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flask_authflow import signals
from flask_authflow._clock import MockClock
from flask_authflow._core.session import AuthSession, SessionRecord
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.errors import StoreBusy
from flask_authflow.login._lockout import LockoutPolicy
from flask_authflow.login._service import AuthnService
from flask_authflow.mfa._login_code import LoginCodeFactor
from flask_authflow.mfa._sealing import FactorSealer
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from tests.authn_support import CTX, FAST_HASHER, new_session
from tests.concurrency import run_together
from tests.parts import child_processes

KEY = bytes(range(96, 128))  # the same in every process
USES = 20
ADDRESS = "alice@example.com"
SPAWN = child_processes()


def make_service(backend: SqlAlchemyBackend, clock: MockClock) -> tuple[AuthnService, LoginCodeFactor]:
    service = AuthnService(
        backend,
        backend,
        hasher=FAST_HASHER,
        clock=clock,
        lockout=LockoutPolicy(max_failures=50),
        account_tokens=backend,
    )
    factor = LoginCodeFactor(FactorSealer.from_key(KEY), lambda: None)
    service.register_factor(factor)
    return service, factor


def asked(service: AuthnService, factor: LoginCodeFactor, clock: MockClock) -> tuple[SessionRecord, str]:
    """alice's browser asked for a code: its session, and the code of the mail."""
    session = new_session(clock)
    found = service.with_audit_context(CTX).request_login_code(ADDRESS, "acme", session, factor)
    assert found.to == ADDRESS
    return session.record, found.code


def use(service: AuthnService, record: SessionRecord, code: str) -> str:
    """One request of the session (its cookie) posting the code: the outcome's name."""
    session = AuthSession(record, new=False, request_fingerprint="fp")
    try:
        outcome = service.with_audit_context(CTX).verify_factor(
            FactorCredential(FactorKind.LOGIN_CODE, code), session
        )
    except StoreBusy:
        return "StoreBusy"
    return type(outcome).__name__


def successes(backend: SqlAlchemyBackend) -> int:
    rows = backend.audit_rows
    return sum(
        1 for r in rows if r.event == "factor_verify" and r.status == "success" and r.factor == "login_code"
    )


def new_backend(url: str, clock: MockClock, *, create: bool = True) -> SqlAlchemyBackend:
    return SqlAlchemyBackend(url, clock=clock, create_tables=create)


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SqlAlchemyBackend]:
    backend = new_backend(f"sqlite:///{tmp_path / 'codes.db'}", MockClock())
    backend.create_user("acme", "alice", email=ADDRESS, email_verified_at=datetime.now(UTC))
    yield backend
    backend.close()


def test_twenty_parallel_uses_of_one_code_on_sqlite_sign_in_once(sqlite: SqlAlchemyBackend) -> None:
    clock = sqlite.clock
    assert isinstance(clock, MockClock)
    service, factor = make_service(sqlite, clock)
    record, code = asked(service, factor, clock)
    announced: list[Any] = []

    def on_success(sender: Any, **extra: Any) -> None:
        announced.append(extra)

    signals.login_succeeded.connect(on_success)
    try:
        finished = run_together([lambda: use(service, record, code)] * USES)
    finally:
        signals.login_succeeded.disconnect(on_success)
    assert finished.count("Authenticated") == 1, finished
    assert set(finished) <= {"Authenticated", "InvalidCredential", "StoreBusy"}, finished
    assert successes(sqlite) == 1 and len(announced) == 1
    replays = [r for r in sqlite.audit_rows if r.factor == "login_code" and r.reason == "replayed"]
    assert replays, "the losers are audited as replays"


def _process_uses(url: str, records: list[SessionRecord], code: str, start: Any, out: Any) -> None:
    clock = MockClock()
    backend = new_backend(url, clock, create=False)
    service, _ = make_service(backend, clock)
    start.wait(30)
    try:
        finished = run_together([lambda r=r: use(service, r, code) for r in records])  # type: ignore[misc]
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        out.put(repr(exc))
    else:
        out.put(finished)
    backend.close()


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_twenty_uses_of_one_code_from_four_processes_on_postgresql_sign_in_once(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    clock = MockClock()
    backend = new_backend(url, clock)
    try:
        backend.create_user("acme", "alice", email=ADDRESS, email_verified_at=datetime.now(UTC))
        service, factor = make_service(backend, clock)
        record, code = asked(service, factor, clock)
        start, out = SPAWN.Event(), SPAWN.Queue()
        groups = [[record] * (USES // 4) for _ in range(4)]
        processes = [SPAWN.Process(target=_process_uses, args=(url, g, code, start, out)) for g in groups]
        for process in processes:
            process.start()
        time.sleep(2)  # every process imports and connects before the burst
        start.set()
        reports = [out.get(timeout=60) for _ in processes]
        for process in processes:
            process.join(30)
            assert process.exitcode == 0
        assert all(isinstance(r, list) for r in reports), reports
        finished = [name for names in reports for name in names]
        assert len(finished) == USES
        assert finished.count("Authenticated") == 1, finished
        assert set(finished) <= {"Authenticated", "InvalidCredential", "StoreBusy"}, finished
        assert successes(backend) == 1
    finally:
        backend.close()
