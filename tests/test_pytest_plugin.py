"""The pytest plugin (``pytest11`` entry point ``authflow``), seen from a user's test suite.

``pytester`` writes fresh test files and runs pytest on them in-process: the plugin must
be found through its entry point, its fixtures must work, the ``authflow_user`` marker
must be registered (``--strict-markers``), and a user's ``app`` fixture must be the app
the fixtures use. ``login_test_client`` goes through the real login and never bypasses it.
"""

from __future__ import annotations

import secrets

import pytest
from flask import Flask

from flask_authflow import AuthFlow, get_state
from flask_authflow._clock import MockClock
from flask_authflow._outcomes import FactorKind
from flask_authflow.login._password import PasswordHasher
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import login_test_client
from flask_authflow.testing._users import add_user

pytest_plugins = ["pytester"]

RUN_ARGS = ("--strict-markers", "-p", "no:cacheprovider", "-W", "error")


# -- the fixtures in a user's suite ---------------------------------------------------------------------

FIXTURES_TEST = """
from datetime import timedelta

import pytest

from flask_authflow import AuthState, get_state
from flask_authflow._clock import MockClock
from flask_authflow.testing._fixture import LocalIdpFixture
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT, Outbox


def session_of(client):
    # The plugin's clients send TEST_USER_AGENT, which the session is bound to; a
    # session_transaction must present it too.
    with client.session_transaction(environ_base=client.environ_base) as session:
        return session.state, session.tenant, session.user_id


def test_logged_in_client_defaults_to_alice(logged_in_client, authflow_app):
    state, tenant, user_id = session_of(logged_in_client)
    assert state is AuthState.AUTHENTICATED
    alice = get_state(authflow_app).backend.find_user("default", "alice")
    assert (tenant, user_id) == ("default", alice.user_id)


@pytest.mark.authflow_user("bob", tenant="acme")
def test_marker_names_user_and_tenant(logged_in_client, authflow_app):
    state, tenant, user_id = session_of(logged_in_client)
    backend = get_state(authflow_app).backend
    assert state is AuthState.AUTHENTICATED
    assert tenant == "acme"
    assert user_id == backend.find_user("acme", "bob").user_id
    assert backend.find_user("default", "bob") is None
    assert backend.find_user("default", "alice") is None


def test_login_went_through_the_audited_login(logged_in_client, authflow_app):
    rows = get_state(authflow_app).backend.audit_rows
    assert [(r.event, r.status) for r in rows][-1] == ("factor_verify", "success"), rows


def test_mock_clock_is_the_app_clock(mock_clock, authflow_app):
    assert isinstance(mock_clock, MockClock)
    assert get_state(authflow_app).clock is mock_clock
    start = mock_clock.now()
    mock_clock.advance(timedelta(minutes=3))
    assert get_state(authflow_app).clock.now() - start == timedelta(minutes=3)


def test_local_idp_mints_verifiable_tokens(local_idp):
    assert isinstance(local_idp, LocalIdpFixture)
    token = local_idp.mint_jwt_svid("example.org", "billing", "acme", "orders", timedelta(minutes=5))
    claims = local_idp.verifier().verify(token, "orders", issuer="https://issuer.test")
    assert claims.sub == "spiffe://example.org/billing/acme"


def test_mail_outbox_is_the_app_mail_sender(mail_outbox, authflow_app):
    assert isinstance(mail_outbox, Outbox)
    sender = get_state(authflow_app).mail_sender
    assert sender is mail_outbox
    sender.send("a@example.org", "code", "12345678")
    assert len(mail_outbox) == 1 and mail_outbox[0].body == "12345678"


def test_authflow_client_is_a_guest(authflow_client):
    assert authflow_client.environ_base["HTTP_USER_AGENT"] == TEST_USER_AGENT
    assert authflow_client.get("/nothing-here").status_code == 404
    state, tenant, user_id = session_of(authflow_client)
    assert state is AuthState.GUEST and user_id is None


def test_fixtures_are_fresh_per_test(authflow_app, mail_outbox):
    assert get_state(authflow_app).backend.find_user("default", "alice") is None
    assert len(mail_outbox) == 0
"""


def test_plugin_fixtures_in_a_fresh_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user_suite=FIXTURES_TEST)
    result = pytester.runpytest(*RUN_ARGS)
    result.assert_outcomes(passed=8)


def test_plugin_is_loaded_through_its_entry_point(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user_suite=FIXTURES_TEST)
    result = pytester.runpytest(*RUN_ARGS, "-p", "no:authflow")
    result.assert_outcomes(errors=8)  # each test's fixture is missing without the plugin
    assert "logged_in_client" in result.stdout.str()  # named in the error (pytest words it)


USER_APP_CONFTEST = """
import secrets

import pytest
from flask import Flask

from flask_authflow import AuthFlow, current_session, login_required
from flask_authflow.storage._memory import InMemoryBackend

CREATED = []


@pytest.fixture
def app(mock_clock, authflow_hasher):
    app = Flask("user_app")
    app.config.update(
        TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_SESSION_STORE="memory"
    )
    backend = InMemoryBackend(clock=mock_clock)
    AuthFlow(app, backend=backend, clock=mock_clock, hasher=authflow_hasher)

    @app.get("/me")
    @login_required
    def me():
        return f"{current_session.tenant}:{current_session.user_id}"

    CREATED.append(app)
    return app
"""

USER_APP_TEST = """
import pytest

from flask_authflow import get_state

from conftest import CREATED


def test_authflow_app_is_the_users_app(authflow_app, app):
    assert authflow_app is app is CREATED[-1]
    assert authflow_app.name == "user_app"


@pytest.mark.authflow_user("bob", tenant="acme")
def test_logged_in_client_uses_the_users_app(logged_in_client, app):
    bob = get_state(app).backend.find_user("acme", "bob")
    response = logged_in_client.get("/me")
    assert response.status_code == 200
    assert response.text == f"acme:{bob.user_id}"


def test_guest_client_of_the_users_app(authflow_client):
    assert authflow_client.get("/me").status_code == 401
"""


def test_user_app_fixture_is_picked_up(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(USER_APP_CONFTEST)
    pytester.makepyfile(test_user_app=USER_APP_TEST)
    result = pytester.runpytest(*RUN_ARGS)
    result.assert_outcomes(passed=3)


def test_broken_user_app_fixture_is_an_error_not_a_silent_default(pytester: pytest.Pytester) -> None:
    # The user's app needs a fixture that does not exist: their tests must error, not
    # quietly run against the plugin's minimal app.
    pytester.makeconftest(
        """
import pytest

@pytest.fixture
def app(database):
    raise AssertionError("never reached")
"""
    )
    pytester.makepyfile(
        test_broken="""
def test_uses_the_app(authflow_app):
    assert authflow_app.name == "user_app"
"""
    )
    result = pytester.runpytest(*RUN_ARGS)
    result.assert_outcomes(errors=1)  # the app fixture's own missing fixture: an error, not a pass
    assert "database" in result.stdout.str()  # named in the error (pytest words it)


# -- login_test_client ----------------------------------------------------------------------------------


@pytest.fixture
def plain_app() -> Flask:
    clock = MockClock()
    hasher = PasswordHasher.fast_for_tests()
    app = Flask(__name__)
    app.config.update(
        TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_SESSION_STORE="memory"
    )
    AuthFlow(
        app,
        backend=InMemoryBackend(clock=clock),
        session_store=MemorySessionStore(clock=clock),
        clock=clock,
        hasher=hasher,
    )
    return app


def _authenticated(client: object) -> bool:
    with client.session_transaction(environ_base=client.environ_base) as session:  # type: ignore[attr-defined]
        return bool(session.is_authenticated)


def test_login_test_client_creates_and_logs_in(plain_app: Flask) -> None:
    client = login_test_client(plain_app, "carol", password="carol-pass-1")
    assert _authenticated(client)
    # The password given was the one stored: a second login with it works.
    assert _authenticated(login_test_client(plain_app, "carol", password="carol-pass-1"))


@pytest.mark.parametrize("spelling", ["Erin", " erin ", "ERIN", "\uff25rin"])
def test_login_test_client_normalises_the_identifier_like_a_login(plain_app: Flask, spelling: str) -> None:
    with plain_app.app_context():
        add_user(get_state(plain_app).backend, "default", "erin", "erin-pass-1")
    # Before the fix: "Erin" was not found, so the plugin tried to create it and failed.
    assert _authenticated(login_test_client(plain_app, spelling, password="erin-pass-1"))
    with pytest.raises(RuntimeError, match="exists: pass its password"):
        login_test_client(plain_app, spelling)
    with plain_app.app_context():
        assert [u.identifier for u in get_state(plain_app).backend.list_users("default")].count("erin") == 1


def test_login_test_client_refuses_an_existing_user_without_a_password(plain_app: Flask) -> None:
    with plain_app.app_context():
        add_user(get_state(plain_app).backend, "default", "dave", "dave-pass-1")
    with pytest.raises(RuntimeError, match="exists: pass its password"):
        login_test_client(plain_app, "dave")


def test_login_test_client_never_bypasses_a_wrong_password(plain_app: Flask) -> None:
    backend = get_state(plain_app).backend
    with plain_app.app_context():
        add_user(backend, "default", "erin", "erin-pass-1")
    with pytest.raises(RuntimeError, match="login of 'erin' failed"):
        login_test_client(plain_app, "erin", password="wrong-pass")
    # The failure went through the real login: it was counted as a failed attempt.
    assert any(entry.success is False for entry in backend.attempt_log)


def test_login_test_client_does_not_skip_further_factors(plain_app: Flask) -> None:
    backend = get_state(plain_app).backend
    with plain_app.app_context():
        user = add_user(backend, "default", "frank", "frank-pass-1")
        backend.enroll_factor("default", user.user_id, FactorKind.TOTP, "JBSWY3DPEHPK3PXP")
    with pytest.raises(RuntimeError, match="needs more than a password"):
        login_test_client(plain_app, "frank", password="frank-pass-1")


def test_login_test_client_respects_the_lockout(plain_app: Flask) -> None:
    with plain_app.app_context():
        add_user(get_state(plain_app).backend, "default", "gina", "gina-pass-1")
    for _ in range(5):
        with pytest.raises(RuntimeError, match="failed"):
            login_test_client(plain_app, "gina", password="wrong-pass")
    with pytest.raises(RuntimeError, match="did not start"):
        login_test_client(plain_app, "gina", password="gina-pass-1")
