"""The store contract of factors (``FactorStore``, ``FactorRecordStore``).

Mixed into a test class whose module gives ``backend`` and ``clock`` fixtures
(tests/test_store_contracts.py runs it on every adapter).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.ports import FactorRecordStore
from flask_authflow._outcomes import FactorKind
from flask_authflow.errors import UserNotFound
from flask_authflow.testing._users import add_user
from tests.authn_support import FAST_HASHER
from tests.protocols import missing_members
from tests.store_contract import RACERS, T0, factor, race


class FactorsContract:
    """Passwords and factor records: enrollment, order, tenant scope, one-time counters."""

    def test_implements_the_factor_record_store(self, backend: Any) -> None:
        assert missing_members(backend, FactorRecordStore) == []

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

    def test_lock_user_answers_whether_the_tenants_user_exists(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        unit = backend.begin_unit()
        try:
            assert backend.lock_user("acme", alice.user_id)
            assert not backend.lock_user("globex", alice.user_id)
            assert not backend.lock_user("acme", "no-such-user")
        finally:
            unit.rollback()
