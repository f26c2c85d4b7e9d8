"""Issuer private keys are encrypted at rest in the SQL key store."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_authflow import get_state
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow.errors import KeyStoreError
from flask_authflow.issuer import LocalIdp, LocalIdpSigningKey
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.keystore import SqlAlchemyLocalIdpKeyStore
from tests.appfactory import AppFactory

# The issuer's keys are read back from the app's SQL database.
pytestmark = pytest.mark.authflow_stores("sql")

ISS = "https://issuer.example"


def _rows(url: str) -> dict[str, str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return dict(conn.execute(sa.text("SELECT kid, pem FROM authflow_issuer_keys")).all())
    finally:
        engine.dispose()


def _issuer_on_sqlite(tmp_path: Path) -> dict[str, Any]:
    """What these apps change in the base config: an issuer whose keys live in ``app.db``."""
    return {
        "AUTHFLOW_SESSION_STORE": "memory",
        "AUTHFLOW_ISSUER": ISS,
        "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}",
        "backend": InMemoryBackend(),
    }


def _issuer(app: Flask) -> LocalIdp:
    issuer = get_state(app).issuer
    assert isinstance(issuer, LocalIdp)
    return issuer


def test_store_seals_private_keys_with_the_kid_as_associated_data(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    crypto = SessionCrypto(secrets.token_bytes(32))
    store = SqlAlchemyLocalIdpKeyStore(url, crypto=crypto)
    key = LocalIdpSigningKey.generate_es256().with_key_id("k1")
    store.rotate(key)
    stored = _rows(url)["k1"]
    assert stored.startswith("enc1:")
    assert "PRIVATE KEY" not in stored
    assert store.load_all().current == key
    # The sealed key copied onto another kid's row does not open.
    other = LocalIdpSigningKey.generate_es256().with_key_id("k2")
    store.rotate(other)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE authflow_issuer_keys SET pem = :p WHERE kid = 'k2'"), {"p": stored})
    engine.dispose()
    with pytest.raises(KeyStoreError, match="does not decrypt"):
        store.load_all()
    store.engine.dispose()


def test_wrong_key_and_missing_key_fail_closed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    SqlAlchemyLocalIdpKeyStore(url, crypto=SessionCrypto(secrets.token_bytes(32))).rotate(
        LocalIdpSigningKey.generate_es256()
    )
    with pytest.raises(KeyStoreError, match="does not decrypt"):
        SqlAlchemyLocalIdpKeyStore(url, crypto=SessionCrypto(secrets.token_bytes(32))).load_all()
    with pytest.raises(KeyStoreError, match="AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY"):
        SqlAlchemyLocalIdpKeyStore(url).load_all()


def test_rows_written_unencrypted_are_read_and_resealed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    legacy = SqlAlchemyLocalIdpKeyStore(url)  # what the old code wrote: plain PEM
    key = LocalIdpSigningKey.generate_rsa("PS256", 2048).with_key_id("old")
    legacy.rotate(key)
    assert _rows(url)["old"].startswith("-----BEGIN")
    sealed = SqlAlchemyLocalIdpKeyStore(url, crypto=SessionCrypto(secrets.token_bytes(32)))
    loaded = sealed.load_all()
    assert loaded.current == key and loaded.current.algorithm == "PS256"
    assert _rows(url)["old"].startswith("enc1:")
    assert sealed.load_all().current == key
    legacy.engine.dispose()
    sealed.engine.dispose()


def test_app_encrypts_under_the_configured_key_and_honours_previous_keys(
    tmp_path: Path, app_factory: AppFactory
) -> None:
    signing = secrets.token_bytes(32)
    old_kek, new_kek = secrets.token_bytes(32), secrets.token_bytes(32)
    first = app_factory(
        **_issuer_on_sqlite(tmp_path),
        AUTHFLOW_SIGNING_KEY=signing,
        AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY=old_kek,
    )
    kid = _issuer(first).current_kid
    assert _rows(f"sqlite:///{tmp_path / 'app.db'}")[kid].startswith("enc1:")
    with pytest.raises(KeyStoreError):
        app_factory(
            **_issuer_on_sqlite(tmp_path),
            AUTHFLOW_SIGNING_KEY=signing,
            AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY=new_kek,
        )
    rotated = app_factory(
        **_issuer_on_sqlite(tmp_path),
        AUTHFLOW_SIGNING_KEY=signing,
        AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY=new_kek,
        AUTHFLOW_PREVIOUS_ISSUER_KEY_ENCRYPTION_KEYS=[old_kek],
    )
    assert _issuer(rotated).current_kid == kid


def test_derived_key_follows_signing_key_rotation(tmp_path: Path, app_factory: AppFactory) -> None:
    old_signing, new_signing = secrets.token_bytes(32), secrets.token_bytes(32)
    kid = _issuer(app_factory(**_issuer_on_sqlite(tmp_path), AUTHFLOW_SIGNING_KEY=old_signing)).current_kid
    stored = _rows(f"sqlite:///{tmp_path / 'app.db'}")[kid]
    assert stored.startswith("enc1:") and "PRIVATE KEY" not in stored
    with pytest.raises(KeyStoreError):
        app_factory(**_issuer_on_sqlite(tmp_path), AUTHFLOW_SIGNING_KEY=new_signing)
    app = app_factory(
        **_issuer_on_sqlite(tmp_path),
        AUTHFLOW_SIGNING_KEY=new_signing,
        AUTHFLOW_PREVIOUS_SIGNING_KEYS=[old_signing],
    )
    assert _issuer(app).current_kid == kid
