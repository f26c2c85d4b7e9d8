"""The one template of a login step (``login.operation.Operation``), on its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from flask_authflow import signals
from flask_authflow._clock import MockClock
from flask_authflow._core.ports import AttemptKey
from flask_authflow._core.session import AuthSession, fail_login, start_login
from flask_authflow.errors import AuditWriteError, LoginNotStarted, StoreUnavailable
from flask_authflow.login._operation import Operation
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._memory import InMemoryBackend
from tests.authn_support import CTX, FAST_HASHER, new_session
from tests.store_contract import WINDOW


@pytest.fixture
def env() -> tuple[AuthnService, InMemoryBackend, MockClock]:
    clock = MockClock()
    backend = InMemoryBackend(clock=clock)
    return (
        AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend),
        backend,
        clock,
    )


@pytest.fixture
def failures() -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def receive(sender: object, **kwargs: Any) -> None:
        seen.append(kwargs)

    signals.login_failed.connect(receive)
    yield seen
    signals.login_failed.disconnect(receive)


def _start(session: AuthSession, clock: MockClock) -> None:
    session.transition(
        lambda r: start_login(r, tenant="acme", user_id="u1", factors=["password"], now=clock.now())
    )


KEY = AttemptKey("acme", "alice", "password")


def test_a_clean_step_writes_its_rows_then_counts_and_signals(
    env: tuple[AuthnService, InMemoryBackend, MockClock], failures: list[dict[str, Any]]
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    with Operation(service, CTX, session, "factor_verify", tenant="acme", factor="password") as op:
        _start(session, clock)
        op.unit()
        backend.register_failure(KEY, now=clock.now(), **WINDOW)
        op.audit("failure", "invalid_credential")
        op.count("login_failures")
        op.signal("login_failed", tenant="acme", identifier="alice", reason="invalid_credential")
        assert failures == [] and service.counters.snapshot()["login_failures"] == 0  # not yet
    (row,) = backend.audit_rows
    assert (row.event, row.status, row.tenant, row.factor, row.reason) == (
        "factor_verify", "failure", "acme", "password", "invalid_credential",
    )  # fmt: skip
    assert row.request_id == CTX.request_id and session.is_authenticating
    assert service.counters.snapshot()["login_failures"] == 1 and len(failures) == 1
    assert [e.success for e in backend.attempt_log if e.subject == "alice"] == [False]


def test_a_store_failure_undoes_the_step_and_is_recorded(
    env: tuple[AuthnService, InMemoryBackend, MockClock], failures: list[dict[str, Any]]
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    before = session.snapshot()
    with (
        pytest.raises(StoreUnavailable),
        Operation(service, CTX, session, "factor_verify", tenant="acme") as op,
    ):
        _start(session, clock)
        op.unit()
        backend.register_failure(KEY, now=clock.now(), **WINDOW)
        op.count("login_failures")
        op.signal("login_failed", tenant="acme", identifier="alice", reason="invalid_credential")
        raise StoreUnavailable("the attempt store failed")
    assert session.snapshot() == before and session.is_guest
    assert backend.attempt_log == []  # the unit was rolled back
    assert [(r.status, r.reason, r.tenant) for r in backend.audit_rows] == [
        ("error", "store_unavailable", "acme")
    ]
    assert failures == [] and service.counters.snapshot()["login_failures"] == 0


def test_a_failed_audit_write_keeps_nothing(
    env: tuple[AuthnService, InMemoryBackend, MockClock], failures: list[dict[str, Any]]
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    before = session.snapshot()
    backend.fail_next_write()
    with pytest.raises(AuditWriteError), Operation(service, CTX, session, "login_begin") as op:
        _start(session, clock)
        op.unit()
        backend.register_success(KEY, now=clock.now())
        op.audit("started")
        op.signal("login_failed", tenant="acme", identifier="alice", reason="locked")
    assert session.snapshot() == before
    assert backend.attempt_log == [] and backend.audit_rows == [] and failures == []


def test_a_recount_runs_when_the_unit_did_not_commit(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    backend.fail_next_write()
    with pytest.raises(AuditWriteError), Operation(service, CTX, session, "factor_verify") as op:
        op.unit()
        backend.register_failure(KEY, now=clock.now(), **WINDOW)
        op.recount_with(lambda: backend.register_failure(KEY, now=clock.now(), **WINDOW))
        op.audit("failure")
    assert [e.success for e in backend.attempt_log if e.subject == "alice"] == [
        False
    ]  # counted once, on its own


def test_a_reservation_not_handed_off_is_given_back(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    with pytest.raises(ValueError, match="crashed"), Operation(service, CTX, session, "factor_verify") as op:
        assert op.reserve("acme", "alice", "password") is None
        raise ValueError("the verifier crashed")
    granted = [backend.reserve_attempt(KEY, now=clock.now(), **WINDOW).granted for _ in range(6)]
    assert granted == [True, True, True, True, True, False]  # nothing left reserved


def test_a_handed_off_reservation_is_not_released(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    with Operation(service, CTX, session, "factor_verify") as op:
        assert op.reserve("acme", "alice", "password") is None
        token = op.hand_off()
        assert token is not None and op.hand_off() is None
    # Still in flight (the settlement took it over): four more, not five.
    granted = [backend.reserve_attempt(KEY, now=clock.now(), **WINDOW).granted for _ in range(5)]
    assert granted == [True, True, True, True, False]


def test_a_locked_subject_gets_the_end_of_its_lock(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    until = clock.now() + service.policy.lock_duration
    backend.set_lock(KEY, until)
    with Operation(service, CTX, new_session(clock), "factor_verify") as op:
        assert op.reserve("acme", "alice", "password") == until
        assert op.hand_off() is None


def test_other_errors_drop_the_unit_and_propagate(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    with pytest.raises(LoginNotStarted), Operation(service, CTX, session, "challenge") as op:
        op.unit()
        backend.register_failure(KEY, now=clock.now(), **WINDOW)
        raise LoginNotStarted("no step")
    assert backend.attempt_log == [] and backend.audit_rows == []
    unit = backend.begin_unit()  # the store's lock was released
    unit.rollback()


def test_refuse_on_records_and_undoes_the_listed_errors(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    _start(session, clock)
    before = session.snapshot()
    refuse_on = (LoginNotStarted,)
    with (
        pytest.raises(LoginNotStarted),
        Operation(service, CTX, session, "x", refuse_on=refuse_on, factor="f"),
    ):
        session.transition(lambda r: fail_login(r, now=clock.now()))
        raise LoginNotStarted("the mail server is down")
    assert session.snapshot() == before
    assert [(r.event, r.status, r.reason, r.factor) for r in backend.audit_rows] == [
        ("x", "error", "login_not_started", "f")
    ]


def test_a_unit_already_open_is_joined(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    outer = backend.begin_unit()
    with Operation(service, CTX, new_session(clock), "factor_verify") as op:
        op.unit()  # joins the application's unit instead of failing
        op.audit("success")
    assert len(backend.audit_rows) == 1
    outer.rollback()  # the outer unit decides
    assert backend.audit_rows == []
