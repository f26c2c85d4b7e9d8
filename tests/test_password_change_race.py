"""Parallel changes of one password with the same current password: exactly one wins.

The change is made only while the hash its caller verified is still the stored one,
checked again under the user's row lock in the change's unit of work: a decision of the
database, so it holds across processes on PostgreSQL (and across threads, for the headless
route, in tests/test_headless_password.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow.login import _recovery as recovery
from flask_authflow.login._recovery import PasswordReplaced
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user
from tests.authn_support import CTX, FAST_HASHER, new_session
from tests.parts import child_processes

PROCESSES = 4
SPAWN = child_processes()


def _racer(url: str, user_id: str, verified: str, index: int, barrier: Any, out: Any) -> None:
    backend = SqlAlchemyBackend(url, create_tables=False)
    service = AuthnService(backend, backend, hasher=FAST_HASHER, account_tokens=backend)
    try:
        barrier.wait(60)
        recovery.change_password(
            service,
            CTX,
            new_session(MockClock()),
            "acme",
            user_id,
            f"racing passphrase {index}",
            replaces=verified,
        )
        out.put((index, "won"))
    except PasswordReplaced:
        out.put((index, "replaced"))
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.put((index, f"error {exc!r}"))
    finally:
        backend.close()


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_four_processes_changing_one_password_exactly_one_wins(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        user = add_user(backend, "acme", "alice", "the old passphrase")
        verified = backend.get_password_hash("acme", user.user_id)
        assert verified is not None
        barrier, out = SPAWN.Barrier(PROCESSES), SPAWN.Queue()
        processes = [
            SPAWN.Process(target=_racer, args=(url, user.user_id, verified, i, barrier, out))
            for i in range(PROCESSES)
        ]
        for process in processes:
            process.start()
        results = dict(out.get(timeout=120) for _ in processes)
        for process in processes:
            process.join(30)
        assert sorted(results.values()) == ["replaced"] * (PROCESSES - 1) + ["won"], results
        winner = next(i for i, result in results.items() if result == "won")
        stored = backend.get_password_hash("acme", user.user_id)
        assert stored is not None
        for index in range(PROCESSES):
            assert FAST_HASHER.verify(stored, f"racing passphrase {index}") is (index == winner)
        rows = [r for r in backend.audit_rows if r.event == "password_changed"]
        assert [r.status for r in rows] == ["success"]  # the losers changed and logged nothing
    finally:
        backend.close()


def test_a_stale_verified_hash_changes_nothing(tmp_path: Any) -> None:
    backend = SqlAlchemyBackend(f"sqlite:///{tmp_path / 'users.db'}")
    try:
        user = add_user(backend, "acme", "alice", "the old passphrase")
        service = AuthnService(backend, backend, hasher=FAST_HASHER, account_tokens=backend)
        before = backend.get_password_hash("acme", user.user_id)
        with pytest.raises(PasswordReplaced):
            recovery.change_password(
                service,
                CTX,
                new_session(MockClock()),
                "acme",
                user.user_id,
                "a new passphrase",
                replaces="stale",
            )
        assert backend.get_password_hash("acme", user.user_id) == before
        assert [r for r in backend.audit_rows if r.event == "password_changed"] == []
    finally:
        backend.close()
