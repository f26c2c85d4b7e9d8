"""Staged key rotation that relying parties caching the JWKS can follow, on every key store.

stage (published, not signing) → activate once the JWKS max-age has passed → prune a
retired key once its longest token has expired. Time comes from a MockClock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from flask_authflow import get_state
from flask_authflow._clock import MockClock
from flask_authflow._core.encoding import b64url_decode
from flask_authflow.errors import DuplicateKeyId, RotationRefused, UnknownKeyId
from flask_authflow.issuer import (
    FileLocalIdpKeyStore,
    LocalIdp,
    LocalIdpSigningKey,
    MemoryLocalIdpKeyStore,
    MintClaims,
)
from flask_authflow.jose import JwtVerifier
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.keystore import SqlAlchemyLocalIdpKeyStore
from tests.appfactory import AppFactory

ISS = "https://issuer.test"
NOW = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)
MAX_AGE = timedelta(minutes=5)
LIFETIME = timedelta(hours=1)


def kid_of(token: str) -> str:
    return str(json.loads(b64url_decode(token.split(".")[0]))["kid"])


@pytest.fixture(params=["memory", "file", "sqlite", "postgresql"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A factory of stores that share their keys (a second call sees the first one's)."""
    made: list[Any] = []
    first = LocalIdpSigningKey.generate_es256()
    url: str | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'keys.db'}"
    elif request.param == "postgresql":
        url = request.getfixturevalue("postgres_server").new_database()
    memory = MemoryLocalIdpKeyStore.with_current(first) if request.param == "memory" else None

    def make(clock: MockClock) -> Any:
        if memory is not None:
            return memory
        if request.param == "file":
            directory = tmp_path / "keys"
            if not directory.exists():
                return FileLocalIdpKeyStore.initialize(directory, first)
            return FileLocalIdpKeyStore(directory)
        store = SqlAlchemyLocalIdpKeyStore(url, clock=clock)
        store.ensure_current(lambda: first)
        made.append(store)
        return store

    yield make
    for store in made:
        store.dispose()


def issuer(store: Any, clock: MockClock) -> LocalIdp:
    return (
        LocalIdp.from_key_store(ISS, store)
        .with_clock(clock)
        .with_max_lifetime(LIFETIME)
        .with_jwks_max_age(MAX_AGE)
        .with_reload_interval(None)
    )


def mint(idp: LocalIdp, clock: MockClock, minutes: int = 60) -> str:
    return idp.mint(MintClaims("svc", clock.now() + timedelta(minutes=minutes)).with_audience("api"))


def verify(idp: LocalIdp, token: str, clock: MockClock) -> Any:
    return (
        JwtVerifier(idp.jwks_handle(), clock=clock)
        .with_algorithms(["ES256"])
        .verify(token, "api", issuer=ISS)
    )


def test_stage_activate_prune(make_store: Any) -> None:
    clock = MockClock(NOW)
    idp = issuer(make_store(clock), clock)
    old = idp.current_kid
    before = mint(idp, clock)

    # 1. Stage: published, not signing.
    nxt = LocalIdpSigningKey.generate_es256()
    idp.stage_signing_key(nxt)
    assert {k["kid"] for k in idp.jwks()["keys"]} == {old, nxt.kid}
    assert kid_of(mint(idp, clock)) == old
    state = idp.rotation_state()
    assert state.staged_kid == nxt.kid and state.staged_at == NOW
    # Another process on the same store publishes it too after a reload.
    other = issuer(make_store(clock), clock)
    assert nxt.kid in {k["kid"] for k in other.jwks()["keys"]}

    # 2. Activation waits for the JWKS max-age.
    clock.advance(MAX_AGE - timedelta(seconds=1))
    with pytest.raises(RotationRefused, match="activate it at or after"):
        idp.activate_staged_key()
    assert kid_of(mint(idp, clock)) == old
    clock.advance(timedelta(seconds=1))
    assert idp.activate_staged_key() == nxt.kid
    after = mint(idp, clock)
    assert kid_of(after) == nxt.kid
    retired_at = clock.now()
    assert idp.rotation_state().retired_at[old] == retired_at
    assert idp.rotation_state().staged_kid is None
    # Tokens of both keys verify: the retired key stays published.
    assert verify(idp, before, clock).kid == old
    assert verify(idp, after, clock).kid == nxt.kid

    # 3. Pruning waits for the longest token of the retired key (+ 60 s skew).
    clock.advance(LIFETIME)
    assert idp.prune_retired_keys() == []
    assert old in {k["kid"] for k in idp.jwks()["keys"]}
    clock.advance(timedelta(seconds=60))
    assert idp.prune_retired_keys() == [old]
    assert {k["kid"] for k in idp.jwks()["keys"]} == {nxt.kid}
    with pytest.raises(UnknownKeyId):
        JwtVerifier(idp.jwks_handle(), clock=MockClock(NOW)).with_algorithms(["ES256"]).verify(
            before, "api", issuer=ISS
        )
    assert idp.rotation_state().retired_at == {}


def test_refusals_change_nothing(make_store: Any) -> None:
    clock = MockClock(NOW)
    idp = issuer(make_store(clock), clock)
    current = idp.current_kid
    with pytest.raises(RotationRefused, match="no staged key"):
        idp.activate_staged_key()
    with pytest.raises(DuplicateKeyId):
        issuer(make_store(clock), clock).key_store.stage(
            LocalIdpSigningKey.generate_es256().with_key_id(current), NOW
        )
    nxt = LocalIdpSigningKey.generate_es256()
    idp.stage_signing_key(nxt)
    with pytest.raises(RotationRefused, match="already staged"):
        idp.stage_signing_key(LocalIdpSigningKey.generate_es256())
    store = idp.key_store
    with pytest.raises(RotationRefused, match="current or staged"):
        store.prune([current])
    with pytest.raises(RotationRefused, match="current or staged"):
        store.prune([nxt.kid])
    with pytest.raises(RotationRefused, match="no key"):
        store.prune(["never-existed"])
    assert idp.current_kid == current and idp.rotation_state().staged_kid == nxt.kid
    # force activates early.
    assert idp.activate_staged_key(force=True) == nxt.kid


def test_a_key_retired_without_a_recorded_time_is_never_pruned(make_store: Any) -> None:
    clock = MockClock(NOW)
    idp = issuer(make_store(clock), clock)
    old = idp.current_kid
    idp.rotate_signing_key(LocalIdpSigningKey.generate_es256())  # immediate: no retirement time
    clock.advance(timedelta(days=30))
    assert idp.prune_retired_keys() == []
    assert old in {k["kid"] for k in idp.jwks()["keys"]}


@pytest.fixture
def cli_app(tmp_path: Path, app_factory: AppFactory) -> Iterator[Flask]:
    clock = MockClock(NOW)
    app = app_factory(
        clock=clock,
        backend=InMemoryBackend(),
        AUTHFLOW_SESSION_STORE="memory",
        AUTHFLOW_ISSUER=ISS,
        AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'cli.db'}",  # the issuer's keys
    )
    app.extensions["test_clock"] = clock
    yield app
    idp = get_state(app).issuer
    assert idp is not None
    idp.key_store.dispose()  # type: ignore[attr-defined]


@pytest.mark.authflow_stores("sql")  # the issuer's keys in cli.db, across CLI runs
def test_cli_procedure(cli_app: Flask) -> None:
    clock: MockClock = cli_app.extensions["test_clock"]
    runner = cli_app.test_cli_runner()
    idp = get_state(cli_app).issuer
    assert idp is not None
    first = idp.current_kid
    refused = runner.invoke(args=["authflow", "rotate-key"])
    assert refused.exit_code != 0 and "nothing is staged" in refused.output
    staged = runner.invoke(args=["authflow", "rotate-key", "--stage", "--kid", "next-2026"])
    assert staged.exit_code == 0 and "staged key next-2026" in staged.output
    early = runner.invoke(args=["authflow", "rotate-key"])
    assert (
        early.exit_code != 0 and "activate it at or after" in early.output and "Traceback" not in early.output
    )
    clock.advance(timedelta(minutes=5))
    done = runner.invoke(args=["authflow", "rotate-key"])
    assert done.exit_code == 0, done.output
    assert idp.current_kid == "next-2026"
    clock.advance(timedelta(hours=1, minutes=1))
    pruned = runner.invoke(args=["authflow", "rotate-key", "--prune"])
    assert pruned.exit_code == 0 and first in pruned.output
    assert {k["kid"] for k in idp.jwks()["keys"]} == {"next-2026"}
