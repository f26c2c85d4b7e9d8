"""A backend declares the aggregates it keeps (``store_ports()``); ``init_app`` checks the
configuration against them and the flows receive the ports they need. Nothing asks a store
at run time what it can do (tests/test_no_probing.py)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask

from flask_authflow import AuthFlow, get_state
from flask_authflow._clock import MockClock
from flask_authflow._core.ports import StorePorts
from flask_authflow._web.state import account_admin
from flask_authflow.errors import ConfigurationError
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login import _verification as verification
from flask_authflow.login._accounts import AccountAdmin
from flask_authflow.login._password import PasswordHasher
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing import add_user

PROVIDERS = {
    "corp": {
        "discovery_url": "https://idp.example/.well-known/openid-configuration",
        "client_id": "c",
        "client_secret": "s",
        "redirect_uri": "https://app.example/auth/callback/corp",
    }
}


class LoginOnlyBackend(InMemoryBackend):
    """An application's own backend that keeps users, factors, attempts and audit rows only."""

    def store_ports(self) -> StorePorts:
        return StorePorts(login=self)


@pytest.fixture
def make_app(mock_clock: MockClock, authflow_hasher: PasswordHasher) -> Callable[..., Flask]:
    def make(backend: Any, **config: Any) -> Flask:
        app = Flask("ports_test_app")
        app.config.update(
            TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_SESSION_STORE="memory"
        )
        app.config.update(config)
        AuthFlow(
            app,
            backend=backend,
            session_store=MemorySessionStore(clock=mock_clock),
            clock=mock_clock,
            hasher=authflow_hasher,
        )
        return app

    return make


def test_the_built_in_backends_declare_every_port(mock_clock: MockClock) -> None:
    backend = InMemoryBackend(clock=mock_clock)
    ports = backend.store_ports()
    assert ports == StorePorts(
        login=backend, account_tokens=backend, identity_links=backend, provider_tokens=backend
    )


def test_the_app_state_holds_what_the_backend_declared(make_app: Callable[..., Flask]) -> None:
    backend = InMemoryBackend()
    state = get_state(make_app(backend))
    assert state.ports.login is state.backend
    assert state.service.account_tokens is state.ports.account_tokens


@pytest.mark.parametrize("setting", ["AUTHFLOW_REGISTRATION", "AUTHFLOW_PASSWORD_RESET"])
def test_sign_up_or_reset_without_an_account_token_port_is_refused_at_init_app(
    make_app: Callable[..., Flask], setting: str
) -> None:
    with pytest.raises(ConfigurationError, match="account_tokens=None"):
        make_app(
            LoginOnlyBackend(),
            **{setting: True, "AUTHFLOW_EXTERNAL_URL": "https://app.example"},
        )


def test_federation_without_an_identity_link_port_is_refused_at_init_app(
    make_app: Callable[..., Flask],
) -> None:
    with pytest.raises(ConfigurationError, match="identity_links=None"):
        make_app(LoginOnlyBackend(), AUTHFLOW_OAUTH_PROVIDERS=PROVIDERS)


def test_a_backend_without_account_tokens_runs_what_needs_none(make_app: Callable[..., Flask]) -> None:
    """No sign-up and no reset: the app starts; a login never asks for a verification the
    backend cannot hold, and a flow that needs the port is refused by name."""
    app = make_app(LoginOnlyBackend())
    state = get_state(app)
    assert state.service.account_tokens is None
    user = state.backend.create_user("default", "alice", email="alice@example.org")
    assert verification.needs_verification(state.service, user) is False
    with pytest.raises(ConfigurationError, match="account tokens"):
        account_tokens.token_store(state.service.account_tokens)


# --- the store receives hashes: login/ hashes with the app's hasher ------------------------------


def test_account_admin_hashes_with_the_apps_hasher_and_the_store_keeps_the_hash(
    make_app: Callable[..., Flask], authflow_hasher: PasswordHasher
) -> None:
    app = make_app(InMemoryBackend())
    state = get_state(app)
    with app.app_context():
        user = account_admin(app).create_user(
            "default", "alice", "a long enough passphrase", check_policy=False
        )
    stored = state.backend.get_password_hash("default", user.user_id)
    assert stored is not None and "a long enough passphrase" not in stored
    assert authflow_hasher.verify(stored, "a long enough passphrase")
    assert not authflow_hasher.needs_rehash(stored)  # made with the app's parameters


def test_a_password_set_without_the_service_is_hashed_by_the_admin(mock_clock: MockClock) -> None:
    backend = InMemoryBackend(clock=mock_clock)
    hasher = PasswordHasher.fast_for_tests()
    admin = AccountAdmin(backend, MemorySessionStore(clock=mock_clock), hasher=hasher)
    user = admin.create_user("default", "bob", "first passphrase of bob", check_policy=False)
    admin.set_password("default", "bob", "second passphrase of bob")
    stored = backend.get_password_hash("default", user.user_id)
    assert stored is not None and hasher.verify(stored, "second passphrase of bob")
    assert not hasher.verify(stored, "first passphrase of bob")


def test_add_user_hashes_for_tests(mock_clock: MockClock) -> None:
    backend = InMemoryBackend(clock=mock_clock)
    carol = add_user(backend, "default", "carol", "carol's passphrase")
    dave = add_user(backend, "default", "dave")  # no password: no password factor
    stored = backend.get_password_hash("default", carol.user_id)
    assert stored is not None and PasswordHasher.fast_for_tests().verify(stored, "carol's passphrase")
    assert backend.get_password_hash("default", dave.user_id) is None
