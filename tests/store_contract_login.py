"""The store contract of the login store as a whole: its one read, its unit of work, a login.

Mixed into a test class whose module gives ``backend`` and ``clock`` fixtures
(tests/test_store_contracts.py runs it on every adapter).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.ports import AttemptKey, LoginStore
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorRequired,
    InvalidCredential,
    Locked,
)
from flask_authflow.login._service import AuthnService
from flask_authflow.testing._users import add_user
from tests.authn_support import CTX, FAST_HASHER, new_session
from tests.protocols import missing_members
from tests.store_contract import WINDOW, AuditRecord, factor


class LoginStoreContract:
    """What a login step needs of the backend as a whole (``LoginStore``, ``BackendMaintenance``):
    its one read of the facts, its unit of work (all or nothing), and a whole login on it."""

    def test_implements_the_port(self, backend: Any) -> None:
        assert missing_members(backend, LoginStore) == []

    def test_login_facts_answer_the_three_reads_they_replace(self, backend: Any, clock: MockClock) -> None:
        """begin_login's one read agrees with find_user, required_factors and locked_until."""
        alice = add_user(backend, "acme", "alice", "pw")
        backend.add_factor("acme", factor(alice.user_id, "t1", FactorKind.TOTP, confirmed=True))
        backend.add_factor("acme", factor(alice.user_id, "h1", FactorKind.HOTP))  # pending: not a step
        backend.add_factor("acme", factor(alice.user_id, "t2", FactorKind.TOTP, confirmed=True))
        backend.create_user("acme", "bob")  # no password, no factor
        add_user(backend, "globex", "carol", "pw")
        backend.set_disabled("globex", "carol")
        backend.set_lock(AttemptKey("acme", "alice", "totp"), clock.now() + timedelta(minutes=5))
        backend.set_lock(AttemptKey("acme", "nobody", "password"), clock.now() + timedelta(minutes=9))
        backend.set_lock(AttemptKey("acme", "bob", "password"), clock.now() - timedelta(minutes=1))  # over
        for tenant, identifier in [
            ("acme", "alice"),
            ("acme", "bob"),
            ("acme", "nobody"),
            ("globex", "alice"),
            ("globex", "carol"),
        ]:
            facts = backend.login_facts(tenant, identifier, clock.now())
            user = backend.find_user(tenant, identifier)
            assert facts.user == user
            assert facts.kinds == (backend.required_factors(tenant, user.user_id) if user is not None else [])
            assert facts.locked_until == backend.locked_until(tenant, identifier, clock.now())
        facts = backend.login_facts("acme", "alice", clock.now())
        assert facts.kinds == [FactorKind.PASSWORD, FactorKind.TOTP]
        assert facts.locked_until == clock.now() + timedelta(minutes=5)
        assert backend.login_facts("globex", "carol", clock.now()).user.disabled

    def _unit_writes(self, backend: Any, clock: MockClock, uid: str) -> None:
        """One of each write a login step makes in its unit: a failure counted, an audit row,
        a one-time token used, a factor's secret swapped, a reservation settled."""
        key = AttemptKey("acme", "alice", "recovery_code")
        token = backend.reserve_attempt(key, now=clock.now(), **WINDOW).token
        assert token is not None
        backend.register_failure(key, now=clock.now(), reservation=token, **WINDOW)
        backend.write(AuditRecord(time=clock.now(), event="factor_verify", status="failure"))
        assert backend.use_once("login", "txn-1", expires_at=clock.now() + timedelta(minutes=5))
        assert backend.swap_factor_secret(
            "acme", uid, "codes", expected_counter=0, secret="v1", now=clock.now()
        )

    def test_a_unit_commits_its_writes_together(self, backend: Any, clock: MockClock) -> None:
        uid = backend.create_user("acme", "alice").user_id
        backend.add_factor(
            "acme", factor(uid, "codes", FactorKind.RECOVERY_CODE, confirmed=True, secret="v0")
        )
        unit = backend.begin_unit()
        self._unit_writes(backend, clock, uid)
        unit.commit()
        assert [r.event for r in backend.audit_rows] == ["factor_verify"]
        assert backend.get_factor("acme", uid, "codes").secret == "v1"
        assert not backend.use_once("login", "txn-1", expires_at=clock.now() + timedelta(minutes=5))
        # One failure counted and the reservation settled: four more reservations, no fifth.
        key = AttemptKey("acme", "alice", "recovery_code")
        granted = [backend.reserve_attempt(key, now=clock.now(), **WINDOW).granted for _ in range(5)]
        assert granted == [True, True, True, True, False]

    def test_a_unit_rolled_back_keeps_nothing(self, backend: Any, clock: MockClock) -> None:
        uid = backend.create_user("acme", "alice").user_id
        backend.add_factor(
            "acme", factor(uid, "codes", FactorKind.RECOVERY_CODE, confirmed=True, secret="v0")
        )
        backend.write(AuditRecord(time=clock.now(), event="login_begin", status="started"))
        unit = backend.begin_unit()
        self._unit_writes(backend, clock, uid)
        unit.rollback()
        assert [r.event for r in backend.audit_rows] == ["login_begin"]
        stored = backend.get_factor("acme", uid, "codes")
        assert (stored.secret, stored.counter) == ("v0", 0)
        assert backend.use_once("login", "txn-1", expires_at=clock.now() + timedelta(minutes=5))
        # Neither the failure nor the reservation is left: five fresh reservations.
        key = AttemptKey("acme", "alice", "recovery_code")
        granted = [backend.reserve_attempt(key, now=clock.now(), **WINDOW).granted for _ in range(6)]
        assert granted == [True, True, True, True, True, False]

    def test_units_do_not_nest_and_end_once(self, backend: Any, clock: MockClock) -> None:
        unit = backend.begin_unit()
        with pytest.raises(RuntimeError):
            backend.begin_unit()
        backend.write(AuditRecord(time=clock.now(), event="logout", status="success"))
        unit.rollback()
        unit.rollback()  # a second end changes nothing
        again = backend.begin_unit()  # the first one is over
        backend.write(AuditRecord(time=clock.now(), event="login_begin", status="started"))
        again.commit()
        assert [r.event for r in backend.audit_rows] == ["login_begin"]

    def test_service_on_this_backend(self, backend: Any, clock: MockClock) -> None:
        add_user(backend, "acme", "Alice", "correct horse")
        service = AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend)
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

    def test_maintenance_members(self, backend: Any) -> None:
        assert backend.bind_app(object()) is backend  # no Flask-SQLAlchemy db: the backend itself
        engine = backend.database_engine()
        assert engine is None or engine is backend.engine
