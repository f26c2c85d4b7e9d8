"""Federation's stores on SQLite and PostgreSQL: identity links, and the logout-token jti
replay cache shared by every process of the app."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from tests.parts import child_processes

ISSUER = "https://op.test"


def test_links_round_trip_and_are_replaced(database_url: str) -> None:
    backend = SqlAlchemyBackend(database_url, clock=MockClock())
    user = backend.create_user("default", "alice")
    other = backend.create_user("default", "bob")
    assert backend.find_link(ISSUER, "sub-1") is None
    backend.link_identity(ISSUER, "sub-1", "default", user.user_id)
    assert backend.find_link(ISSUER, "sub-1").user_id == user.user_id  # type: ignore[union-attr]
    backend.link_identity(ISSUER, "sub-1", "default", other.user_id)  # relinked, not duplicated
    assert [link.user_id for link in backend.links_of_user("default", other.user_id)] == [other.user_id]
    assert backend.links_of_user("default", user.user_id) == []
    backend.delete_user("default", "bob")  # a deleted user's links go with it
    assert backend.find_link(ISSUER, "sub-1") is None
    assert backend.unlink_identity(ISSUER, "sub-1") is False
    backend.close()


def test_a_jti_is_remembered_until_it_expires(database_url: str) -> None:
    clock = MockClock()
    first = SqlAlchemyBackend(database_url, clock=clock)
    second = SqlAlchemyBackend(database_url, clock=clock)  # another process's view of the same database
    until = clock.now() + timedelta(minutes=2)
    assert first.remember_jti(ISSUER, "jti-1", until) is True
    assert second.remember_jti(ISSUER, "jti-1", until) is False
    assert second.remember_jti("https://other.test", "jti-1", until) is True  # per issuer
    clock.advance(timedelta(minutes=3))
    assert second.remember_jti(ISSUER, "jti-1", clock.now() + timedelta(minutes=2)) is True
    first.close()
    second.close()


def _race(url: str, start: Any, wins: Any) -> None:
    backend = SqlAlchemyBackend(url, create_tables=False)
    start.wait(30)
    if backend.remember_jti(ISSUER, "raced-jti", datetime.now(UTC) + timedelta(minutes=5)):
        with wins.get_lock():
            wins.value += 1
    backend.close()


@pytest.mark.multiprocess
def test_several_processes_replaying_one_jti_only_one_wins(database_url: str) -> None:
    SqlAlchemyBackend(database_url).close()  # tables first
    context = child_processes()
    start = context.Event()
    wins = context.Value("i", 0)
    processes = [context.Process(target=_race, args=(database_url, start, wins)) for _ in range(4)]
    for process in processes:
        process.start()
    time.sleep(1.5)  # let every process import and connect before the race
    start.set()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    assert wins.value == 1


def test_memory_store_remembers_too() -> None:
    from flask_authflow.storage._memory import InMemoryBackend

    clock = MockClock()
    backend = InMemoryBackend(clock=clock)
    until = clock.now() + timedelta(seconds=30)
    assert backend.remember_jti(ISSUER, "j", until) is True
    assert backend.remember_jti(ISSUER, "j", until) is False
    clock.advance(timedelta(seconds=31))
    assert backend.remember_jti(ISSUER, "j", clock.now() + timedelta(seconds=30)) is True
