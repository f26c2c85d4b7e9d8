"""``AUTHFLOW_ISSUER*`` wiring: ``AuthFlow.init_app`` builds the issuer on the configured key store.

Covers the blueprint mount, each store kind (memory, ``file:<dir>``, ``sql`` on SQLite and
PostgreSQL) surviving a second app start with the same key, the other ``AUTHFLOW_ISSUER_*``
keys, and the refusals: a bad store spec is a ``ConfigurationError`` naming the key, and a
damaged file store is a ``KeyStoreError`` at start-up, never a silent new key.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from flask_authflow import AuthFlow, get_state
from flask_authflow._clock import MockClock
from flask_authflow.errors import ConfigurationError, IssuanceError, KeyStoreError
from flask_authflow.issuer import (
    FileLocalIdpKeyStore,
    LocalIdp,
    LocalIdpSigningKey,
    MemoryLocalIdpKeyStore,
    MintClaims,
)
from flask_authflow.jose import JwtVerifier
from flask_authflow.jose._jwks import JwksHandle
from flask_authflow.storage._memory import InMemoryBackend
from tests.appfactory import AppFactory, base_app

ISS = "https://issuer.example"
AUD = "api://wiring"


#: What these tests change in the base config: the issuer on, with the throwaway memory key
#: store unless a test names another, and sessions in memory.
ISSUER_ON: dict[str, Any] = {
    "AUTHFLOW_SESSION_STORE": "memory",
    "AUTHFLOW_ISSUER": ISS,
    "AUTHFLOW_ISSUER_KEY_STORE": "memory",
}


def fast_backend() -> InMemoryBackend:
    return InMemoryBackend()


@pytest.fixture
def issuer_app(app_factory: AppFactory) -> AppFactory:
    """``app_factory`` with :data:`ISSUER_ON` under the test's own overrides."""

    def make(**overrides: Any) -> Flask:
        return app_factory(**{**ISSUER_ON, **overrides})

    return make


@pytest.fixture
def disposing() -> Iterator[Callable[[Flask], Flask]]:
    """Registers apps whose SQL engines (backend and key store) are disposed at teardown."""
    apps: list[Flask] = []
    yield apps.append  # type: ignore[misc]
    for app in apps:
        state = get_state(app)
        store = state.issuer.key_store if state.issuer is not None else None
        if store is not None and hasattr(store, "dispose"):
            store.dispose()
        engine = getattr(state.backend, "engine", None)
        if engine is not None:
            engine.dispose()


def issuer_of(app: Flask) -> LocalIdp:
    issuer = get_state(app).issuer
    assert isinstance(issuer, LocalIdp)
    return issuer


def served_jwks(app: Flask, path: str = "/jwks.json") -> dict[str, Any]:
    response = app.test_client().get(path)
    assert response.status_code == 200, response.data
    body = response.get_json()
    assert isinstance(body, dict)
    return body


def mint_and_verify(app: Flask, path: str = "/jwks.json") -> dict[str, Any]:
    """Mint with the app's issuer and verify against the JWKS the app serves."""
    issuer = issuer_of(app)
    exp = issuer.clock.now() + timedelta(minutes=5)
    token = issuer.mint(MintClaims("svc", exp).with_audience(AUD))
    verifier = JwtVerifier(JwksHandle(served_jwks(app, path)), clock=issuer.clock).with_algorithms(
        ["ES256", "RS256"]
    )
    return dict(verifier.verify(token, AUD, issuer=ISS).claims)


# -- mounting -------------------------------------------------------------------------------------------


def test_issuer_off_by_default_mounts_nothing(app_factory: AppFactory) -> None:
    app = app_factory(AUTHFLOW_SESSION_STORE="memory", backend=fast_backend())
    assert get_state(app).issuer is None
    assert "authflow_issuer" not in app.blueprints
    client = app.test_client()
    assert client.get("/jwks.json").status_code == 404
    assert client.get("/.well-known/openid-configuration").status_code == 404


def test_memory_store_mounts_the_issuer_blueprint(issuer_app: AppFactory) -> None:
    clock = MockClock()
    app = issuer_app(clock=clock)
    issuer = issuer_of(app)
    assert "authflow_issuer" in app.blueprints
    assert issuer.issuer == ISS
    assert isinstance(issuer.key_store, MemoryLocalIdpKeyStore)
    assert issuer.clock is clock  # the extension's clock, not the wall clock
    assert issuer.algorithm == "ES256"

    doc = app.test_client().get("/.well-known/openid-configuration").get_json()
    assert doc["issuer"] == ISS
    assert doc["jwks_uri"] == f"{ISS}/jwks.json"
    assert doc["id_token_signing_alg_values_supported"] == ["ES256"]
    keys = served_jwks(app)["keys"]
    assert [k["kid"] for k in keys] == [issuer.current_kid]
    assert keys[0]["kty"] == "EC" and "d" not in keys[0]

    claims = mint_and_verify(app)
    assert claims["iss"] == ISS and claims["sub"] == "svc"
    assert claims["iat"] == int(clock.now().timestamp())


@pytest.mark.authflow_stores("sql")  # the key store in the app's SQL database
def test_default_key_store_is_sql_in_the_apps_database(tmp_path: Path, app_factory: AppFactory) -> None:
    """Without AUTHFLOW_ISSUER_KEY_STORE the keys live in the app's
    database, so a second app (another worker, a CLI run) signs with the same key."""
    from flask_authflow.storage._sql.keystore import SqlAlchemyLocalIdpKeyStore

    config = {
        "AUTHFLOW_SESSION_STORE": "memory",
        "AUTHFLOW_ISSUER": ISS,  # and no AUTHFLOW_ISSUER_KEY_STORE
        "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}",
        "AUTHFLOW_SIGNING_KEY": secrets.token_bytes(32),  # one for both: the keys are sealed under it
    }
    apps = [app_factory(backend=fast_backend(), **config) for _ in range(2)]
    first, second = (issuer_of(app) for app in apps)
    assert isinstance(first.key_store, SqlAlchemyLocalIdpKeyStore)
    assert first.current_kid == second.current_kid


def test_memory_store_keys_die_with_the_app(issuer_app: AppFactory) -> None:
    assert issuer_of(issuer_app()).current_kid != issuer_of(issuer_app()).current_kid


def test_rs256_algorithm_generates_an_rsa_key(issuer_app: AppFactory) -> None:
    app = issuer_app(AUTHFLOW_ISSUER_ALGORITHM="RS256")
    issuer = issuer_of(app)
    assert issuer.algorithm == "RS256"
    (jwk,) = served_jwks(app)["keys"]
    assert jwk["kty"] == "RSA" and jwk["alg"] == "RS256"
    assert not {"d", "p", "q", "dp", "dq", "qi"} & set(jwk)
    assert mint_and_verify(app)["sub"] == "svc"


def test_unknown_algorithm_is_refused(issuer_app: AppFactory) -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_ISSUER_ALGORITHM"):
        issuer_app(AUTHFLOW_ISSUER_ALGORITHM="HS256")


def test_base_url_sets_jwks_uri_and_the_host_header_does_not(issuer_app: AppFactory) -> None:
    app = issuer_app(AUTHFLOW_ISSUER_BASE_URL="https://public.example/auth/")
    client = app.test_client()
    doc = client.get(
        "/.well-known/openid-configuration",
        headers={"Host": "evil.example", "X-Forwarded-Host": "evil.example"},
    ).get_json()
    assert doc["issuer"] == ISS
    assert doc["jwks_uri"] == "https://public.example/auth/jwks.json"


def test_url_prefix_moves_both_routes(issuer_app: AppFactory) -> None:
    app = issuer_app(
        AUTHFLOW_ISSUER="https://issuer.example/idp",
        AUTHFLOW_ISSUER_URL_PREFIX="/idp",
    )
    client = app.test_client()
    assert client.get("/jwks.json").status_code == 404
    assert client.get("/.well-known/openid-configuration").status_code == 404
    doc = client.get("/idp/.well-known/openid-configuration").get_json()
    # The issuer string includes the prefix, so the default base URL points at the real route.
    assert doc["jwks_uri"] == "https://issuer.example/idp/jwks.json"
    assert [k["kid"] for k in served_jwks(app, "/idp/jwks.json")["keys"]] == [issuer_of(app).current_kid]


def test_max_lifetime_caps_minting(issuer_app: AppFactory) -> None:
    app = issuer_app(AUTHFLOW_ISSUER_MAX_LIFETIME=timedelta(minutes=10))
    issuer = issuer_of(app)
    now = issuer.clock.now()
    assert issuer.max_lifetime == timedelta(minutes=10)
    issuer.mint(MintClaims("svc", now + timedelta(minutes=10)))
    with pytest.raises(IssuanceError, match="over the maximum of 600s"):
        issuer.mint(MintClaims("svc", now + timedelta(minutes=10, seconds=1)))


def test_max_lifetime_in_seconds_and_its_ceiling(issuer_app: AppFactory) -> None:
    assert issuer_of(issuer_app(AUTHFLOW_ISSUER_MAX_LIFETIME=90)).max_lifetime == timedelta(seconds=90)
    with pytest.raises(ConfigurationError, match="AUTHFLOW_ISSUER_MAX_LIFETIME"):
        issuer_app(AUTHFLOW_ISSUER_MAX_LIFETIME=timedelta(days=2))


# -- bad store specs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["file:", "disk", "sql:", "FILE:/tmp/x", "memory ", "", "sqlite:///x.db"])
def test_bad_store_spec_names_the_key(spec: str) -> None:
    app = base_app(**{**ISSUER_ON, "AUTHFLOW_ISSUER_KEY_STORE": spec})
    with pytest.raises(ConfigurationError, match="AUTHFLOW_ISSUER_KEY_STORE") as info:
        AuthFlow(app, backend=fast_backend())
    assert "file:<directory>" in info.value.message
    # A refused configuration leaves the app untouched, so it can be fixed and retried.
    assert "authflow" not in app.extensions
    assert "authflow_issuer" not in app.blueprints
    app.config["AUTHFLOW_ISSUER_KEY_STORE"] = "memory"
    AuthFlow(app, backend=fast_backend())
    assert get_state(app).issuer is not None


# -- file store -----------------------------------------------------------------------------------------


def test_file_store_is_initialized_on_first_start_and_reloaded_on_the_second(
    tmp_path: Path, issuer_app: AppFactory
) -> None:
    directory = tmp_path / "keys"
    first = issuer_app(AUTHFLOW_ISSUER_KEY_STORE=f"file:{directory}")
    kid = issuer_of(first).current_kid
    assert isinstance(issuer_of(first).key_store, FileLocalIdpKeyStore)
    assert (directory / "current.kid").read_text() == f"{kid}\n"
    pem = directory / "historical" / f"{kid}.pem"
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    token = issuer_of(first).mint(
        MintClaims("svc", issuer_of(first).clock.now() + timedelta(minutes=1)).with_audience(AUD)
    )

    second = issuer_app(AUTHFLOW_ISSUER_KEY_STORE=f"file:{directory}")
    assert issuer_of(second).current_kid == kid
    assert served_jwks(second) == served_jwks(first)
    assert sorted(p.name for p in (directory / "historical").iterdir()) == [f"{kid}.pem"]
    # A token of the first process verifies against the second one's JWKS.
    verifier = JwtVerifier(JwksHandle(served_jwks(second)), clock=issuer_of(first).clock)
    assert verifier.with_algorithms(["ES256"]).verify(token, AUD, issuer=ISS).sub == "svc"


def test_file_store_rotation_survives_a_restart(tmp_path: Path, issuer_app: AppFactory) -> None:
    spec = f"file:{tmp_path / 'keys'}"
    first = issuer_app(AUTHFLOW_ISSUER_KEY_STORE=spec)
    old = issuer_of(first).current_kid
    issuer_of(first).rotate_signing_key(LocalIdpSigningKey.generate_es256().with_key_id("second"))
    restarted = issuer_app(AUTHFLOW_ISSUER_KEY_STORE=spec)
    assert issuer_of(restarted).current_kid == "second"
    assert [k["kid"] for k in served_jwks(restarted)["keys"]] == ["second", old]


def test_file_store_in_an_existing_empty_directory_is_initialized(
    tmp_path: Path, issuer_app: AppFactory
) -> None:
    directory = tmp_path / "provisioned"
    directory.mkdir(mode=0o755)
    app = issuer_app(AUTHFLOW_ISSUER_KEY_STORE=f"file:{directory}")
    assert (directory / "current.kid").read_text() == f"{issuer_of(app).current_kid}\n"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def _initialized_store(tmp_path: Path) -> tuple[Path, str]:
    directory = tmp_path / "keys"
    FileLocalIdpKeyStore.initialize(directory, LocalIdpSigningKey.generate_es256().with_key_id("k1"))
    return directory, "k1"


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _world_readable_key(directory: Path, kid: str) -> None:
    os.chmod(directory / "historical" / f"{kid}.pem", 0o644)


def _traversal_kid(directory: Path, kid: str) -> None:
    (directory / "current.kid").write_text("../current\n")


def _garbage_kid(directory: Path, kid: str) -> None:
    (directory / "current.kid").write_bytes(b"\xff\xfe not a kid")


def _empty_kid(directory: Path, kid: str) -> None:
    (directory / "current.kid").write_text("")


def _dangling_kid(directory: Path, kid: str) -> None:
    (directory / "current.kid").write_text("gone\n")


def _symlinked_kid(directory: Path, kid: str) -> None:
    (directory / "current.kid").unlink()
    (directory / "elsewhere").write_text(f"{kid}\n")
    os.symlink(directory / "elsewhere", directory / "current.kid")


def _deleted_kid(directory: Path, kid: str) -> None:
    (directory / "current.kid").unlink()


def _corrupt_pem(directory: Path, kid: str) -> None:
    (directory / "historical" / f"{kid}.pem").write_bytes(b"-----BEGIN PRIVATE KEY-----\nnope\n")


def _group_writable_historical(directory: Path, kid: str) -> None:
    os.chmod(directory / "historical", 0o770)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_world_readable_key, "chmod 600"),
        (_traversal_kid, "current.kid does not hold a valid key id"),
        (_garbage_kid, "current.kid does not hold a valid key id"),
        (_empty_kid, "current.kid does not hold a valid key id"),
        (_dangling_kid, "historical/gone.pem is missing"),
        (_symlinked_kid, "symlinks are refused"),
        (_deleted_kid, "current.kid is missing"),
        (_corrupt_pem, "unusable"),
        (_group_writable_historical, "chmod 700"),
    ],
)
def test_damaged_file_store_fails_init_app_without_a_new_key(
    tmp_path: Path, damage: Callable[[Path, str], None], message: str
) -> None:
    directory, kid = _initialized_store(tmp_path)
    damage(directory, kid)
    before = _files(directory)
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in directory.rglob("*") if not p.is_symlink()}
    app = base_app(**{**ISSUER_ON, "AUTHFLOW_ISSUER_KEY_STORE": f"file:{directory}"})
    with pytest.raises(KeyStoreError, match=message):
        AuthFlow(app, backend=fast_backend())
    assert _files(directory) == before  # nothing written: no silent new key
    assert {p: stat.S_IMODE(p.stat().st_mode) for p in modes} == modes  # nothing "repaired" either
    assert "authflow" not in app.extensions


# -- SQL store ------------------------------------------------------------------------------------------


@pytest.mark.authflow_stores("sql")  # the key store in the app's SQL database
def test_sql_store_keeps_the_key_across_two_app_instances(
    database_url: str, disposing: Callable[[Flask], Flask], issuer_app: AppFactory
) -> None:
    from flask_authflow.storage._sql.keystore import SqlAlchemyLocalIdpKeyStore
    from flask_authflow.storage._sql.migrations import upgrade

    upgrade(database_url)  # flask authflow db upgrade: PostgreSQL refuses a database behind head
    # One signing key: the issuer keys are sealed under a key derived from it.
    config = {
        "AUTHFLOW_DATABASE_URL": database_url,
        "AUTHFLOW_ISSUER_KEY_STORE": "sql",
        "AUTHFLOW_SIGNING_KEY": secrets.token_bytes(32),
    }
    first = issuer_app(**config)
    disposing(first)
    store = issuer_of(first).key_store
    assert isinstance(store, SqlAlchemyLocalIdpKeyStore)
    # The store shares the backend's engine (one pool per app, one database).
    assert store.engine is get_state(first).backend.engine
    kid = issuer_of(first).current_kid

    second = issuer_app(**config)
    disposing(second)
    assert issuer_of(second).current_kid == kid
    assert served_jwks(second) == served_jwks(first)
    assert len(issuer_of(second).loaded_keys().all_keys) == 1  # no second key was seeded

    issuer_of(first).rotate_signing_key(LocalIdpSigningKey.generate_es256().with_key_id("rotated"))
    assert issuer_of(second).reload() is True
    assert issuer_of(second).current_kid == "rotated"
    assert [k["kid"] for k in served_jwks(second)["keys"]] == ["rotated", kid]
    assert mint_and_verify(second)["sub"] == "svc"


@pytest.mark.authflow_stores("sql")  # the key store in the app's SQL database
def test_sql_store_with_a_custom_backend_uses_the_database_url(
    tmp_path: Path, disposing: Callable[[Flask], Flask], issuer_app: AppFactory
) -> None:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    signing = secrets.token_bytes(32)
    config = {
        "AUTHFLOW_DATABASE_URL": url,
        "AUTHFLOW_ISSUER_KEY_STORE": "sql",
        "AUTHFLOW_SIGNING_KEY": signing,
    }
    first = issuer_app(backend=fast_backend(), **config)
    disposing(first)
    second = issuer_app(backend=fast_backend(), **config)
    disposing(second)
    assert (tmp_path / "keys.db").exists()
    assert issuer_of(first).current_kid == issuer_of(second).current_kid
    assert mint_and_verify(second)["iss"] == ISS


@pytest.mark.parametrize("prefix", ["/idp", "/auth/issuer"])
def test_discovery_jwks_uri_honours_the_url_prefix(prefix: str, issuer_app: AppFactory) -> None:
    """The advertised jwks_uri answers 200 through the app."""
    app = issuer_app(AUTHFLOW_ISSUER_URL_PREFIX=prefix)
    client = app.test_client()
    discovery = client.get(f"{prefix}/.well-known/openid-configuration")
    assert discovery.status_code == 200
    jwks_uri = discovery.get_json()["jwks_uri"]
    assert jwks_uri == f"{ISS}{prefix}/jwks.json"
    served = client.get(jwks_uri.removeprefix(ISS))
    assert served.status_code == 200
    assert served.get_json() == issuer_of(app).jwks()


def test_jwks_max_age_comes_from_the_config(issuer_app: AppFactory) -> None:
    app = issuer_app(AUTHFLOW_ISSUER_JWKS_MAX_AGE=timedelta(minutes=1))
    client = app.test_client()
    for path in ("/jwks.json", "/.well-known/openid-configuration"):
        assert client.get(path).headers["Cache-Control"] == "public, max-age=60"
    assert issuer_of(app).jwks_max_age == timedelta(minutes=1)
    # The builder returns a new issuer and validates its input.
    idp = issuer_of(app)
    assert idp.with_jwks_max_age(timedelta(0)).jwks_max_age == timedelta(0)
    assert idp.jwks_max_age == timedelta(minutes=1)
    with pytest.raises(ConfigurationError):
        idp.with_jwks_max_age(timedelta(seconds=-1))
