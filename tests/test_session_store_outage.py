"""While the session store is down, a change (login, logout) is a 503 that leaves the stored
session as it was, and a read serves a guest; any SQLAlchemy error is StoreUnavailable."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from flask_authflow import AuthFlow, current_session, get_state
from flask_authflow._responses import SERVER_ERROR_MESSAGE
from flask_authflow.errors import StoreUnavailable
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory


class _DownStore(MemorySessionStore):
    """A memory store where every operation fails while ``down`` is set (a full outage)."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("session store down")

    def load(self, sid):  # type: ignore[no-untyped-def]
        self._check()
        return super().load(sid)

    def save(self, record, expires_at, *, replaces=(), existing=False):  # type: ignore[no-untyped-def]
        self._check()
        return super().save(record, expires_at, replaces=replaces, existing=existing)

    def delete(self, sid):  # type: ignore[no-untyped-def]
        self._check()
        super().delete(sid)


def _outage_app(app_factory: AppFactory, store: _DownStore) -> tuple[Flask, AuthFlow]:
    """An ``app_factory`` app on ``store``, with the user bob, a login and a logout."""
    authflow = AuthFlow()
    app = app_factory(authflow=authflow, session_store=store)
    backend = get_state(app).backend
    assert isinstance(backend, InMemoryBackend)
    add_user(backend, "default", "bob", "pw-bob-1")

    @app.post("/logout")
    def logout() -> str:
        authflow.login.logout()
        return "logged out"

    @app.post("/login")
    def login() -> str:
        outcome = authflow.login.password("bob", "pw-bob-1")
        return type(outcome).__name__

    @app.get("/state")
    def state() -> str:
        return current_session.state.value

    return app, authflow


def test_logout_while_the_store_cannot_be_read_is_503_not_a_fake_success(
    app_factory: AppFactory, mock_clock: Any
) -> None:
    from flask_authflow.testing import login_test_client

    store = _DownStore(clock=mock_clock)
    app, _ = _outage_app(app_factory, store)
    client = login_test_client(app, "alice")
    assert client.get("/state").text == "authenticated"
    store.down = True
    response = client.post("/logout", headers={"Accept": "application/json"})
    # Before the fix: 200 "logged out", while the session stayed valid in the store.
    assert response.status_code == 503
    assert response.json["error"] == "store_unavailable"
    assert response.json["message"].startswith(SERVER_ERROR_MESSAGE)
    assert response.headers["Cache-Control"] == "no-store"
    store.down = False
    assert client.get("/state").text == "authenticated"  # nothing happened, and the client was told so


def test_login_while_the_store_cannot_be_read_is_503(app_factory: AppFactory, mock_clock: Any) -> None:
    from flask_authflow.testing import login_test_client

    store = _DownStore(clock=mock_clock)
    app, _ = _outage_app(app_factory, store)
    client = login_test_client(app, "alice")  # the browser holds a session cookie
    store.down = True
    response = client.post("/login")
    assert response.status_code == 503  # before the fix: 200 "Authenticated", and nothing kept
    assert "Set-Cookie" not in response.headers
    store.down = False
    assert client.get("/state").text == "authenticated"  # still alice's untouched session


def test_reading_a_session_during_an_outage_still_serves_a_guest(
    app_factory: AppFactory, mock_clock: Any
) -> None:
    store = _DownStore(clock=mock_clock)
    app, _ = _outage_app(app_factory, store)
    store.down = True
    response = app.test_client().get("/state")
    assert response.status_code == 200
    assert response.text == "guest"


def test_any_sqlalchemy_error_in_the_session_store_is_store_unavailable(tmp_path: Path) -> None:
    from sqlalchemy.exc import InvalidRequestError

    from flask_authflow._core.crypto import SessionCrypto
    from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore

    store = SqlAlchemySessionStore(
        f"sqlite:///{tmp_path / 's.db'}", crypto=SessionCrypto(secrets.token_bytes(32))
    )

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise InvalidRequestError("not a driver error, still a broken store")

    class BrokenEngine:
        def connect(self) -> Any:
            return broken()

    store._read_engine = BrokenEngine()  # type: ignore[assignment]
    with pytest.raises(StoreUnavailable):
        store.load("x" * 43)
