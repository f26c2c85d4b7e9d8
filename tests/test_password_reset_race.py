"""One reset token used by 4 processes at once on PostgreSQL: exactly one sets the password.

The race is decided by the database (the token's single conditional UPDATE), never by a
Python lock, which would not reach across processes.
"""

from __future__ import annotations

from typing import Any

import pytest

from flask_authflow._clock import MockClock, SystemClock
from flask_authflow._outcomes import FactorCredential, FactorKind, FactorRequired
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login import _password_reset as password_reset
from flask_authflow.login._account_tokens import AccountTokenUsed
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user
from tests.authn_support import CTX, FAST_HASHER, new_session
from tests.parts import child_processes

pytestmark = [pytest.mark.postgres, pytest.mark.multiprocess]

PROCESSES = 4
SPAWN = child_processes()


def _racer(url: str, token: str, index: int, barrier: Any, out: Any) -> None:
    backend = SqlAlchemyBackend(url, create_tables=False)
    service = AuthnService(backend, backend, hasher=FAST_HASHER, account_tokens=backend)
    session = new_session(MockClock())
    try:
        barrier.wait(60)
        password_reset.reset_password(service, CTX, session, token, f"racing passphrase {index}")
        out.put((index, "won"))
    except AccountTokenUsed:
        out.put((index, "used"))
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.put((index, f"error {exc!r}"))
    finally:
        backend.close()


def test_four_processes_one_token_exactly_one_wins(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        user = add_user(backend, "acme", "alice", "the old passphrase")
        issued = account_tokens.issue(
            backend,
            kind="password_reset",
            tenant="acme",
            user_id=user.user_id,
            now=SystemClock().now(),
            ttl=password_reset.DEFAULT_RESET_TTL,
        )
        barrier, out = SPAWN.Barrier(PROCESSES), SPAWN.Queue()
        processes = [
            SPAWN.Process(target=_racer, args=(url, issued.token, i, barrier, out)) for i in range(PROCESSES)
        ]
        for process in processes:
            process.start()
        results = dict(out.get(timeout=120) for _ in processes)
        for process in processes:
            process.join(30)
        assert sorted(results.values()) == ["used"] * (PROCESSES - 1) + ["won"], results
        winner = next(i for i, result in results.items() if result == "won")
        service = AuthnService(backend, backend, hasher=FAST_HASHER, account_tokens=backend)
        handle = service.with_audit_context(CTX)
        for index in range(PROCESSES):
            session = new_session(MockClock())
            assert handle.begin_login("alice", "acme", session) == FactorRequired(FactorKind.PASSWORD)
            outcome = handle.verify_factor(FactorCredential.password(f"racing passphrase {index}"), session)
            assert session.is_authenticated is (index == winner), outcome
        rows = [r for r in backend.audit_rows if r.event == "password_reset"]
        assert sorted(r.status for r in rows) == ["refused"] * (PROCESSES - 1) + ["success"]
    finally:
        backend.close()
