"""Behaviour every identity / factor / attempt / audit store must show (memory and SQL alike)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flask_authflow.audit.sinks import AuditRecord
from flask_authflow.authn.outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorRequired,
    InvalidCredential,
    Locked,
)
from flask_authflow.authn.service import AuthnService
from flask_authflow.authn.stores import AttemptKey, AttemptStore, AuditSink, FactorStore, IdentityStore
from flask_authflow.clock import MockClock
from flask_authflow.errors import InvalidInput, UserExists, UserNotFound
from tests.authn_support import CTX, new_session

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = {"window": timedelta(hours=1), "max_failures": 5, "lock_duration": timedelta(minutes=15)}


class StoreContract:
    """Mixed into a test class whose module provides ``backend`` and ``clock`` fixtures."""

    def test_implements_every_protocol(self, backend: Any) -> None:
        for protocol in (IdentityStore, FactorStore, AttemptStore, AuditSink):
            assert isinstance(backend, protocol)

    def test_users(self, backend: Any) -> None:
        alice = backend.create_user("acme", " Alice ", "pw")
        assert alice.identifier == "alice" and alice.tenant == "acme" and not alice.disabled
        assert alice.created_at.tzinfo is not None
        assert ":" not in alice.user_id
        assert backend.find_user("acme", "alice") == alice
        assert backend.find_user("globex", "alice") is None
        assert backend.get_user("acme", alice.user_id) == alice
        assert backend.get_user("globex", alice.user_id) is None
        with pytest.raises(UserExists):
            backend.create_user("acme", "ALICE", "other")
        other = backend.create_user("globex", "alice")
        assert other.user_id != alice.user_id
        assert [u.identifier for u in backend.list_users("acme")] == ["alice"]
        assert {(u.tenant, u.identifier) for u in backend.list_users()} == {
            ("acme", "alice"),
            ("globex", "alice"),
        }
        with pytest.raises(InvalidInput):
            backend.create_user("acme", "bad\x00name")

    def test_passwords(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice", "first")
        stored = backend.get_password_hash("acme", alice.user_id)
        assert stored is not None and stored.startswith("$argon2id$")
        assert backend.hasher.verify(stored, "first")
        assert backend.get_password_hash("globex", alice.user_id) is None
        backend.set_password("acme", "Alice", "second")
        stored2 = backend.get_password_hash("acme", alice.user_id)
        assert backend.hasher.verify(stored2, "second") and not backend.hasher.verify(stored2, "first")
        with pytest.raises(UserNotFound):
            backend.set_password("acme", "nobody", "x")
        nopw = backend.create_user("acme", "fed")
        assert backend.get_password_hash("acme", nopw.user_id) is None
        assert backend.required_factors("acme", nopw.user_id) == []
        backend.set_password_hash("acme", nopw.user_id, stored2)
        assert backend.get_password_hash("acme", nopw.user_id) == stored2

    def test_factor_order(self, backend: Any, clock: MockClock) -> None:
        user = backend.create_user("acme", "alice")
        clock.advance(1)
        backend.enroll_factor("acme", user.user_id, FactorKind.TOTP, "totp-secret")
        clock.advance(1)
        backend.set_password_hash("acme", user.user_id, backend.hasher.hash("pw"))
        assert backend.required_factors("acme", user.user_id) == [FactorKind.PASSWORD, FactorKind.TOTP]
        assert backend.required_factors("globex", user.user_id) == []
        configs = backend.list_factors("acme", user.user_id)
        assert {c.kind for c in configs} == {FactorKind.PASSWORD, FactorKind.TOTP}
        assert all("totp-secret" not in repr(c) and "$argon2" not in repr(c) for c in configs)
        with pytest.raises(UserNotFound):
            backend.enroll_factor("globex", user.user_id, FactorKind.TOTP, "x")

    def test_failure_counting_and_lock(self, backend: Any) -> None:
        key = AttemptKey("acme", "alice", "password")
        results = [backend.register_failure(key, now=T0 + timedelta(seconds=i), **WINDOW) for i in range(5)]
        assert [r.failures for r in results] == [1, 2, 3, 4, 5]
        until = T0 + timedelta(seconds=4, minutes=15)
        assert [r.locked_until for r in results] == [None] * 4 + [until]
        assert backend.locked_until("acme", "alice", T0) == until
        assert backend.locked_until("acme", "alice", until) is None
        assert backend.locked_until("globex", "alice", T0) is None
        assert backend.locked_until("acme", "bob", T0) is None
        # Counting restarts after a lock.
        assert backend.register_failure(key, now=until, **WINDOW).failures == 1

    def test_window_restarts(self, backend: Any) -> None:
        key = AttemptKey("acme", "alice", "password")
        for _ in range(4):
            backend.register_failure(key, now=T0, **WINDOW)
        later = T0 + timedelta(hours=1)
        assert backend.register_failure(key, now=later, **WINDOW).failures == 1
        assert backend.register_failure(key, now=later, **WINDOW).failures == 2

    def test_factors_count_separately_and_lock_the_subject(self, backend: Any) -> None:
        pw = AttemptKey("acme", "alice", "password")
        totp = AttemptKey("acme", "alice", "totp")
        for _ in range(4):
            backend.register_failure(pw, now=T0, **WINDOW)
        assert backend.register_failure(totp, now=T0, **WINDOW).failures == 1
        for _ in range(4):
            backend.register_failure(totp, now=T0, **WINDOW)
        assert backend.locked_until("acme", "alice", T0) == T0 + timedelta(minutes=15)

    def test_success_resets_and_clear_lock(self, backend: Any) -> None:
        key = AttemptKey("acme", "alice", "password")
        for _ in range(4):
            backend.register_failure(key, now=T0, **WINDOW)
        backend.register_success(key, now=T0, client_ip="203.0.113.1")
        assert backend.register_failure(key, now=T0, **WINDOW).failures == 1
        backend.set_lock(key, T0 + timedelta(hours=2))
        assert backend.locked_until("acme", "alice", T0) == T0 + timedelta(hours=2)
        backend.clear_lock("acme", "alice")
        assert backend.locked_until("acme", "alice", T0) is None
        assert backend.register_failure(key, now=T0, **WINDOW).failures == 1

    def test_delete_user_removes_factors_counters_and_reservations(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice", "pw")
        bob = backend.create_user("acme", "bob", "pw")
        key = AttemptKey("acme", "alice", "password")
        backend.write(
            AuditRecord(time=T0, event="login", status="success", tenant="acme", user_id=alice.user_id)
        )
        backend.register_failure(key, now=T0, **WINDOW)
        for _ in range(4):  # in flight: 5 of 5 used
            assert backend.reserve_attempt(key, now=T0, **WINDOW).granted
        assert not backend.reserve_attempt(key, now=T0, **WINDOW).granted
        backend.register_failure(AttemptKey("acme", "bob", "password"), now=T0, **WINDOW)
        assert backend.delete_user("acme", " ALICE ") == alice
        assert backend.find_user("acme", "alice") is None
        assert backend.get_user("acme", alice.user_id) is None
        assert backend.get_password_hash("acme", alice.user_id) is None
        with pytest.raises(UserNotFound):
            backend.delete_user("acme", "alice")
        # A new account under the same name inherits no counter and no reservation.
        backend.create_user("acme", "alice", "pw")
        assert all(backend.reserve_attempt(key, now=T0, **WINDOW).granted for _ in range(5))
        # Other users and the audit trail are untouched.
        assert backend.find_user("acme", "bob") == bob
        assert backend.register_failure(AttemptKey("acme", "bob", "password"), now=T0, **WINDOW).failures == 2
        assert [r.user_id for r in backend.audit_rows] == [alice.user_id]

    def test_audit_roundtrip(self, backend: Any) -> None:
        row = AuditRecord(
            time=T0,
            event="factor_verify",
            status="failure",
            tenant="acme",
            user_id=None,
            identifier="alice",
            session_id="ab" * 32,
            factor="password",
            client_ip="2001:db8::1",
            ip_source="forwarded",
            user_agent="ua",
            request_id="rid",
            reason="invalid_credential",
        )
        backend.write(row)
        assert backend.audit_rows == [row]

    def test_service_on_this_backend(self, backend: Any, clock: MockClock) -> None:
        backend.with_user_password("Alice", "acme", "correct horse")
        service = AuthnService(backend, backend, clock=clock)
        handle = service.with_audit_context(CTX)
        user = backend.find_user("acme", "alice")

        def attempt(who: str, tenant: str, password: str) -> Any:
            session = new_session(clock)
            first = handle.begin_login(who, tenant, session)
            if first != FactorRequired(FactorKind.PASSWORD):
                return first
            return handle.verify_factor(FactorCredential.password(password), session)

        assert attempt("ALICE", "acme", "correct horse") == Authenticated(user.user_id, "acme")
        assert attempt("alice", "acme", "wrong") == InvalidCredential()
        assert attempt("nobody", "acme", "wrong") == InvalidCredential()
        assert attempt("alice", "globex", "correct horse") == InvalidCredential()
        for _ in range(3):
            attempt("alice", "acme", "wrong")
        locked = attempt("alice", "acme", "wrong")
        assert locked == Locked(clock.now() + timedelta(minutes=15))
        assert attempt("alice", "acme", "correct horse") == locked
        for _ in range(5):
            last = attempt("nobody", "acme", "wrong")
        assert last == locked  # unknown identifiers lock the same way
        clock.advance(timedelta(minutes=15))
        assert isinstance(attempt("alice", "acme", "correct horse"), Authenticated)
        rows = backend.audit_rows
        assert rows[0].user_id == user.user_id and rows[0].tenant == "acme"
        assert {r.status for r in rows} == {"started", "success", "failure", "locked"}
        assert all(r.user_id is None for r in rows if r.identifier == "nobody")
