"""The entry points deprecated in 0.8 (removed in 0.9): each warns, naming what to use, and
still does what it did, through the service that replaced it."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pyotp
import pytest
from flask import Flask

from flask_authflow import AuthFlow
from flask_authflow._core.session import sid_hash
from flask_authflow._outcomes import Authenticated, FactorKind, FactorRequired
from flask_authflow._web import api_auth, devices, roles
from flask_authflow.api_auth._service import ApiTokenService
from flask_authflow.errors import ConfigurationError, InvalidInput
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import login_test_client

PASSWORD = "plum tuesday kettle orbit 47"


@pytest.fixture
def site(mock_clock: Any, authflow_hasher: Any) -> tuple[Flask, AuthFlow, InMemoryBackend]:
    app = Flask(__name__)
    app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
    backend = InMemoryBackend(clock=mock_clock)
    authflow = AuthFlow(
        app, backend=backend, session_store=MemorySessionStore(clock=mock_clock), hasher=authflow_hasher
    )
    with app.app_context():
        authflow.accounts.create("alice", PASSWORD)
    return app, authflow, backend


def _warns(use: str, call: Callable[[], Any]) -> Any:
    """``call()``'s result; it must warn once with a DeprecationWarning that names ``use``."""
    with pytest.warns(DeprecationWarning, match="deprecated and goes in 0.9") as caught:
        result = call()
    assert len(caught) == 1 and use in str(caught[0].message)
    return result


def test_the_role_functions_warn_and_change_roles(site: tuple[Flask, AuthFlow, InMemoryBackend]) -> None:
    app, authflow, backend = site
    with app.app_context():
        user_id = authflow.accounts.get("alice").user_id  # type: ignore[union-attr]
        assert _warns("authflow.roles.store", roles.role_store) is backend
        made = _warns("authflow.roles.create(name", lambda: roles.create_role("default", "editor", "Edits"))
        assert made.description == "Edits"
        assert _warns(
            "grant_permission(role", lambda: roles.grant_permission("default", "editor", "docs:edit")
        )
        assert _warns("grant(user_id", lambda: roles.add_user_role("default", user_id, "editor"))
        assert authflow.roles.of_user(user_id) == ["editor"]
        assert _warns("revoke(user_id", lambda: roles.remove_user_role("default", user_id, "editor"))
        assert _warns(
            "revoke_permission(role", lambda: roles.revoke_permission("default", "editor", "docs:edit")
        )
        _warns("authflow.roles.delete(name", lambda: roles.delete_role("default", "editor"))
        assert authflow.roles.list() == []


def test_api_tokens_warn_and_give_the_token_engine(site: tuple[Flask, AuthFlow, InMemoryBackend]) -> None:
    app, authflow, _ = site
    with app.app_context():
        user_id = authflow.accounts.get("alice").user_id  # type: ignore[union-attr]
        engine = _warns("authflow.tokens", api_auth.api_tokens)
        assert isinstance(engine, ApiTokenService)
        engine.create("default", user_id, "ci")
        same = _warns("authflow.tokens", lambda: authflow.api_tokens)
        assert [t.name for t in same.list("default", user_id)] == ["ci"]


def test_the_device_functions_warn_and_audit(
    site: tuple[Flask, AuthFlow, InMemoryBackend], mock_clock: Any
) -> None:
    app, authflow, backend = site
    with app.app_context():
        state = authflow.state
        user_id = authflow.accounts.get("alice").user_id  # type: ignore[union-attr]
        backend.touch_device("default", user_id, "d" * 22, label="Firefox", place=None, now=mock_clock.now())
        backend.trust_device("default", user_id, "d" * 22, mock_clock.now().replace(year=2100))
        use = "authflow.devices.revoke_trust"
        assert _warns(use, lambda: devices.end_device_trust(state, "default", user_id, reason="lost")) == 1
        assert _warns(
            "authflow.devices.revoke(", lambda: devices.forget_device(state, "default", user_id, "d" * 22)
        )
        assert authflow.devices.list(user_id) == []
    assert [r.event for r in backend.audit_rows][-2:] == ["device_trust_ended", "device_forgotten"]


def test_the_account_admin_names_warn_on_authflow_accounts(
    site: tuple[Flask, AuthFlow, InMemoryBackend],
) -> None:
    app, authflow, _ = site
    with app.app_context():
        accounts = authflow.accounts
        bob = _warns("accounts.create(identifier", lambda: accounts.create_user("default", "bob", PASSWORD))
        uri = _warns("factors.create_totp", lambda: accounts.enroll_totp("default", "bob"))
        assert pyotp.parse_uri(uri).secret
        configs = _warns("factors.list(user_id", lambda: accounts.list_factors("default", "bob"))
        assert [c.kind for c in configs] == [FactorKind.PASSWORD, FactorKind.TOTP]
        codes = _warns("create_recovery_codes", lambda: accounts.regenerate_recovery_codes("default", "bob"))
        assert len(codes) == 10
        assert _warns(
            "factors.revoke(user_id", lambda: accounts.disable_factor("default", "bob", configs[1].factor_id)
        )
        ended = _warns(
            "set_password(identifier", lambda: accounts.change_password("default", "bob", PASSWORD + "!")
        )
        assert ended.sessions == 0
    login_test_client(app, "bob", password=PASSWORD + "!")
    login_test_client(app, "bob", password=PASSWORD + "!")
    with app.app_context():
        one = sid_hash(authflow.sessions.list(bob.user_id)[0].sid)
        assert _warns("sessions.revoke(user_id", lambda: accounts.revoke_session("default", bob.user_id, one))
        everywhere = _warns("revoke_all(user_id", lambda: accounts.logout_everywhere("default", bob.user_id))
        assert everywhere.sessions == 1
        assert _warns("revoke_all(user_id", lambda: accounts.revoke_sessions("default", bob.user_id)) == 0


def test_the_login_methods_warn_and_sign_in(
    site: tuple[Flask, AuthFlow, InMemoryBackend], mock_clock: Any
) -> None:
    app, authflow, _ = site
    with app.test_request_context("/"):
        outcome = _warns("login.password(", lambda: authflow.login_with_password("alice", PASSWORD))
        assert isinstance(outcome, Authenticated)
        start = _warns("factors.begin_enrollment(", lambda: authflow.begin_enrollment("totp"))
        code = pyotp.TOTP(start.public["secret"]).at(mock_clock.now())
        use = "factors.confirm_enrollment("
        config = _warns(use, lambda: authflow.confirm_enrollment("totp", start.factor_id, code))
        assert config.kind is FactorKind.TOTP
        mine = _warns("factors.list_current()", authflow.user_factors)
        assert [c.kind for c in mine] == [FactorKind.PASSWORD, FactorKind.TOTP]
        assert _warns("factors.revoke_current(", lambda: authflow.disable_factor(config.factor_id))
        _warns("login.logout()", authflow.logout)
    with app.test_request_context("/"):
        user_id = authflow.accounts.get("alice").user_id  # type: ignore[union-attr]
        assert isinstance(_warns("login.user(user_id", lambda: authflow.login_user(user_id)), Authenticated)
        started = _warns("login.start_workflow(", lambda: authflow.start_workflow("email_verification"))
        done = _warns("login.complete_workflow(", lambda: authflow.complete_workflow(started.token))
        assert done.kind == "email_verification"
        _warns("login.start_workflow(", lambda: authflow.start_workflow("email_verification"))
        assert _warns("login.abort_workflow()", authflow.abort_workflow).kind == "email_verification"


def test_the_factor_step_methods_warn_and_verify(
    site: tuple[Flask, AuthFlow, InMemoryBackend], mock_clock: Any
) -> None:
    app, authflow, _ = site
    with app.app_context():
        user_id = authflow.accounts.get("alice").user_id  # type: ignore[union-attr]
        totp = pyotp.parse_uri(authflow.factors.create_totp(user_id))
    with app.test_request_context("/"):
        assert isinstance(authflow.login.password("alice", PASSWORD), FactorRequired)
        again = _warns("factors.challenge(kind)", lambda: authflow.challenge_factor("totp"))
        assert isinstance(again, FactorRequired)
        code = totp.at(mock_clock.now())
        assert isinstance(
            _warns("factors.verify(", lambda: authflow.verify_factor("totp", code)), Authenticated
        )
        with pytest.warns(DeprecationWarning), pytest.raises(InvalidInput):
            authflow.verify_factor("no-such-kind", "1")


def test_the_passkey_policy_and_federation_methods_warn_and_answer_as_their_services(
    site: tuple[Flask, AuthFlow, InMemoryBackend],
) -> None:
    app, authflow, _ = site
    with app.test_request_context("/"):
        session = authflow.state.session_interface  # any value: refused before it is used
        for use, call in [
            ("federation.provider(name)", lambda: authflow.oauth_provider("idp")),
            ("federation.begin(", lambda: authflow.begin_oauth_login(session, "idp")),  # type: ignore[arg-type]
            ("federation.finish(", lambda: authflow.finish_oauth_login(session, "idp", "c", "s")),  # type: ignore[arg-type]
            ("federation.token(", lambda: authflow.provider_token("idp")),
        ]:
            with pytest.raises(ConfigurationError):  # no provider is configured, as the service says
                _warns(use, call)
        with pytest.raises(type(_raised(authflow.login.begin_passkey))):
            _warns("login.begin_passkey(", authflow.begin_passkey_login)
        refused = authflow.login.finish_passkey("{}")  # a malformed assertion: refused, not raised
        assert type(_warns("login.finish_passkey(", lambda: authflow.finish_passkey_login("{}"))) is type(
            refused
        )
        with pytest.warns(DeprecationWarning, match="is_authorized"):
            assert authflow.authorize("view", 'Document::"1"') is False  # no policies: everything denied


def _raised(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the error is what is compared
        return error
    raise AssertionError("it did not refuse")
