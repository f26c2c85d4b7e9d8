"""The provider-token store (``ProviderTokenStore``) on every store: memory, SQLite and
PostgreSQL; the refresh claim raced by threads, and by processes against PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flask_authflow._clock import MockClock, SystemClock
from flask_authflow._core.ports import ProviderTokenStore, StoredProviderTokens
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._provider import OAuthProviderConfig
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from tests.federation_support import ServedProvider
from tests.parts import PostgresServer, child_processes
from tests.protocols import missing_members
from tests.provider_tokens_support import (
    CLIENT_ID,
    CLIENT_SECRET,
    PROVIDER,
    REDIRECT_URI,
    Scripted,
    keeper,
    provider_config,
)

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
SPAWN = child_processes()
WORKERS = 4


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    clock = MockClock(T0)
    if request.param == "memory":
        yield InMemoryBackend(clock=clock)
        return
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'authflow.db'}"
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        url = server.new_database()
    backend = SqlAlchemyBackend(url, clock=clock)
    yield backend
    backend.engine.dispose()


def _row(
    user_id: str, provider: str = PROVIDER, *, sealed: str = "sealed:v1:x", tenant: str = "default"
) -> StoredProviderTokens:
    return StoredProviderTokens(
        tenant=tenant,
        user_id=user_id,
        provider=provider,
        sealed=sealed,
        token_type="Bearer",
        scopes=("openid", "email"),
        expires_at=T0 + timedelta(minutes=5),
        updated_at=T0,
    )


def _user(store: Any, name: str = "alice", tenant: str = "default") -> str:
    return str(store.create_user(tenant, name).user_id)


def test_every_store_implements_the_protocol(store: Any) -> None:
    assert missing_members(store, ProviderTokenStore) == []


def test_save_get_replace_list_and_delete(store: Any) -> None:
    alice, bob = _user(store), _user(store, "bob")
    assert store.get_provider_tokens("default", alice, PROVIDER) is None
    store.save_provider_tokens(_row(alice))
    assert store.get_provider_tokens("default", alice, PROVIDER) == _row(alice)
    store.save_provider_tokens(_row(alice, sealed="sealed:v1:y"))  # replaced, not added
    store.save_provider_tokens(_row(alice, "another"))
    store.save_provider_tokens(_row(bob))
    rows = store.provider_tokens_of_user("default", alice)
    assert [(r.provider, r.sealed) for r in rows] == [("another", "sealed:v1:x"), (PROVIDER, "sealed:v1:y")]
    assert store.provider_tokens_of_user("other-tenant", alice) == []
    assert store.get_provider_tokens("other-tenant", alice, PROVIDER) is None
    row = store.get_provider_tokens("default", alice, PROVIDER)
    assert row.expires_at == T0 + timedelta(minutes=5) and row.expires_at.tzinfo is not None
    assert row.scopes == ("openid", "email")
    assert store.delete_provider_tokens("default", alice, PROVIDER)
    assert not store.delete_provider_tokens("default", alice, PROVIDER)
    assert store.get_provider_tokens("default", bob, PROVIDER) == _row(bob)


def test_the_refresh_claim(store: Any) -> None:
    alice = _user(store)
    later = T0 + timedelta(seconds=30)
    assert not store.claim_provider_tokens("default", alice, PROVIDER, "a", now=T0, until=later)  # no row
    store.save_provider_tokens(_row(alice))
    assert store.claim_provider_tokens("default", alice, PROVIDER, "a", now=T0, until=later)
    assert not store.claim_provider_tokens("default", alice, PROVIDER, "b", now=T0, until=later)
    assert not store.replace_claimed_provider_tokens(_row(alice, sealed="sealed:v1:b"), "b")
    store.release_provider_tokens("default", alice, PROVIDER, "b")  # not b's to release
    assert not store.claim_provider_tokens("default", alice, PROVIDER, "b", now=T0, until=later)
    assert store.replace_claimed_provider_tokens(_row(alice, sealed="sealed:v1:a"), "a")
    assert store.get_provider_tokens("default", alice, PROVIDER).sealed == "sealed:v1:a"
    assert not store.replace_claimed_provider_tokens(_row(alice, sealed="sealed:v1:again"), "a")  # ended
    assert store.claim_provider_tokens("default", alice, PROVIDER, "b", now=T0, until=later)
    store.release_provider_tokens("default", alice, PROVIDER, "b")
    assert store.claim_provider_tokens("default", alice, PROVIDER, "c", now=T0, until=later)
    # An expired claim (a process that died mid-refresh) does not hold the row for ever.
    assert store.claim_provider_tokens(
        "default", alice, PROVIDER, "d", now=later, until=later + timedelta(seconds=30)
    )
    assert not store.replace_claimed_provider_tokens(_row(alice), "c")
    store.save_provider_tokens(_row(alice))  # a save ends any claim
    assert store.claim_provider_tokens("default", alice, PROVIDER, "e", now=T0, until=later)
    assert store.get_provider_tokens("default", alice, PROVIDER) == _row(alice)


def test_deleting_the_user_deletes_the_rows(store: Any) -> None:
    alice, bob = _user(store), _user(store, "bob")
    store.save_provider_tokens(_row(alice))
    store.save_provider_tokens(_row(alice, "another"))
    store.save_provider_tokens(_row(bob))
    store.delete_user("default", "alice")
    assert store.provider_tokens_of_user("default", alice) == []
    assert store.provider_tokens_of_user("default", bob) == [_row(bob)]


def test_a_unit_rolled_back_keeps_no_token_row(store: Any) -> None:
    alice = _user(store)
    unit = store.begin_unit()
    store.save_provider_tokens(_row(alice))
    unit.rollback()
    assert store.get_provider_tokens("default", alice, PROVIDER) is None
    store.save_provider_tokens(_row(alice))
    unit = store.begin_unit()
    store.delete_provider_tokens("default", alice, PROVIDER)
    unit.rollback()
    assert store.get_provider_tokens("default", alice, PROVIDER) == _row(alice)


def test_parallel_claims_have_one_winner(store: Any) -> None:
    alice = _user(store)
    store.save_provider_tokens(_row(alice))
    barrier = threading.Barrier(8)
    won: list[bool] = []

    def claim(index: int) -> None:
        barrier.wait(10)
        won.append(
            store.claim_provider_tokens(
                "default", alice, PROVIDER, f"c{index}", now=T0, until=T0 + timedelta(seconds=30)
            )
        )

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(won) == [False] * 7 + [True]


# --- processes against PostgreSQL --------------------------------------------------------------


def _refresh_worker(url: str, discovery_url: str, user_id: str, ready: Any, go: Any, out: Any) -> None:
    """One worker process: discover the provider, wait for the start, ask for the token."""
    backend = SqlAlchemyBackend(url, create_tables=False)
    http = RequestsHttpClient()
    config = provider_config_at(discovery_url)
    kept = keeper(backend, SystemClock(), http, config)
    kept.tokens.registry.get(PROVIDER, "default")
    ready.put(True)
    go.wait(60)
    try:
        out.put(kept.get(user_id))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out.put(f"error: {type(exc).__name__}: {exc}")
    finally:
        backend.engine.dispose()


def provider_config_at(discovery_url: str) -> OAuthProviderConfig:
    return OAuthProviderConfig(
        discovery_url,
        CLIENT_ID,
        CLIENT_SECRET,
        REDIRECT_URI,
        store_tokens=True,
        scopes=("openid", "email", "offline_access"),
    )


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_worker_processes_refresh_once(postgres_server: PostgresServer) -> None:
    served = ServedProvider()
    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        script = Scripted(delay=0.5)
        script.install(served.provider)
        served.provider.register_client(CLIENT_ID, CLIENT_SECRET, [REDIRECT_URI])
        alice = _user(backend)
        kept = keeper(backend, SystemClock(), RequestsHttpClient(), provider_config(served.provider))
        kept.keep(alice, refresh=script.new_refresh_token(), expires_in=0)  # expired already
        ready, go, out = SPAWN.Queue(), SPAWN.Event(), SPAWN.Queue()
        workers = [
            SPAWN.Process(
                target=_refresh_worker, args=(url, served.provider.discovery_url, alice, ready, go, out)
            )
            for _ in range(WORKERS)
        ]
        for worker in workers:
            worker.start()
        for _ in workers:
            ready.get(timeout=120)
        go.set()
        tokens = [out.get(timeout=120) for _ in workers]
        for worker in workers:
            worker.join(30)
        assert len(script.refreshes) == 1
        assert len(set(tokens)) == 1 and tokens[0].startswith("access-"), tokens
        assert kept.get(alice) == tokens[0]  # the refreshed row serves this process too
    finally:
        backend.engine.dispose()
        served.stop()
