"""Behaviour every identity / factor / attempt / audit store must show (memory and SQL alike)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flask_authflow.audit.sinks import AuditRecord
from flask_authflow.clock import MockClock
from flask_authflow.core.ports import (
    AttemptKey,
    AttemptStore,
    AuditSink,
    DeviceRecord,
    DeviceStore,
    FactorConfig,
    FactorRecordStore,
    FactorStore,
    IdentityStore,
    LoginStore,
    Role,
    RoleStore,
)
from flask_authflow.errors import InvalidInput, RoleExists, RoleInUse, RoleNotFound, UserExists, UserNotFound
from flask_authflow.login.service import AuthnService
from flask_authflow.outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorRequired,
    InvalidCredential,
    Locked,
)
from flask_authflow.testing.users import add_user
from tests.authn_support import CTX, FAST_HASHER, new_session
from tests.protocols import missing_members

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = {"window": timedelta(hours=1), "max_failures": 5, "lock_duration": timedelta(minutes=15)}
RACERS = 8


def factor(
    user_id: str,
    factor_id: str,
    kind: FactorKind = FactorKind.TOTP,
    *,
    confirmed: bool = False,
    lookup: str | None = None,
    counter: int = 0,
    secret: str = "sealed-key",
    created_at: datetime = T0,
    data: dict[str, Any] | None = None,
) -> FactorConfig:
    """A factor record as an enrollment adds it (pending unless ``confirmed``)."""
    return FactorConfig(
        user_id=user_id,
        kind=kind,
        created_at=created_at,
        secret=secret,
        factor_id=factor_id,
        counter=counter,
        data=data if data is not None else {"label": factor_id},
        lookup=lookup,
        confirmed=confirmed,
    )


def race(count: int, call: Callable[[int], bool]) -> list[bool]:
    """Run ``call(i)`` in ``count`` threads released together; their results (errors re-raised)."""
    barrier = threading.Barrier(count)
    results: list[bool | None] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(30)
            results[index] = call(index)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]
    assert all(isinstance(result, bool) for result in results)
    return [bool(result) for result in results]


class StoreContract:
    """Mixed into a test class whose module provides ``backend`` and ``clock`` fixtures."""

    def test_implements_every_protocol(self, backend: Any) -> None:
        protocols = (IdentityStore, FactorStore, AttemptStore, AuditSink, LoginStore, RoleStore, DeviceStore)
        for protocol in protocols:
            assert missing_members(backend, protocol) == []

    # --- the one-read login facts and the unit of work (LoginStore) ---------------------------

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

    def test_users(self, backend: Any) -> None:
        alice = add_user(backend, "acme", " Alice ", "pw")
        assert alice.identifier == "alice" and alice.tenant == "acme" and not alice.disabled
        assert alice.created_at.tzinfo is not None
        assert ":" not in alice.user_id
        assert backend.find_user("acme", "alice") == alice
        assert backend.find_user("globex", "alice") is None
        assert backend.get_user("acme", alice.user_id) == alice
        assert backend.get_user("globex", alice.user_id) is None
        with pytest.raises(UserExists):
            add_user(backend, "acme", "ALICE", "other")
        other = backend.create_user("globex", "alice")
        assert other.user_id != alice.user_id
        assert [u.identifier for u in backend.list_users("acme")] == ["alice"]
        assert {(u.tenant, u.identifier) for u in backend.list_users()} == {
            ("acme", "alice"),
            ("globex", "alice"),
        }
        with pytest.raises(InvalidInput):
            backend.create_user("acme", "bad\x00name")

    def test_emails(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice", email=" Alice@Example.COM ")
        assert (alice.email, alice.email_verified_at) == ("alice@example.com", None)
        assert backend.find_user_by_email("acme", "Alice@EXAMPLE.com") == alice
        assert backend.find_user_by_email("acme", "ALICE@example.com") == alice  # the local part too
        assert backend.find_user_by_email("acme", "\uff41lice@example.com") is None  # no folding to ASCII
        assert backend.find_user_by_email("globex", "Alice@example.com") is None
        for variant in ("Alice@example.com", "aLiCe@EXAMPLE.COM"):
            with pytest.raises(UserExists):
                backend.create_user("acme", "alice2", email=variant)
        assert backend.find_user("acme", "alice2") is None
        bob = backend.create_user("acme", "bob")
        with pytest.raises(UserExists):  # another user's address, in another case
            backend.set_email("acme", bob.user_id, "ALICE@example.com", verified_at=None)
        moved = backend.set_email("acme", alice.user_id, "new@example.com", verified_at=T0)
        assert (moved.email, moved.email_verified_at) == ("new@example.com", T0)
        assert backend.get_user("acme", alice.user_id) == moved == backend.find_user("acme", "alice")
        assert backend.find_user_by_email("acme", "Alice@example.com") is None
        backend.set_email("acme", bob.user_id, "Alice@example.com", verified_at=None)  # free again
        with pytest.raises(UserNotFound):  # a user of another tenant is not found
            backend.set_email("globex", alice.user_id, "x@example.com", verified_at=None)
        for bad in (
            "no-at",
            "two@@example.com",
            "a b@example.com",
            "@example.com",
            "a@",
            "x" * 250 + "@e.com",
        ):
            with pytest.raises(InvalidInput):
                backend.create_user("acme", "carol", email=bad)
        assert backend.find_user("acme", "carol") is None

    def test_passwords(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "first")
        stored = backend.get_password_hash("acme", alice.user_id)
        assert stored is not None and stored.startswith("$argon2id$")
        assert FAST_HASHER.verify(stored, "first")
        assert backend.get_password_hash("globex", alice.user_id) is None
        backend.set_password_hash("acme", alice.user_id, FAST_HASHER.hash("second"))
        stored2 = backend.get_password_hash("acme", alice.user_id)
        assert FAST_HASHER.verify(stored2, "second") and not FAST_HASHER.verify(stored2, "first")
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
        backend.set_password_hash("acme", user.user_id, FAST_HASHER.hash("pw"))
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

    def test_clear_lock_ends_the_locks_of_the_subjects_address_pairs_too(self, backend: Any) -> None:
        pair = AttemptKey("acme", "alice\x1f@203.0.113.9", "password")
        lookalike = AttemptKey("acme", "alice2\x1f@203.0.113.9", "password")
        for key in (pair, lookalike):
            backend.set_lock(key, T0 + timedelta(hours=1))
        backend.clear_lock("acme", "alice")
        assert backend.locked_until("acme", pair.subject, T0) is None
        assert backend.locked_until("acme", lookalike.subject, T0) == T0 + timedelta(hours=1)

    def test_failures_since_success_count_back_to_the_keys_last_success(self, backend: Any) -> None:
        key = AttemptKey("acme", "alice", "totp")
        other = AttemptKey("acme", "alice", "password")
        for minute in range(3):
            backend.register_failure(key, now=T0 + timedelta(minutes=minute), **WINDOW)
        backend.register_success(other, now=T0 + timedelta(minutes=4))  # another factor: no reset
        assert backend.failures_since_success(key, since=T0 - timedelta(days=1)) == 3
        assert backend.failures_since_success(key, since=T0) == 2  # only rows after ``since``
        backend.register_success(key, now=T0 + timedelta(minutes=5))
        backend.register_failure(key, now=T0 + timedelta(minutes=6), **WINDOW)
        assert backend.failures_since_success(key, since=T0 - timedelta(days=1)) == 1
        assert backend.failures_since_success(AttemptKey("acme", "bob", "totp"), since=T0) == 0

    def test_a_success_is_settled_unless_a_lock_is_active(self, backend: Any) -> None:
        """Without a lock: logged, counter reset, reservation settled. With a lock on any factor
        of the subject: only the reservation is given back, and the lock's end answered."""
        key = AttemptKey("acme", "alice", "password")
        for _ in range(3):
            backend.register_failure(key, now=T0, **WINDOW)
        token = backend.reserve_attempt(key, now=T0, **WINDOW).token
        assert token is not None
        assert backend.register_success_unless_locked(key, now=T0, reservation=token) is None
        assert backend.register_failure(key, now=T0, **WINDOW).failures == 1  # reset
        token = backend.reserve_attempt(key, now=T0, **WINDOW).token
        until = T0 + timedelta(minutes=15)
        backend.set_lock(AttemptKey("acme", "alice", "totp"), until)
        assert backend.register_success_unless_locked(key, now=T0, reservation=token) == until
        assert backend.register_failure(key, now=T0, **WINDOW).failures == 2  # nothing reset
        backend.clear_lock("acme", "alice")
        # The reservation was given back: five fresh ones are granted.
        assert all(backend.reserve_attempt(key, now=T0, **WINDOW).granted for _ in range(5))

    def test_delete_user_removes_factors_counters_and_reservations(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        bob = add_user(backend, "acme", "bob", "pw")
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
        add_user(backend, "acme", "alice", "pw")
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

    def test_purge_audit_deletes_the_rows_written_before_the_cutoff(self, backend: Any) -> None:
        def row(minutes: int) -> AuditRecord:
            return AuditRecord(time=T0 + timedelta(minutes=minutes), event=f"e{minutes}", status="success")

        for minutes in (0, 5, 10):
            backend.write(row(minutes))
        assert backend.purge_audit(T0 + timedelta(minutes=5)) == 1  # strictly before the cutoff
        assert [r.event for r in backend.audit_rows] == ["e5", "e10"]
        assert backend.purge_audit(T0) == 0
        assert backend.purge_audit(T0 + timedelta(hours=1)) == 2
        assert backend.audit_rows == []

    def test_maintenance_members(self, backend: Any) -> None:
        assert backend.bind_app(object()) is backend  # no Flask-SQLAlchemy db: the backend itself
        engine = backend.database_engine()
        assert engine is None or engine is backend.engine

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

    # --- factor records (FactorRecordStore) ---------------------------------------------------

    def test_implements_the_factor_record_store(self, backend: Any) -> None:
        assert missing_members(backend, FactorRecordStore) == []

    def test_add_get_and_list_factors(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        uid = alice.user_id
        later = factor(uid, "f-later", created_at=T0 + timedelta(seconds=2), counter=7)
        earlier = factor(uid, "f-earlier", FactorKind.WEBAUTHN, created_at=T0 + timedelta(seconds=1))
        backend.add_factor("acme", later)
        backend.add_factor("acme", earlier)
        assert backend.get_factor("acme", uid, "f-later") == later  # every field as given
        assert backend.get_factor("acme", uid, "f-missing") is None
        # Pending factors are found by id and on request only; never used for a login.
        assert [c.kind for c in backend.list_user_factors("acme", uid)] == [FactorKind.PASSWORD]
        assert [c.factor_id for c in backend.list_user_factors("acme", uid, include_pending=True)][1:] == [
            "f-earlier",
            "f-later",
        ]
        assert backend.list_user_factors("acme", uid, kind=FactorKind.TOTP) == []
        assert backend.list_user_factors("acme", uid, kind=FactorKind.TOTP, include_pending=True) == [later]
        assert [c.kind for c in backend.list_factors("acme", uid)] == [FactorKind.PASSWORD]
        assert backend.required_factors("acme", uid) == [FactorKind.PASSWORD]

        assert backend.confirm_factor("acme", uid, "f-later", replace_kind=False)
        assert backend.get_factor("acme", uid, "f-later").confirmed
        assert backend.list_user_factors("acme", uid, kind=FactorKind.TOTP) == [
            factor(uid, "f-later", created_at=T0 + timedelta(seconds=2), counter=7, confirmed=True)
        ]
        assert backend.required_factors("acme", uid) == [FactorKind.PASSWORD, FactorKind.TOTP]
        assert backend.confirm_factor("acme", uid, "f-earlier", replace_kind=False)
        # Distinct kinds, password first, then in enrollment order (oldest first).
        assert backend.required_factors("acme", uid) == [
            FactorKind.PASSWORD,
            FactorKind.WEBAUTHN,
            FactorKind.TOTP,
        ]
        listed = backend.list_factors("acme", uid)
        assert [c.factor_id for c in listed][1:] == ["f-earlier", "f-later"]
        password = listed[0]
        assert password.kind is FactorKind.PASSWORD and password.confirmed and password.factor_id

    def test_add_factor_refusals(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        bob = backend.create_user("globex", "bob")
        backend.add_factor("acme", factor(alice.user_id, "taken", FactorKind.WEBAUTHN, lookup="cred-1"))
        with pytest.raises(UserNotFound):  # alice is not in globex
            backend.add_factor("globex", factor(alice.user_id, "f-1"))
        with pytest.raises(UserNotFound):
            backend.add_factor("acme", factor("no-such-user", "f-2"))
        with pytest.raises(ValueError):  # factor ids are unique across users and tenants
            backend.add_factor("globex", factor(bob.user_id, "taken"))
        with pytest.raises(ValueError):
            backend.add_factor("acme", factor(alice.user_id, ""))
        with pytest.raises(ValueError):
            backend.add_factor("acme", factor(alice.user_id, "x" * 65))
        with pytest.raises(ValueError):  # (kind, lookup) is unique across the store
            backend.add_factor("globex", factor(bob.user_id, "f-3", FactorKind.WEBAUTHN, lookup="cred-1"))
        with pytest.raises(ValueError):  # data must be JSON
            backend.add_factor("acme", factor(alice.user_id, "f-4", data={"when": T0}))
        with pytest.raises(ValueError):  # one password per user
            backend.add_factor("acme", factor(alice.user_id, "f-5", FactorKind.PASSWORD))
        assert backend.get_factor("globex", bob.user_id, "taken") is None
        assert [c.factor_id for c in backend.list_user_factors("acme", alice.user_id, include_pending=True)][
            1:
        ] == ["taken"]
        assert backend.list_user_factors("globex", bob.user_id, include_pending=True) == []
        # Accepted: the same lookup for another kind, no lookup twice, the longest id.
        backend.add_factor("globex", factor(bob.user_id, "f-6", FactorKind.HOTP, lookup="cred-1"))
        backend.add_factor("globex", factor(bob.user_id, "f-7"))
        backend.add_factor("globex", factor(bob.user_id, "y" * 64, FactorKind.WEBAUTHN))
        assert len(backend.list_user_factors("globex", bob.user_id, include_pending=True)) == 3

    def test_factor_records_are_tenant_scoped(self, backend: Any, clock: MockClock) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        bob = add_user(backend, "acme", "bob", "pw")
        uid = alice.user_id
        backend.add_factor("acme", factor(uid, "live", FactorKind.WEBAUTHN, lookup="cred-1", confirmed=True))
        backend.add_factor("acme", factor(uid, "pending"))
        before = backend.list_user_factors("acme", uid, include_pending=True)
        # Another tenant (alice's id, globex) and another user of the tenant (bob's id).
        for tenant, user_id in (("globex", uid), ("acme", bob.user_id)):
            assert backend.get_factor(tenant, user_id, "live") is None
            assert backend.list_user_factors(tenant, user_id, include_pending=True) == (
                [] if tenant == "globex" else backend.list_user_factors("acme", bob.user_id)
            )
            assert not backend.confirm_factor(tenant, user_id, "pending", replace_kind=True)
            assert not backend.delete_factor(tenant, user_id, "live")
            assert not backend.advance_factor_counter(tenant, user_id, "live", 10, now=clock.now())
            assert not backend.swap_factor_secret(
                tenant, user_id, "live", expected_counter=0, secret="stolen", now=clock.now()
            )
        assert backend.list_factors("globex", uid) == []
        assert backend.required_factors("globex", uid) == []
        assert backend.get_password_hash("globex", uid) is None
        assert backend.find_factor_by_lookup("globex", FactorKind.WEBAUTHN, "cred-1") is None
        assert backend.find_factor_by_lookup("acme", FactorKind.WEBAUTHN, "cred-1").factor_id == "live"
        assert backend.list_user_factors("acme", uid, include_pending=True) == before  # nothing changed
        with pytest.raises(UserNotFound):
            backend.enroll_factor("globex", uid, FactorKind.TOTP, "x")

    def test_confirm_factor(self, backend: Any) -> None:
        uid = add_user(backend, "acme", "alice", "pw").user_id
        backend.add_factor("acme", factor(uid, "old", confirmed=True))
        backend.add_factor("acme", factor(uid, "a"))
        assert backend.confirm_factor("acme", uid, "a", replace_kind=False)
        backend.add_factor("acme", factor(uid, "b"))
        backend.add_factor("acme", factor(uid, "key", FactorKind.WEBAUTHN, confirmed=True))
        totp = backend.list_user_factors("acme", uid, kind=FactorKind.TOTP)
        assert [c.factor_id for c in totp] == ["old", "a"]  # both confirmed: nothing replaced
        assert not backend.confirm_factor("acme", uid, "a", replace_kind=True)  # confirmed already
        assert not backend.confirm_factor("acme", uid, "missing", replace_kind=True)
        assert [c.factor_id for c in backend.list_user_factors("acme", uid, include_pending=True)][1:] == [
            "old",
            "a",
            "b",
            "key",
        ]
        # Replacing the kind deletes the user's other factors of it.
        assert backend.confirm_factor("acme", uid, "b", replace_kind=True)
        remaining = backend.list_user_factors("acme", uid, include_pending=True)
        assert [(c.kind, c.factor_id, c.confirmed) for c in remaining] == [
            (FactorKind.PASSWORD, remaining[0].factor_id, True),
            (FactorKind.TOTP, "b", True),
            (FactorKind.WEBAUTHN, "key", True),
        ]
        assert backend.get_factor("acme", uid, "a") is None

    def test_delete_factor(self, backend: Any) -> None:
        uid = add_user(backend, "acme", "alice", "pw").user_id
        backend.add_factor("acme", factor(uid, "key", FactorKind.WEBAUTHN, lookup="cred-1", confirmed=True))
        backend.add_factor("acme", factor(uid, "pending"))
        assert backend.delete_factor("acme", uid, "key")
        assert not backend.delete_factor("acme", uid, "key")
        assert backend.get_factor("acme", uid, "key") is None
        assert backend.find_factor_by_lookup("acme", FactorKind.WEBAUTHN, "cred-1") is None
        assert backend.delete_factor("acme", uid, "pending")
        assert not backend.delete_factor("acme", uid, "never-there")
        # The freed id and lookup can be enrolled again.
        backend.add_factor("acme", factor(uid, "key", FactorKind.WEBAUTHN, lookup="cred-1"))
        password = backend.list_factors("acme", uid)[0]
        assert password.kind is FactorKind.PASSWORD
        stored = backend.get_password_hash("acme", uid)
        with pytest.raises(ValueError):
            backend.delete_factor("acme", uid, password.factor_id)
        assert backend.get_password_hash("acme", uid) == stored
        assert backend.required_factors("acme", uid) == [FactorKind.PASSWORD]

    def test_find_factor_by_lookup(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        bob = backend.create_user("globex", "bob")
        backend.add_factor("acme", factor(alice.user_id, "a-key", FactorKind.WEBAUTHN, lookup="cred-a"))
        backend.add_factor("globex", factor(bob.user_id, "b-key", FactorKind.WEBAUTHN, lookup="cred-b"))
        assert backend.find_factor_by_lookup("acme", FactorKind.WEBAUTHN, "cred-a") is None  # pending
        assert backend.confirm_factor("acme", alice.user_id, "a-key", replace_kind=False)
        assert backend.confirm_factor("globex", bob.user_id, "b-key", replace_kind=False)
        found = backend.find_factor_by_lookup("acme", FactorKind.WEBAUTHN, "cred-a")
        assert found is not None
        assert (found.user_id, found.factor_id, found.lookup) == (alice.user_id, "a-key", "cred-a")
        assert backend.find_factor_by_lookup("acme", FactorKind.HOTP, "cred-a") is None  # another kind
        assert backend.find_factor_by_lookup("acme", FactorKind.WEBAUTHN, "cred-b") is None  # globex's
        assert backend.find_factor_by_lookup("globex", FactorKind.WEBAUTHN, "cred-b").user_id == bob.user_id
        assert backend.find_factor_by_lookup("acme", FactorKind.WEBAUTHN, "CRED-A") is None

    def test_advance_factor_counter(self, backend: Any, clock: MockClock) -> None:
        uid = backend.create_user("acme", "alice").user_id
        backend.add_factor("acme", factor(uid, "hotp", FactorKind.HOTP, confirmed=True, counter=3))
        backend.add_factor("acme", factor(uid, "pending", FactorKind.HOTP, counter=3))
        first = clock.now()
        assert backend.advance_factor_counter("acme", uid, "hotp", 5, now=first)
        stored = backend.get_factor("acme", uid, "hotp")
        assert (stored.counter, stored.last_used_at) == (5, first)
        clock.advance(30)
        assert not backend.advance_factor_counter("acme", uid, "hotp", 5, now=clock.now())  # replay
        assert not backend.advance_factor_counter("acme", uid, "hotp", 4, now=clock.now())  # backwards
        assert backend.get_factor("acme", uid, "hotp").last_used_at == first  # refusals change nothing
        assert backend.advance_factor_counter("acme", uid, "hotp", 6, now=clock.now())
        assert backend.get_factor("acme", uid, "hotp").counter == 6
        # A pending factor is never moved (it is not in use yet); an unknown one neither.
        assert not backend.advance_factor_counter("acme", uid, "pending", 10, now=clock.now())
        assert backend.get_factor("acme", uid, "pending").counter == 3
        assert not backend.advance_factor_counter("acme", uid, "missing", 10, now=clock.now())
        big = 2**40  # beyond 32 bits: signature counts, time steps
        assert backend.advance_factor_counter("acme", uid, "hotp", big, now=clock.now())
        assert backend.get_factor("acme", uid, "hotp").counter == big

    def test_swap_factor_secret(self, backend: Any, clock: MockClock) -> None:
        uid = backend.create_user("acme", "alice").user_id
        backend.add_factor(
            "acme", factor(uid, "codes", FactorKind.RECOVERY_CODE, confirmed=True, counter=3, secret="v3")
        )
        backend.add_factor("acme", factor(uid, "pending", FactorKind.RECOVERY_CODE, secret="p0"))
        assert not backend.swap_factor_secret("acme", uid, "codes", expected_counter=2, secret="x", now=T0)
        assert backend.get_factor("acme", uid, "codes").secret == "v3"  # a stale counter changes nothing
        now = clock.now()
        assert backend.swap_factor_secret("acme", uid, "codes", expected_counter=3, secret="v4", now=now)
        stored = backend.get_factor("acme", uid, "codes")
        assert (stored.secret, stored.counter, stored.last_used_at) == ("v4", 4, now)
        assert not backend.swap_factor_secret("acme", uid, "codes", expected_counter=3, secret="y", now=now)
        assert backend.get_factor("acme", uid, "codes").secret == "v4"
        assert not backend.swap_factor_secret("acme", uid, "pending", expected_counter=0, secret="z", now=now)
        assert backend.get_factor("acme", uid, "pending").secret == "p0"
        assert not backend.swap_factor_secret("acme", uid, "missing", expected_counter=0, secret="z", now=now)

    def test_use_once(self, backend: Any, clock: MockClock) -> None:
        """A one-time token is used once until it expires; scopes and logout jtis are apart."""
        until = clock.now() + timedelta(minutes=5)
        assert backend.use_once("email_otp", "digest-1", expires_at=until)
        assert not backend.use_once("email_otp", "digest-1", expires_at=until)  # a replay
        assert backend.use_once("webauthn", "digest-1", expires_at=until)  # another scope
        assert backend.remember_jti("email_otp", "digest-1", until)  # not a logout token's jti
        clock.advance(timedelta(minutes=6))
        assert backend.use_once("email_otp", "digest-2", expires_at=clock.now() + timedelta(minutes=5))
        assert backend.use_once("email_otp", "digest-1", expires_at=clock.now() + timedelta(minutes=5))

    def test_parallel_uses_of_one_token_have_one_winner(self, backend: Any, clock: MockClock) -> None:
        until = clock.now() + timedelta(minutes=5)
        for token in ("a", "b"):
            won = race(RACERS, lambda _i, t=token: backend.use_once("webauthn", t, expires_at=until))
            assert won.count(True) == 1

    def test_factor_data_round_trip(self, backend: Any) -> None:
        uid = backend.create_user("acme", "alice").user_id
        data = {
            "label": "Clé de sécurité ✓",
            "public_key": "pQECAyYgASFYIA",
            "transports": ["usb", "nfc"],
            "nested": {"aaguid": None, "backed_up": True, "sign_count": 0, "ratio": 0.5},
        }
        backend.add_factor("acme", factor(uid, "key", FactorKind.WEBAUTHN, data=data, lookup="cred"))
        read = backend.get_factor("acme", uid, "key")
        assert read.data == data and isinstance(read.data, dict)
        read.data["transports"].append("tampered")  # a copy: the store keeps its own
        assert backend.get_factor("acme", uid, "key").data == data
        backend.add_factor("acme", factor(uid, "bare", data={}))
        assert backend.get_factor("acme", uid, "bare").data == {}

    def test_enroll_factor_replaces_the_confirmed_factors_of_its_kind(
        self, backend: Any, clock: MockClock
    ) -> None:
        uid = add_user(backend, "acme", "alice", "pw").user_id
        password_id = backend.list_factors("acme", uid)[0].factor_id
        enrolled_at = clock.now()
        backend.enroll_factor("acme", uid, FactorKind.TOTP, "first")
        backend.add_factor("acme", factor(uid, "pending"))
        clock.advance(60)
        backend.enroll_factor("acme", uid, FactorKind.TOTP, "second")
        (totp,) = backend.list_user_factors("acme", uid, kind=FactorKind.TOTP)
        assert (totp.secret, totp.confirmed, totp.counter, totp.created_at) == (
            "second",
            True,
            0,
            enrolled_at,
        )
        assert totp.factor_id and totp.factor_id not in (password_id, "pending")
        assert backend.get_factor("acme", uid, "pending") is not None  # enrollments in progress stay
        # The password keeps its record (and id) when it changes.
        backend.set_password_hash("acme", uid, "new-hash")
        password = backend.list_factors("acme", uid)[0]
        assert (password.kind, password.factor_id, password.secret) == (
            FactorKind.PASSWORD,
            password_id,
            "new-hash",
        )
        assert backend.required_factors("acme", uid) == [FactorKind.PASSWORD, FactorKind.TOTP]

    def test_parallel_counter_advances_have_one_winner(self, backend: Any, clock: MockClock) -> None:
        uid = backend.create_user("acme", "alice").user_id
        backend.add_factor("acme", factor(uid, "hotp", FactorKind.HOTP, confirmed=True))
        for new_counter in (1, 2, 3):
            won = race(
                RACERS,
                lambda _i, n=new_counter: backend.advance_factor_counter(
                    "acme", uid, "hotp", n, now=clock.now()
                ),
            )
            assert won.count(True) == 1
        assert backend.get_factor("acme", uid, "hotp").counter == 3

    def test_parallel_secret_swaps_have_one_winner(self, backend: Any, clock: MockClock) -> None:
        uid = backend.create_user("acme", "alice").user_id
        backend.add_factor(
            "acme", factor(uid, "codes", FactorKind.RECOVERY_CODE, confirmed=True, secret="v0")
        )
        for expected in (0, 1, 2):
            won = race(
                RACERS,
                lambda i, e=expected: backend.swap_factor_secret(
                    "acme", uid, "codes", expected_counter=e, secret=f"v{e + 1}-by-{i}", now=clock.now()
                ),
            )
            assert won.count(True) == 1
            stored = backend.get_factor("acme", uid, "codes")
            assert (stored.counter, stored.secret) == (expected + 1, f"v{expected + 1}-by-{won.index(True)}")

    def test_a_pending_factor_replaces_the_pending_one_of_its_kind(self, backend: Any) -> None:
        uid = add_user(backend, "acme", "alice", "pw").user_id
        other = backend.create_user("acme", "bob").user_id
        backend.add_factor("acme", factor(uid, "confirmed", confirmed=True))
        backend.add_factor("acme", factor(uid, "key", FactorKind.WEBAUTHN, lookup="cred-1"))
        backend.add_factor("acme", factor(other, "bobs"))
        backend.add_factor("acme", factor(uid, "first"))
        backend.add_factor("acme", factor(uid, "second"))
        pending = backend.list_user_factors("acme", uid, include_pending=True)
        assert sorted((c.factor_id, c.confirmed) for c in pending if c.kind is not FactorKind.PASSWORD) == [
            ("confirmed", True),
            ("key", False),
            ("second", False),
        ]
        assert backend.get_factor("acme", uid, "first") is None
        assert backend.get_factor("acme", other, "bobs") is not None  # another user's stays
        assert not backend.confirm_factor("acme", uid, "first", replace_kind=False)
        unit = backend.begin_unit()
        backend.add_factor("acme", factor(uid, "third"))
        unit.rollback()  # the replacement is undone with the unit
        assert backend.get_factor("acme", uid, "second") is not None
        assert backend.get_factor("acme", uid, "third") is None

    def test_parallel_pending_starts_leave_one(self, backend: Any) -> None:
        uid = backend.create_user("acme", "alice").user_id

        def start(i: int) -> bool:
            backend.add_factor("acme", factor(uid, f"start-{i}"))
            return True

        race(RACERS, start)
        left = backend.list_user_factors("acme", uid, kind=FactorKind.TOTP, include_pending=True)
        assert len(left) == 1 and not left[0].confirmed

    def test_parallel_confirmations_that_replace_the_kind_leave_one_factor(self, backend: Any) -> None:
        uid = backend.create_user("acme", "alice").user_id
        for i in range(RACERS):
            backend.add_factor("acme", factor(uid, f"p{i}"))
        won = race(RACERS, lambda i: backend.confirm_factor("acme", uid, f"p{i}", replace_kind=True))
        assert won.count(True) == 1
        left = backend.list_user_factors("acme", uid, include_pending=True)
        assert [(c.factor_id, c.confirmed) for c in left] == [(f"p{won.index(True)}", True)]

    # --- roles and permissions ------------------------------------------------------------

    def test_roles_and_permissions(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        assert backend.create_role("acme", "editor", "Edits documents") == Role(
            "acme", "editor", "Edits documents"
        )
        backend.create_role("acme", "admin")
        with pytest.raises(RoleExists):
            backend.create_role("acme", "admin")
        assert backend.grant_permission("acme", "editor", "documents:edit")
        assert not backend.grant_permission("acme", "editor", "documents:edit")  # already granted
        assert backend.grant_permission("acme", "editor", "documents:read")
        assert backend.grant_permission("acme", "admin", "documents:read")
        assert backend.roles_of("acme", alice.user_id) == []
        assert backend.permissions_of("acme", alice.user_id) == []
        assert backend.add_user_role("acme", alice.user_id, "editor")
        assert not backend.add_user_role("acme", alice.user_id, "editor")
        assert backend.add_user_role("acme", alice.user_id, "admin")
        assert backend.roles_of("acme", alice.user_id) == ["admin", "editor"]
        assert backend.permissions_of("acme", alice.user_id) == ["documents:edit", "documents:read"]
        assert backend.list_roles("acme") == [
            Role("acme", "admin", "", ("documents:read",)),
            Role("acme", "editor", "Edits documents", ("documents:edit", "documents:read")),
        ]
        assert backend.revoke_permission("acme", "editor", "documents:edit")
        assert not backend.revoke_permission("acme", "editor", "documents:edit")
        assert backend.remove_user_role("acme", alice.user_id, "admin")
        assert not backend.remove_user_role("acme", alice.user_id, "admin")
        assert backend.roles_of("acme", alice.user_id) == ["editor"]
        assert backend.permissions_of("acme", alice.user_id) == ["documents:read"]

    def test_roles_are_tenant_scoped_and_refuse_unknown_names(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.create_role("acme", "admin")
        backend.create_role("other", "admin")  # the same name in another tenant is another role
        backend.grant_permission("other", "admin", "everything")
        backend.add_user_role("acme", alice.user_id, "admin")
        assert backend.permissions_of("acme", alice.user_id) == []
        assert backend.roles_of("other", alice.user_id) == []
        with pytest.raises(UserNotFound):  # alice is not a user of "other"
            backend.add_user_role("other", alice.user_id, "admin")
        with pytest.raises(UserNotFound):
            backend.add_user_role("acme", "no-such-user", "admin")
        with pytest.raises(RoleNotFound):
            backend.add_user_role("acme", alice.user_id, "ghost")
        with pytest.raises(RoleNotFound):
            backend.grant_permission("acme", "ghost", "x")
        with pytest.raises(RoleNotFound):
            backend.delete_role("acme", "ghost")
        for bad in ("", " admin", "a b", "x" * 65, "r\u00f4le", "-admin", "admin\n"):
            with pytest.raises(InvalidInput):
                backend.create_role("acme", bad)
        with pytest.raises(InvalidInput):
            backend.grant_permission("acme", "admin", "no spaces")
        with pytest.raises(InvalidInput):
            backend.create_role("acme", "fine", "bad\x00description")
        assert [r.name for r in backend.list_roles("acme")] == ["admin"]

    def test_deleting_a_role_in_use_needs_force(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.create_role("acme", "admin")
        backend.grant_permission("acme", "admin", "all")
        backend.add_user_role("acme", alice.user_id, "admin")
        with pytest.raises(RoleInUse):
            backend.delete_role("acme", "admin")
        assert backend.roles_of("acme", alice.user_id) == ["admin"]
        backend.delete_role("acme", "admin", force=True)
        assert backend.roles_of("acme", alice.user_id) == []
        assert backend.list_roles("acme") == []
        # A new role of the same name starts without the old grants.
        backend.create_role("acme", "admin")
        assert backend.list_roles("acme") == [Role("acme", "admin")]
        backend.delete_role("acme", "admin")  # not in use: no force needed
        assert backend.list_roles("acme") == []

    def test_deleting_a_user_removes_its_roles(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.create_role("acme", "admin")
        backend.add_user_role("acme", alice.user_id, "admin")
        backend.delete_user("acme", "alice")
        assert backend.roles_of("acme", alice.user_id) == []
        backend.delete_role("acme", "admin")  # no longer in use
        assert backend.list_roles("acme") == []

    def test_parallel_role_changes_stay_consistent(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.create_role("acme", "admin")
        added = race(20, lambda i: backend.add_user_role("acme", alice.user_id, "admin"))
        assert added.count(True) == 1
        assert backend.roles_of("acme", alice.user_id) == ["admin"]
        removed = race(20, lambda i: backend.remove_user_role("acme", alice.user_id, "admin"))
        assert removed.count(True) == 1
        assert backend.roles_of("acme", alice.user_id) == []

    # --- account tokens (AccountTokenStore) ---------------------------------------------------

    def _account_token(self, user_id: str, name: str, *, kind: str = "password_reset", **kw: Any) -> Any:
        from flask_authflow.core.ports import AccountToken

        fields: dict[str, Any] = {
            "token_hash": f"{name:0<64}"[:64],
            "kind": kind,
            "tenant": "acme",
            "user_id": user_id,
            "code_hash": f"code-{name}",
            "created_at": T0,
            "expires_at": T0 + timedelta(minutes=30),
            "payload": {"email": "a@example.com"},
        }
        return AccountToken(**{**fields, **kw})

    def test_account_tokens_are_single_use_and_expire(self, backend: Any) -> None:
        from flask_authflow.core.ports import AccountTokenStore

        assert missing_members(backend, AccountTokenStore) == []
        alice = add_user(backend, "acme", "alice", "pw")
        token = self._account_token(alice.user_id, "a")
        backend.issue_account_token(token)
        assert backend.find_account_token(token.token_hash) == token
        # Another kind, or past its expiry: not used, and still there.
        assert backend.use_account_token(token.token_hash, "signup", T0) is None
        assert backend.use_account_token(token.token_hash, "password_reset", token.expires_at) is None
        assert backend.find_account_token(token.token_hash).used_at is None
        used = backend.use_account_token(token.token_hash, "password_reset", T0 + timedelta(minutes=1))
        assert used is not None and used.user_id == alice.user_id and used.payload == token.payload
        assert used.used_at == T0 + timedelta(minutes=1)
        later = T0 + timedelta(minutes=2)
        assert backend.use_account_token(token.token_hash, "password_reset", later) is None
        assert backend.find_account_token("f" * 64) is None
        assert backend.use_account_token("f" * 64, "password_reset", T0) is None

    def test_a_new_account_token_voids_the_older_ones_of_its_kind(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        bob = add_user(backend, "acme", "bob", "pw")
        first = self._account_token(alice.user_id, "1")
        other_kind = self._account_token(alice.user_id, "2", kind="email_change")
        bobs = self._account_token(bob.user_id, "3")
        for token in (first, other_kind, bobs):
            backend.issue_account_token(token)
        second = self._account_token(alice.user_id, "4", created_at=T0 + timedelta(minutes=1))
        backend.issue_account_token(second)
        assert backend.find_account_token(first.token_hash).used_at == second.created_at
        assert backend.use_account_token(first.token_hash, "password_reset", second.created_at) is None
        assert backend.live_account_token("acme", alice.user_id, "password_reset", T0) == second
        # The other kind and the other user keep theirs.
        assert backend.live_account_token("acme", alice.user_id, "email_change", T0) == other_kind
        assert backend.live_account_token("acme", bob.user_id, "password_reset", T0) == bobs
        assert backend.live_account_token("globex", alice.user_id, "password_reset", T0) is None
        assert backend.has_account_token("acme", alice.user_id, "password_reset")
        assert not backend.has_account_token("acme", alice.user_id, "signup")
        assert not backend.has_account_token("globex", alice.user_id, "password_reset")
        assert backend.void_account_tokens("acme", alice.user_id, None, T0) == 2
        assert backend.has_account_token("acme", alice.user_id, "password_reset")  # void, still issued
        assert backend.live_account_token("acme", alice.user_id, "email_change", T0) is None
        assert backend.live_account_token("acme", bob.user_id, "password_reset", T0) == bobs

    def test_account_codes_count_wrong_guesses(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        token = self._account_token(alice.user_id, "c")
        backend.issue_account_token(token)
        for tried in range(1, 3):
            assert backend.use_account_code(token.token_hash, "wrong", T0, max_attempts=3) is None
            assert backend.find_account_token(token.token_hash).code_attempts == tried
        used = backend.use_account_code(token.token_hash, token.code_hash, T0, max_attempts=3)
        assert used is not None and used.used_at == T0
        assert backend.use_account_code(token.token_hash, token.code_hash, T0, max_attempts=3) is None
        # The attempt that reaches the limit voids the token: the right code is then refused.
        again = self._account_token(alice.user_id, "d")
        backend.issue_account_token(again)
        for _ in range(3):
            assert backend.use_account_code(again.token_hash, "wrong", T0, max_attempts=3) is None
        assert backend.find_account_token(again.token_hash).used_at == T0
        assert backend.use_account_code(again.token_hash, again.code_hash, T0, max_attempts=3) is None
        assert backend.live_account_token("acme", alice.user_id, "password_reset", T0) is None

    def test_parallel_uses_of_one_account_token_have_one_winner(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        token = self._account_token(alice.user_id, "r")
        backend.issue_account_token(token)
        digest = token.token_hash
        won = race(RACERS, lambda _i: backend.use_account_token(digest, "password_reset", T0) is not None)
        assert won.count(True) == 1
        coded = self._account_token(alice.user_id, "s")
        backend.issue_account_token(coded)
        won = race(
            RACERS,
            lambda _i: (
                backend.use_account_code(coded.token_hash, coded.code_hash, T0, max_attempts=5) is not None
            ),
        )
        assert won.count(True) == 1

    def test_a_rolled_back_unit_leaves_the_account_token_unused(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        token = self._account_token(alice.user_id, "u")
        backend.issue_account_token(token)
        unit = backend.begin_unit()
        assert backend.use_account_token(token.token_hash, "password_reset", T0) is not None
        unit.rollback()
        assert backend.find_account_token(token.token_hash).used_at is None
        unit = backend.begin_unit()
        assert backend.use_account_token(token.token_hash, "password_reset", T0) is not None
        unit.commit()
        assert backend.find_account_token(token.token_hash).used_at == T0

    def test_deleting_a_user_leaves_no_live_account_token(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        token = self._account_token(alice.user_id, "x")
        backend.issue_account_token(token)
        backend.delete_user("acme", "alice")
        assert backend.use_account_token(token.token_hash, "password_reset", T0) is None

    # --- devices ------------------------------------------------------------------------------

    def test_devices_are_recorded_listed_and_forgotten(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        laptop, phone = "L" * 22, "P" * 22
        assert backend.touch_device(
            "acme", alice.user_id, laptop, label="Firefox on Ubuntu", place=None, now=T0
        )
        later = T0 + timedelta(hours=1)
        assert backend.touch_device(
            "acme", alice.user_id, phone, label="Safari on iOS", place="Berlin", now=later
        )
        # The known device: not new; last seen, label and place follow the newest sign-in.
        again = T0 + timedelta(hours=2)
        assert not backend.touch_device(
            "acme", alice.user_id, laptop, label="Firefox 2", place="Paris", now=again
        )
        assert backend.list_devices("acme", alice.user_id) == [
            DeviceRecord("acme", alice.user_id, laptop, "Firefox 2", T0, again, "Paris"),
            DeviceRecord("acme", alice.user_id, phone, "Safari on iOS", later, later, "Berlin"),
        ]
        assert backend.get_device("acme", alice.user_id, phone) == DeviceRecord(
            "acme", alice.user_id, phone, "Safari on iOS", later, later, "Berlin"
        )
        assert backend.forget_device("acme", alice.user_id, phone)
        assert not backend.forget_device("acme", alice.user_id, phone)
        assert backend.get_device("acme", alice.user_id, phone) is None
        assert [d.device_id for d in backend.list_devices("acme", alice.user_id)] == [laptop]

    def test_device_trust_starts_and_ends(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        one, two = "a" * 22, "b" * 22
        until = T0 + timedelta(days=30)
        assert not backend.trust_device("acme", alice.user_id, one, until)  # unknown device
        for device in (one, two):
            backend.touch_device("acme", alice.user_id, device, label="x", place=None, now=T0)
            assert backend.trust_device("acme", alice.user_id, device, until)
        record = backend.get_device("acme", alice.user_id, one)
        assert record.trusted_until == until
        assert record.trusted_at(T0) and not record.trusted_at(until)
        # A new sign-in from a trusted device keeps its trust.
        backend.touch_device("acme", alice.user_id, one, label="y", place=None, now=T0 + timedelta(days=1))
        assert backend.get_device("acme", alice.user_id, one).trusted_until == until
        assert backend.end_device_trust("acme", alice.user_id, one) == 1
        assert backend.get_device("acme", alice.user_id, one).trusted_until is None
        assert backend.get_device("acme", alice.user_id, two).trusted_until == until
        assert backend.end_device_trust("acme", alice.user_id) == 1  # the other one
        assert backend.end_device_trust("acme", alice.user_id) == 0
        assert all(d.trusted_until is None for d in backend.list_devices("acme", alice.user_id))

    def test_devices_are_per_user_and_tenant_and_refuse_bad_input(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        bob = add_user(backend, "acme", "bob", "pw")
        shared = "s" * 22
        backend.touch_device("acme", alice.user_id, shared, label="x", place=None, now=T0)
        backend.trust_device("acme", alice.user_id, shared, T0 + timedelta(days=1))
        assert backend.get_device("acme", bob.user_id, shared) is None
        assert backend.get_device("other", alice.user_id, shared) is None
        assert not backend.forget_device("acme", bob.user_id, shared)
        assert backend.end_device_trust("acme", bob.user_id) == 0
        assert backend.get_device("acme", alice.user_id, shared).trusted_until is not None
        with pytest.raises(UserNotFound):
            backend.touch_device("other", alice.user_id, shared, label="x", place=None, now=T0)
        with pytest.raises(UserNotFound):
            backend.touch_device("acme", "no-such-user", shared, label="x", place=None, now=T0)
        for bad in ("", "short", "x" * 65, "a" * 21 + "!", "a" * 22 + "\n", None):
            with pytest.raises(InvalidInput):
                backend.touch_device("acme", alice.user_id, bad, label="x", place=None, now=T0)
            with pytest.raises(InvalidInput):
                backend.get_device("acme", alice.user_id, bad)
        # Labels and places are cut to their columns and lose control characters.
        backend.touch_device("acme", bob.user_id, shared, label="L\x00" + "x" * 300, place="p" * 300, now=T0)
        record = backend.get_device("acme", bob.user_id, shared)
        assert record.label == "L?" + "x" * 126 and record.place == "p" * 128

    def test_deleting_a_user_removes_its_devices(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.touch_device("acme", alice.user_id, "d" * 22, label="x", place=None, now=T0)
        backend.delete_user("acme", "alice")
        assert backend.list_devices("acme", alice.user_id) == []
        again = add_user(backend, "acme", "alice", "pw")
        assert backend.list_devices("acme", again.user_id) == []

    def test_a_rolled_back_unit_leaves_no_device(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        unit = backend.begin_unit()
        backend.touch_device("acme", alice.user_id, "u" * 22, label="x", place=None, now=T0)
        unit.rollback()
        assert backend.list_devices("acme", alice.user_id) == []
