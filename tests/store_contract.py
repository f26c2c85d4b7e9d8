"""The store contract: what every adapter of the backend's ports must do, one class per aggregate.

Each aggregate's contract is a mixin class in ``tests/store_contract_<aggregate>.py`` (users,
factors, attempts, audit, one-time tokens, identity links, roles, account tokens, devices, and
the login store as a whole: its one read and its unit of work), written from its port's
docstrings in ``flask_authflow/_core/ports.py``: the behaviour, and each rejection path with the
input that triggers it. ``tests/test_store_contracts.py`` runs every one of them on the memory
adapter, SQLite and PostgreSQL. The contracts of the aggregates with stores of their own run
beside those stores: API tokens (tests/test_api_tokens_store.py), provider tokens
(tests/test_provider_tokens_store.py), sessions (tests/test_session_stores.py, with Redis) and
the issuer's keys (tests/store_contract_keys.py, run by tests/test_key_store_contracts.py on
the memory, file, SQLite and PostgreSQL key stores).

A new aggregate gets a contract module here and a line in tests/test_store_contracts.py.
This module holds what they share: the time, the lockout policy, factor records, races.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from flask_authflow._core.ports import FactorConfig
from flask_authflow._outcomes import FactorKind
from flask_authflow.audit._sinks import AuditRecord

__all__ = ["RACERS", "T0", "WINDOW", "AuditRecord", "factor", "race"]

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
