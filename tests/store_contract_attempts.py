"""The store contract of attempt counters and locks (``AttemptStore``).

Mixed into a test class whose module gives ``backend`` and ``clock`` fixtures
(tests/test_store_contracts.py runs it on every adapter).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flask_authflow._core.ports import (
    RESERVATION_TTL,
    AttemptKey,
    AttemptLevel,
    AttemptStore,
    HolderUnusable,
    Reservation,
    level_token,
)
from flask_authflow.testing._users import add_user
from tests.protocols import missing_members
from tests.store_contract import RACERS, T0, WINDOW, race

#: The lock duration of WINDOW, and the keywords of the multi-level calls.
LOCK = WINDOW["lock_duration"]
POLICY = {"window": WINDOW["window"], "lock_duration": LOCK}


class AttemptsContract:
    """Failures counted, locks set and ended, reservations held and settled, atomically."""

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

    def test_implements_the_port(self, backend: Any) -> None:
        assert missing_members(backend, AttemptStore) == []

    def test_a_reservation_counts_until_it_is_released_or_stale(self, backend: Any) -> None:
        key = AttemptKey("acme", "alice", "password")
        held = [backend.reserve_attempt(key, now=T0, **WINDOW) for _ in range(5)]
        assert all(r.granted for r in held) and len({r.token for r in held}) == 5
        # Five checks in flight: the sixth is refused for the lock's length, nothing is counted.
        assert backend.reserve_attempt(key, now=T0, **WINDOW) == Reservation(None, T0 + LOCK)
        assert backend.locked_until("acme", "alice", T0) is None
        backend.release_attempt(key, held[0].token)
        assert backend.reserve_attempt(key, now=T0, **WINDOW).granted  # the one given back
        assert not backend.reserve_attempt(key, now=T0, **WINDOW).granted
        # A reservation older than RESERVATION_TTL (its process died) no longer counts.
        later = T0 + RESERVATION_TTL + timedelta(seconds=1)
        assert all(backend.reserve_attempt(key, now=later, **WINDOW).granted for _ in range(5))
        # An active lock on any factor of the subject refuses with the lock's end.
        until = later + timedelta(minutes=3)
        backend.set_lock(AttemptKey("acme", "bob", "totp"), until)
        refused = backend.reserve_attempt(AttemptKey("acme", "bob", "password"), now=later, **WINDOW)
        assert refused == Reservation(None, until)

    def test_parallel_reservations_run_at_most_max_failures_checks(self, backend: Any) -> None:
        key = AttemptKey("acme", "alice", "password")
        won = race(RACERS, lambda _i: backend.reserve_attempt(key, now=T0, **WINDOW).granted)
        assert won.count(True) == WINDOW["max_failures"]

    def test_reserve_attempts_holds_every_level_or_none(self, backend: Any) -> None:
        account = AttemptLevel(AttemptKey("acme", "alice", "password"), 5)
        pair = AttemptLevel(AttemptKey("acme", "alice\x1f@192.0.2.1", "password"), 2)
        first = backend.reserve_attempts([account, pair], now=T0, **POLICY)
        second = backend.reserve_attempts([account, pair], now=T0, **POLICY)
        assert first.granted and second.granted and first.token != second.token
        # The pair level is full: refused, and nothing held on the account level either.
        assert backend.reserve_attempts([account, pair], now=T0, **POLICY) == Reservation(None, T0 + LOCK)
        room = [backend.reserve_attempt(account.key, now=T0, **WINDOW).granted for _ in range(4)]
        assert room == [True, True, True, False]
        # Released on every level: the pair has room again.
        backend.release_attempts([account.key, pair.key], first.token)
        assert backend.reserve_attempt(pair.key, now=T0, **{**WINDOW, "max_failures": 2}).granted
        # A level's failure settles that level's share of the reservation.
        backend.register_failure(pair.key, now=T0, reservation=level_token(second.token, 1), **WINDOW)
        assert backend.failures_since_success(pair.key, since=T0 - timedelta(days=1)) == 1

    def test_admit_attempts_decides_as_reserve_attempts_and_holds_nothing(self, backend: Any) -> None:
        account = AttemptLevel(AttemptKey("acme", "alice", "password"), 3)
        pair = AttemptLevel(AttemptKey("acme", "alice\x1f@192.0.2.1", "password"), 1)
        assert backend.admit_attempts([account, pair], now=T0, **POLICY) is None
        assert backend.admit_attempts([account, pair], now=T0, **POLICY) is None  # nothing was held
        backend.register_failure(pair.key, now=T0, **WINDOW)  # the pair's one failure
        assert backend.admit_attempts([account, pair], now=T0, **POLICY) == T0 + LOCK
        assert backend.admit_attempts([account], now=T0, **POLICY) is None
        # The first lock met, in the order of the levels.
        until = T0 + timedelta(minutes=3)
        backend.set_lock(AttemptKey("acme", "alice", "totp"), until)
        assert backend.admit_attempts([account, pair], now=T0, **POLICY) == until

    def test_settle_success_resets_every_level_unless_a_lock_is_active(self, backend: Any) -> None:
        keys = [
            AttemptKey("acme", "alice", "password"),
            AttemptKey("acme", "alice\x1f@192.0.2.1", "password"),
        ]
        levels = [AttemptLevel(key, 5) for key in keys]
        for key in keys:
            backend.register_failure(key, now=T0, **WINDOW)
            backend.register_failure(key, now=T0, **WINDOW)
        held = backend.reserve_attempts(levels, now=T0, **POLICY)
        settled, later = T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)
        assert (
            backend.settle_success(keys, now=settled, client_ip="192.0.2.1", reservation=held.token) is None
        )
        # Reset and logged on every level: the next failure is the first, and the first since a success.
        assert [backend.register_failure(key, now=later, **WINDOW).failures for key in keys] == [1, 1]
        assert [backend.failures_since_success(key, since=T0 - timedelta(days=1)) for key in keys] == [1, 1]
        # A lock set while the check ran (here on the pair's subject): nothing reset or logged.
        held = backend.reserve_attempts(levels, now=T0, **POLICY)
        until = T0 + timedelta(minutes=7)
        backend.set_lock(AttemptKey("acme", keys[1].subject, "totp"), until)
        assert backend.settle_success(keys, now=T0, reservation=held.token) == until
        assert [backend.register_failure(key, now=T0, **WINDOW).failures for key in keys] == [2, 2]

    def test_a_success_is_settled_only_while_its_holder_may_sign_in(self, backend: Any) -> None:
        """A login's settlement names its user (``holder``): disabled or deleted while the
        check ran, nothing of the success is written (the failures stay counted), the
        reservation is given back, and ``HolderUnusable`` says why."""
        hana = add_user(backend, "acme", "hana", "pw")
        keys = [AttemptKey("acme", "hana", "password"), AttemptKey("acme", "hana\x1f@192.0.2.9", "password")]
        levels = [AttemptLevel(key, 2) for key in keys]
        holder = ("acme", hana.user_id)
        for key in keys:
            backend.register_failure(key, now=T0, **WINDOW)
        held = backend.reserve_attempts(levels, now=T0, **POLICY)
        assert held.token is not None  # (one failure and this check: the levels are full)
        backend.set_disabled("acme", "hana", True)
        with pytest.raises(HolderUnusable):
            backend.settle_success(keys, now=T0, reservation=held.token, holder=holder)
        # Given back: another check may be reserved; nothing reset: the next failure is the second.
        again = backend.reserve_attempts(levels, now=T0, **POLICY)
        assert again.token is not None
        backend.release_attempts(keys, again.token)
        assert backend.register_failure(keys[0], now=T0, **WINDOW).failures == 2
        backend.clear_lock("acme", "hana")
        backend.set_disabled("acme", "hana", False)  # may sign in again: settled
        assert backend.settle_success(keys, now=T0, holder=holder) is None
        assert backend.register_failure(keys[1], now=T0, **WINDOW).failures == 1
        with pytest.raises(HolderUnusable):  # the user's id in another tenant is nobody there
            backend.settle_success(keys, now=T0, holder=("other", hana.user_id))
        backend.delete_user("acme", "hana")  # deleted: refused as well
        with pytest.raises(HolderUnusable):
            backend.settle_success(keys, now=T0, holder=holder)

    def test_a_success_on_levels_without_counters_is_remembered_on_each(self, backend: Any) -> None:
        """A level that never failed has no counter yet: the success is remembered on it all
        the same (its later failures count from the success, not from before it)."""
        keys = [AttemptKey("acme", "dora", "totp"), AttemptKey("acme", "dora\x1f@192.0.2.1", "totp")]
        since = T0 - timedelta(days=1)
        for key in keys:
            backend.register_failure(key, now=T0, **WINDOW)
        backend.clear_lock("acme", "dora")  # (the counters are gone; the failures stay logged)
        assert backend.settle_success(keys, now=T0 + timedelta(minutes=1)) is None
        backend.register_failure(keys[1], now=T0 + timedelta(minutes=2), **WINDOW)
        assert [backend.failures_since_success(key, since=since) for key in keys] == [0, 1]
        fresh = AttemptKey("acme", "erin", "password")
        backend.register_failure(fresh, now=T0, **WINDOW)
        backend.register_success(AttemptKey("acme", "erin", "password"), now=T0 + timedelta(minutes=1))
        assert backend.failures_since_success(fresh, since=since) == 0

    def test_a_refused_success_or_a_cleared_lock_keeps_the_last_success(self, backend: Any) -> None:
        """The last success moves only on a settled success: a success refused by a lock
        leaves it (the failures since stay counted), and ending the locks keeps it (the
        failures before it stay uncounted: escalation reads as before the lock ended)."""
        key = AttemptKey("acme", "finn", "password")
        since = T0 - timedelta(days=1)
        backend.register_failure(key, now=T0, **WINDOW)
        assert backend.register_success_unless_locked(key, now=T0 + timedelta(minutes=1)) is None
        for minute in (2, 3):
            backend.register_failure(key, now=T0 + timedelta(minutes=minute), **WINDOW)
        until = T0 + timedelta(hours=1)
        backend.set_lock(AttemptKey("acme", "finn", "totp"), until)
        assert backend.register_success_unless_locked(key, now=T0 + timedelta(minutes=4)) == until
        assert backend.settle_success([key], now=T0 + timedelta(minutes=4)) == until
        assert backend.failures_since_success(key, since=since) == 2
        backend.clear_lock("acme", "finn")
        assert backend.locked_until("acme", "finn", T0) is None
        assert backend.failure_count(key) == 0
        assert backend.failures_since_success(key, since=since) == 2

    def test_the_last_success_is_the_latest_whatever_order_successes_settle_in(self, backend: Any) -> None:
        """Racers settle successes of one account's levels at once (their counters created by
        whichever comes first); the last success is the latest in time, never an earlier one
        settled after it (processes' clocks disagree)."""
        keys = [AttemptKey("acme", "gina", "password"), AttemptKey("acme", "gina\x1f@192.0.2.7", "password")]
        moments = [T0 + timedelta(minutes=i) for i in range(RACERS)]
        settled = race(RACERS, lambda i: backend.settle_success(keys, now=moments[i]) is None)
        assert settled == [True] * RACERS
        latest = moments[-1]
        backend.register_success(keys[0], now=latest - timedelta(minutes=2))  # settled last, earlier
        for key in keys:
            backend.register_failure(key, now=latest - timedelta(seconds=30), **WINDOW)
        backend.register_failure(keys[0], now=latest + timedelta(seconds=30), **WINDOW)
        since = T0 - timedelta(days=1)
        assert [backend.failures_since_success(key, since=since) for key in keys] == [1, 0]

    def test_locked_until_any_answers_the_latest_active_lock_of_the_subjects(self, backend: Any) -> None:
        pair = "alice\x1f@192.0.2.1"
        backend.set_lock(AttemptKey("acme", "alice", "password"), T0 + timedelta(minutes=5))
        backend.set_lock(AttemptKey("acme", pair, "totp"), T0 + timedelta(minutes=9))
        backend.set_lock(AttemptKey("acme", "bob", "password"), T0 - timedelta(minutes=1))  # over
        assert backend.locked_until_any("acme", ["alice", pair], T0) == T0 + timedelta(minutes=9)
        assert backend.locked_until_any("acme", ["alice", "carol"], T0) == T0 + timedelta(minutes=5)
        assert backend.locked_until_any("acme", ["bob", "carol"], T0) is None
        assert backend.locked_until_any("globex", ["alice", pair], T0) is None
