"""The everyday services (``authflow.accounts``, ``.roles``, ``.tokens``, ``.sessions``,
``.devices``, ``.factors``, ``.login``, ``.federation``): one shape (the owner first,
``tenant=`` as a keyword defaulting to the app's default tenant), audited changes in one
unit of work, answers outside a request, and the refusals of bad input."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

import pyotp
import pytest
from flask import Flask

from flask_authflow import AuthFlow
from flask_authflow._core.session import sid_hash
from flask_authflow._outcomes import Authenticated, FactorKind, FactorRequired
from flask_authflow.api_auth import Tokens
from flask_authflow.authz import Roles
from flask_authflow.devices import Devices
from flask_authflow.errors import (
    AuditWriteError,
    ConfigurationError,
    InvalidInput,
    RoleNotFound,
    UserNotFound,
    WeakPassword,
)
from flask_authflow.federation import Federation
from flask_authflow.login import Accounts, Factors, Login
from flask_authflow.sessions import Sessions
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import login_test_client

PASSWORD = "plum tuesday kettle orbit 47"


@pytest.fixture
def site(mock_clock: Any, authflow_hasher: Any) -> tuple[Flask, AuthFlow, InMemoryBackend]:
    app = Flask(__name__)
    app.config.update(
        TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_DEFAULT_TENANT="acme"
    )
    backend = InMemoryBackend(clock=mock_clock)
    authflow = AuthFlow(
        app, backend=backend, session_store=MemorySessionStore(clock=mock_clock), hasher=authflow_hasher
    )
    return app, authflow, backend


def _events(backend: InMemoryBackend) -> list[tuple[str, str | None, str]]:
    return [(row.event, row.tenant, row.ip_source) for row in backend.audit_rows]


def test_each_service_is_its_feature_class(site: tuple[Flask, AuthFlow, InMemoryBackend]) -> None:
    app, authflow, _ = site
    with app.app_context():
        found = [
            authflow.accounts,
            authflow.roles,
            authflow.tokens,
            authflow.sessions,
            authflow.devices,
            authflow.factors,
            authflow.login,
            authflow.federation,
        ]
    kinds = [Accounts, Roles, Tokens, Sessions, Devices, Factors, Login, Federation]
    assert [type(service) for service in found] == kinds


def test_the_tenant_defaults_to_the_apps_and_a_bad_one_is_refused(
    site: tuple[Flask, AuthFlow, InMemoryBackend],
) -> None:
    app, authflow, backend = site
    with app.app_context():
        alice = authflow.accounts.create("alice", PASSWORD)
        other = authflow.accounts.create("alice", PASSWORD, tenant="beta")
        assert (alice.tenant, other.tenant) == ("acme", "beta")
        assert authflow.accounts.get("alice") == alice
        assert authflow.accounts.get("alice", tenant="beta") == other
        assert authflow.accounts.get("nobody") is None
        assert [u.identifier for u in authflow.accounts.list(tenant="beta")] == ["alice"]
        for bad in ("", "a\x00b", "x" * 300):
            with pytest.raises(InvalidInput):
                authflow.roles.list(tenant=bad)
            with pytest.raises(InvalidInput):
                authflow.tokens.list(alice.user_id, tenant=bad)
    assert backend.find_user("beta", "alice") == other


def test_accounts_refuse_a_weak_password_and_end_sessions_when_access_goes(
    site: tuple[Flask, AuthFlow, InMemoryBackend],
) -> None:
    app, authflow, backend = site
    with app.app_context():
        with pytest.raises(WeakPassword):
            authflow.accounts.create("bob", "short")
        assert authflow.accounts.get("bob") is None  # nothing was created
        authflow.accounts.create("bob", PASSWORD)
    login_test_client(app, "bob", password=PASSWORD)
    with app.app_context():
        bob = authflow.accounts.get("bob")
        assert bob is not None and len(authflow.sessions.list(bob.user_id)) == 1
        ended = authflow.accounts.set_password("bob", "another plum kettle 48 orbit")
        assert ended.sessions == 1 and authflow.sessions.list(bob.user_id) == []
        assert authflow.accounts.disable("bob") == 0
        authflow.accounts.enable("bob")
        assert authflow.accounts.delete("bob") == 0
        assert authflow.accounts.get("bob") is None
        with pytest.raises(UserNotFound):
            authflow.accounts.disable("bob")
    assert "password_changed" in [row.event for row in backend.audit_rows]


def test_roles_are_granted_revoked_and_audited_outside_a_request(
    site: tuple[Flask, AuthFlow, InMemoryBackend],
) -> None:
    app, authflow, backend = site
    with app.app_context():
        alice = authflow.accounts.create("alice", PASSWORD)
        roles = authflow.roles
        roles.create("editor", description="Edits documents")
        assert roles.grant_permission("editor", "documents:edit")
        assert not roles.grant_permission("editor", "documents:edit")  # no change: no row
        assert roles.grant(alice.user_id, "editor")
        assert not roles.grant(alice.user_id, "editor")
        assert roles.of_user(alice.user_id) == ["editor"]
        found = roles.get("editor")
        assert found is not None and found.permissions == ("documents:edit",)
        assert roles.get("nobody") is None
        with pytest.raises(RoleNotFound):
            roles.grant(alice.user_id, "nobody")
        assert roles.revoke(alice.user_id, "editor")
        assert roles.revoke_permission("editor", "documents:edit")
        roles.delete("editor")
        assert roles.list() == []
    assert [e for e in _events(backend) if e[0].startswith(("role", "permission"))] == [
        ("permission_granted", "acme", "unknown"),
        ("role_added", "acme", "unknown"),
        ("role_removed", "acme", "unknown"),
        ("permission_revoked", "acme", "unknown"),
        ("role_deleted", "acme", "unknown"),
    ]


def test_tokens_are_created_listed_got_and_revoked(site: tuple[Flask, AuthFlow, InMemoryBackend]) -> None:
    app, authflow, backend = site
    with app.app_context():
        alice = authflow.accounts.create("alice", PASSWORD)
        created = authflow.tokens.create(alice.user_id, "ci", ["notes:read"])
        assert [t.name for t in authflow.tokens.list(alice.user_id)] == ["ci"]
        got = authflow.tokens.get(alice.user_id, "ci")
        assert got is not None and got.token_id == created.record.token_id
        assert authflow.tokens.get(alice.user_id, "other") is None
        with pytest.raises(InvalidInput):
            authflow.tokens.get(alice.user_id, "")
        with pytest.raises(UserNotFound):
            authflow.tokens.create("no-such-id", "ci")
        assert authflow.tokens.revoke(alice.user_id, "ci")
        assert not authflow.tokens.revoke(alice.user_id, "ci")
        authflow.tokens.create(alice.user_id, "a")
        authflow.tokens.create(alice.user_id, "b")
        assert authflow.tokens.revoke_all(alice.user_id) == 2
    events = [e[0] for e in _events(backend) if e[0].startswith("api_token")]
    created, revoked, all_revoked = "api_token_created", "api_token_revoked", "api_tokens_revoked"
    assert events == [created, revoked, created, created, all_revoked]


def test_sessions_are_listed_got_and_revoked_one_or_all(
    site: tuple[Flask, AuthFlow, InMemoryBackend],
) -> None:
    app, authflow, _ = site
    with app.app_context():
        alice = authflow.accounts.create("alice", PASSWORD)
    login_test_client(app, "alice", password=PASSWORD)
    login_test_client(app, "alice", password=PASSWORD)
    with app.app_context():
        listed = authflow.sessions.list(alice.user_id)
        assert len(listed) == 2
        wanted = sid_hash(listed[0].sid)
        assert authflow.sessions.get(alice.user_id, wanted) == listed[0]
        assert authflow.sessions.get(alice.user_id, "0" * 64) is None
        assert authflow.sessions.get(alice.user_id, wanted, tenant="beta") is None  # another tenant's user
        assert not authflow.sessions.revoke(alice.user_id, "0" * 64)
        assert authflow.sessions.revoke(alice.user_id, wanted)
        assert len(authflow.sessions.list(alice.user_id)) == 1
        authflow.tokens.create(alice.user_id, "script")
        ended = authflow.sessions.revoke_all(alice.user_id)
        assert (ended.sessions, ended.api_tokens) == (1, 1)
        assert authflow.sessions.list(alice.user_id) == [] and authflow.tokens.list(alice.user_id) == []
        with pytest.raises(UserNotFound):
            authflow.sessions.revoke_all("no-such-id")


def _device(backend: InMemoryBackend, user_id: str, now: Any) -> str:
    backend.touch_device("acme", user_id, "d" * 22, label="Firefox", place=None, now=now)
    return "d" * 22


def test_devices_are_forgotten_and_untrusted_with_their_audit_row(
    site: tuple[Flask, AuthFlow, InMemoryBackend], mock_clock: Any
) -> None:
    app, authflow, backend = site
    with app.app_context():
        alice = authflow.accounts.create("alice", PASSWORD)
        device_id = _device(backend, alice.user_id, mock_clock.now())
        backend.trust_device("acme", alice.user_id, device_id, mock_clock.now() + timedelta(days=1))
        got = authflow.devices.get(alice.user_id, device_id)
        assert got is not None and [d.device_id for d in authflow.devices.list(alice.user_id)] == [device_id]
        assert authflow.devices.get(alice.user_id, "e" * 22) is None
        assert authflow.devices.revoke_trust(alice.user_id, reason="lost_phone") == 1
        assert authflow.devices.revoke_trust(alice.user_id) == 0  # nothing ended: no row
        assert authflow.devices.revoke(alice.user_id, device_id)
        assert not authflow.devices.revoke(alice.user_id, device_id)
        assert authflow.devices.list(alice.user_id) == []
    rows = [(row.event, row.reason) for row in backend.audit_rows if row.event.startswith("device")]
    assert rows == [("device_trust_ended", "lost_phone"), ("device_forgotten", f"device={device_id}")]


def test_a_device_is_kept_when_its_audit_row_cannot_be_written(
    site: tuple[Flask, AuthFlow, InMemoryBackend], mock_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, authflow, backend = site
    with app.app_context():
        alice = authflow.accounts.create("alice", PASSWORD)
        device_id = _device(backend, alice.user_id, mock_clock.now())

        def refuse(record: Any) -> None:
            raise AuditWriteError()

        with monkeypatch.context() as patch:
            patch.setattr(backend, "write", refuse)
            with pytest.raises(AuditWriteError):
                authflow.devices.revoke(alice.user_id, device_id)
        assert authflow.devices.get(alice.user_id, device_id) is not None  # rolled back with the row
        assert authflow.devices.revoke(alice.user_id, device_id)  # the retry works


def test_an_operator_changes_a_users_factors_by_id(site: tuple[Flask, AuthFlow, InMemoryBackend]) -> None:
    app, authflow, _ = site
    with app.app_context():
        alice = authflow.accounts.create("alice", PASSWORD)
        factors = authflow.factors
        uri = factors.create_totp(alice.user_id)
        assert pyotp.parse_uri(uri).secret
        kinds = [f.kind for f in factors.list(alice.user_id)]
        assert kinds == [FactorKind.PASSWORD, FactorKind.TOTP]
        password, totp = factors.list(alice.user_id)
        assert factors.get(alice.user_id, totp.factor_id) == totp
        assert factors.get(alice.user_id, "nope") is None
        assert not factors.revoke(alice.user_id, password.factor_id)  # the password is set, not removed
        assert len(factors.create_recovery_codes(alice.user_id)) == 10
        assert factors.revoke(alice.user_id, totp.factor_id)
        with pytest.raises(UserNotFound):
            factors.list("no-such-id")
        with pytest.raises(UserNotFound):
            factors.create_totp(alice.user_id, tenant="beta")


def test_the_login_service_and_factors_act_on_the_current_request(
    site: tuple[Flask, AuthFlow, InMemoryBackend], mock_clock: Any
) -> None:
    app, authflow, _ = site
    with app.app_context():
        alice = authflow.accounts.create("alice", PASSWORD)
        totp = pyotp.parse_uri(authflow.factors.create_totp(alice.user_id))
    with app.test_request_context("/"):
        begun = authflow.login.password("alice", PASSWORD)
        assert isinstance(begun, FactorRequired)
        with pytest.raises(InvalidInput):
            authflow.factors.verify("no-such-kind", "123456")
        done = authflow.factors.verify("totp", totp.at(mock_clock.now()))
        assert isinstance(done, Authenticated)
        assert [f.kind for f in authflow.factors.list_current()] == [FactorKind.PASSWORD, FactorKind.TOTP]
        authflow.login.logout()
    with app.test_request_context("/"):
        assert isinstance(
            authflow.login.user(alice.user_id, method="magic_link", skip_factors=True), Authenticated
        )


def test_federation_without_a_provider_is_a_configuration_error(
    site: tuple[Flask, AuthFlow, InMemoryBackend],
) -> None:
    app, authflow, _ = site
    with app.test_request_context("/"), pytest.raises(ConfigurationError):
        authflow.federation.begin("idp")


def test_an_operator_revokes_a_tenant_and_purges_expired_sessions(
    site: tuple[Flask, AuthFlow, InMemoryBackend], mock_clock: Any
) -> None:
    app, authflow, _ = site
    with app.app_context():
        alice = authflow.accounts.create("alice", PASSWORD)
        authflow.accounts.create("bob", PASSWORD, tenant="beta")
    login_test_client(app, "alice", password=PASSWORD)
    login_test_client(app, "bob", tenant="beta", password=PASSWORD)
    with app.app_context():
        assert authflow.sessions.revoke_provider_session("https://idp.example", "no-such-sid") == 0
        assert authflow.sessions.revoke_tenant() == 1  # acme's only: bob's stays
        assert authflow.sessions.list(alice.user_id) == []
        with pytest.raises(InvalidInput):
            authflow.sessions.purge_expired(tenant="")
        mock_clock.advance(timedelta(days=30))
        assert authflow.sessions.purge_expired(tenant="acme") == 0
        assert authflow.sessions.purge_expired() == 1  # bob's, expired


def test_every_decorator_comes_from_the_facade_and_the_docs_import_it_there() -> None:
    import re
    from pathlib import Path

    import flask_authflow
    from flask_authflow._web import decorators

    wanted = {name for name in decorators.__all__ if name.endswith(("_required", "_accepted"))}
    assert wanted | {"authorize"} <= set(flask_authflow.__all__)
    repo = Path(__file__).resolve().parent.parent
    below = re.compile(
        r"from flask_authflow\._web\.(decorators|authz) import "
        r"[^\n]*\b(\w+_required|\w+_accepted|authorize)\b"
    )
    assert below.search(
        "from flask_authflow._web.decorators import api_scopes_required"
    )  # the check can fail
    pages = [*repo.glob("docs/*.rst"), repo / "README.rst"]
    assert [page.name for page in pages if below.search(page.read_text(encoding="utf-8"))] == []
