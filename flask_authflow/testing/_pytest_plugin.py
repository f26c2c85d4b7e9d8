"""The flask-authflow pytest plugin (registered under the ``pytest11`` entry point).

Installing the package changes no test: the plugin offers fixtures and does nothing to an
app unless a test asks. The opt-in is the ini option ``authflow_autowire = true`` (every
test), the marker ``@pytest.mark.authflow_wired`` (one test, class or module) or a marker
``@pytest.mark.authflow_stores("memory"|"sql")`` that names the stores to wire. A wired test
has ``AuthFlow.init_app`` wrapped for its duration so that it is passed the test's
``mock_clock``, the fast hasher and in-memory stores as keyword arguments (whatever the
app's factory configured; see :mod:`flask_authflow.testing._wiring`), so it never writes into
a development database and ``mock_clock.advance()`` reaches the app. With
``authflow_stores("sql")`` the configured SQL stores are used, but a SQLite file outside
``tmp_path`` is refused; ``authflow_stores("app")`` turns the wiring off for a test even
under the ini option. Values passed explicitly to ``AuthFlow(...)``/``init_app(...)`` win.

Fixtures:

``mock_clock``
    A :class:`~flask_authflow._clock.MockClock` frozen at the real time the test starts
    (whole seconds; shared by ``authflow_app``); only ``mock_clock.advance()`` moves it.
``authflow_hasher``
    A fast Argon2id profile for tests (still Argon2id, still verified; only cheaper).
``authflow_app``
    Your ``app`` fixture if you define one, else ``authflow_memory_app()``.
``authflow_memory_app``
    A factory: ``authflow_memory_app(**config)`` returns a new app with in-memory stores,
    ``mock_clock`` and the fast hasher.
``authflow_client``
    ``authflow_app.test_client()``.
``login_client``
    A factory: ``login_client("alice", tenant="acme")`` returns a test client whose
    session went through the real login (password verified, audited, id rotated); the
    user is created with a random password first if it does not exist.
``logged_in_client``
    ``login_client()`` for the user named by ``@pytest.mark.authflow_user("bob", tenant=...)``,
    default ``"alice"``.
``mail_outbox``
    A list that collects the messages the app sends through flask-authflow.
``local_idp``
    A :class:`~flask_authflow.testing._fixture.LocalIdpFixture` (RSA-2048) for
    ``https://issuer.test``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the plugin loads in every pytest run: import the library only when used
    from flask import Flask
    from flask.testing import FlaskClient

    from flask_authflow._clock import MockClock
    from flask_authflow.login._password import PasswordHasher

__all__ = ["Outbox", "SentMessage", "login_test_client"]

TEST_USER_AGENT = "flask-authflow-tests/1.0"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "authflow_autowire",
        "wire the apps every test initialises with mock_clock, the fast hasher and in-memory "
        "stores (default false: only tests marked authflow_wired or authflow_stores are wired)",
        type="bool",
        default=False,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "authflow_user(username, tenant=None): the user logged_in_client logs in as"
    )
    config.addinivalue_line(
        "markers",
        "authflow_wired: wire the apps this test initialises with mock_clock, the fast hasher and "
        "in-memory stores (what authflow_autowire = true does for every test)",
    )
    config.addinivalue_line(
        "markers",
        "authflow_stores(kind): wire this test with 'memory' stores or 'sql' (the configured SQL "
        "stores; a SQLite file must be inside tmp_path); 'app' turns the wiring off (the app's own "
        "clock, hasher and stores)",
    )


@pytest.fixture(autouse=True)
def _authflow_wiring(request: pytest.FixtureRequest) -> Iterator[None]:
    """Wire the apps a test initialises, if the test asks (see the module docstring): while
    it runs, ``AuthFlow.init_app`` is wrapped so that it is passed the test's adapters. A test
    that does not ask is left alone: nothing is imported, nothing is patched."""
    kind = _wiring_asked(request)
    if kind is None:
        yield
        return
    from flask_authflow.testing._wiring import PluginWiring

    wiring = PluginWiring(
        clock=request.getfixturevalue("mock_clock"),
        hasher=request.getfixturevalue("authflow_hasher"),
        tmp_path=request.getfixturevalue("tmp_path"),
        stores=kind,
    )
    with wiring.applied():
        yield


def _wiring_asked(request: pytest.FixtureRequest) -> str | None:
    """The stores the test asked to be wired with (``"memory"`` or ``"sql"``), or ``None``
    when it did not ask (or turned the wiring off with ``authflow_stores("app")``)."""
    marker = request.node.get_closest_marker("authflow_stores")
    kind = str(marker.args[0]) if marker and marker.args else None
    if kind not in (None, "memory", "sql", "app"):
        raise pytest.UsageError(f"authflow_stores({kind!r}): use 'memory', 'sql' or 'app'")
    if kind is not None:
        return None if kind == "app" else kind
    asked = request.node.get_closest_marker("authflow_wired") is not None
    return "memory" if asked or request.config.getini("authflow_autowire") else None


@dataclass(frozen=True)
class SentMessage:
    """One message the app sent (e-mail OTP codes and the like)."""

    to: str
    subject: str
    body: str


@dataclass
class Outbox:
    """A mail sender that keeps messages in memory, for assertions."""

    messages: list[SentMessage] = field(default_factory=list)

    def send(self, to: str, subject: str, body: str) -> None:
        self.messages.append(SentMessage(to=to, subject=subject, body=body))

    def __len__(self) -> int:
        return len(self.messages)

    def __getitem__(self, index: int) -> SentMessage:
        return self.messages[index]


def login_test_client(
    app: Flask, username: str, *, tenant: str | None = None, password: str | None = None
) -> FlaskClient:
    """A test client logged in as ``username`` through the real login path.

    If the user does not exist it is created with ``password`` (or a random one). Only
    password logins are completed here: a user with further factors gets
    ``RuntimeError`` naming the factor, rather than a bypass.
    """
    from flask_authflow._core.identifiers import normalise_identifier
    from flask_authflow._core.session import AuthSession
    from flask_authflow._outcomes import Authenticated, FactorCredential, FactorRequired
    from flask_authflow._web.state import account_admin, get_state
    from flask_authflow.audit._context import AuditContext

    state = get_state(app)
    tenant_name = tenant or state.config.default_tenant
    secret = password or secrets.token_urlsafe(16)
    with app.app_context():
        # Looked up the way a login looks it up: "Alice" is the user "alice".
        if state.backend.find_user(tenant_name, normalise_identifier(username)) is None:
            # With the app's user_created hook, as every account is made.
            account_admin(app).create_user(tenant_name, username, secret, source="test", check_policy=False)
        elif password is None:
            raise RuntimeError(f"user {username!r} exists: pass its password to log in")
    client = app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
    with client.session_transaction(environ_base=client.environ_base) as session:
        assert isinstance(session, AuthSession)
        handle = state.service.with_audit_context(AuditContext.unknown())
        begun = handle.begin_login(username, tenant_name, session)
        if not isinstance(begun, FactorRequired):
            raise RuntimeError(f"login of {username!r} did not start: {begun!r}")
        outcome = handle.verify_factor(FactorCredential.password(secret), session)
        if isinstance(outcome, FactorRequired):
            raise RuntimeError(f"login of {username!r} needs more than a password: {outcome!r}")
        if not isinstance(outcome, Authenticated):
            raise RuntimeError(f"login of {username!r} failed (wrong password?): {outcome!r}")
    return client


@pytest.fixture
def mock_clock() -> MockClock:
    """A clock frozen at the real time the test starts (UTC, whole seconds, as token times
    are); it moves only when the test says so (``mock_clock.advance``)."""
    from datetime import UTC, datetime

    from flask_authflow._clock import MockClock

    return MockClock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture
def authflow_hasher() -> PasswordHasher:
    """Argon2id with minimal cost parameters: real hashing, fast tests."""
    from flask_authflow.login._password import PasswordHasher

    return PasswordHasher.fast_for_tests()


@pytest.fixture
def authflow_memory_app(mock_clock: MockClock, authflow_hasher: PasswordHasher) -> Callable[..., Flask]:
    """A factory of apps on in-memory stores: ``authflow_memory_app(**config)`` returns a new
    ``Flask`` app (``TESTING=True``, a random signing key, then ``config``) initialised with
    ``mock_clock``, the fast hasher, an in-memory backend and an in-memory session store."""

    def make(**config: Any) -> Flask:
        from flask import Flask

        from flask_authflow._web.extension import AuthFlow
        from flask_authflow.sessions._stores import MemorySessionStore
        from flask_authflow.storage._memory import InMemoryBackend

        app = Flask("authflow_test_app")
        app.config.update(
            TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_SESSION_STORE="memory"
        )
        app.config.update(config)
        AuthFlow(
            app,
            backend=InMemoryBackend(clock=mock_clock),
            session_store=MemorySessionStore(clock=mock_clock),
            clock=mock_clock,
            hasher=authflow_hasher,
        )
        return app

    return make


@pytest.fixture
def authflow_app(request: pytest.FixtureRequest, authflow_memory_app: Callable[..., Flask]) -> Flask:
    """The app under test: your ``app`` fixture, or ``authflow_memory_app()``."""
    from flask import Flask

    try:
        app = request.getfixturevalue("app")
    except pytest.FixtureLookupError as exc:
        if exc.argname != "app":
            raise  # the user's app fixture exists but is broken: never swap in another app
        app = None
    if app is None:
        return authflow_memory_app()
    assert isinstance(app, Flask)
    return app


@pytest.fixture
def authflow_client(authflow_app: Flask) -> FlaskClient:
    """A test client of ``authflow_app``."""
    client = authflow_app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
    return client


@pytest.fixture
def login_client(authflow_app: Flask) -> Callable[..., FlaskClient]:
    """Factory of logged-in test clients: ``login_client("alice", tenant=None, password=None)``."""

    def make(
        username: str = "alice", *, tenant: str | None = None, password: str | None = None
    ) -> FlaskClient:
        return login_test_client(authflow_app, username, tenant=tenant, password=password)

    return make


@pytest.fixture
def logged_in_client(request: pytest.FixtureRequest, login_client: Callable[..., FlaskClient]) -> FlaskClient:
    """A test client already Authenticated (``@pytest.mark.authflow_user`` names the user)."""
    marker = request.node.get_closest_marker("authflow_user")
    args: tuple[Any, ...] = marker.args if marker else ()
    kwargs: dict[str, Any] = dict(marker.kwargs) if marker else {}
    return login_client(*args, **kwargs)


@pytest.fixture
def mail_outbox(authflow_app: Flask) -> Outbox:
    """Collects what the app sends through its :class:`~flask_authflow._mail.MailSender`."""
    from flask_authflow._web.state import get_state

    outbox = Outbox()
    get_state(authflow_app).mail_sender = outbox
    return outbox


@pytest.fixture
def local_idp() -> Any:
    """A fresh in-process issuer (RSA-2048) for ``https://issuer.test``."""
    from flask_authflow.testing._fixture import LocalIdpFixture

    return LocalIdpFixture("https://issuer.test")


@pytest.fixture
def oidc_provider(mock_clock: MockClock) -> Any:
    """An in-process OpenID provider (:class:`~flask_authflow.testing._provider.TestOpenIDProvider`).

    It answers at ``https://op.test`` (reach it through ``oidc_provider.http_adapters()``) and
    knows one client, ``test-client`` / ``test-secret``, whose redirect, post-logout and
    back-channel logout URIs are those of a provider named ``test-op`` on the Flask test
    client's host (``http://localhost``). Tokens take their time from ``mock_clock``.
    Call ``oidc_provider.login_as("alice", email=...)`` before an authorization request.
    """
    from flask_authflow.testing._provider import TestOpenIDProvider

    provider = TestOpenIDProvider("https://op.test", clock=mock_clock)
    provider.register_client(
        "test-client",
        "test-secret",
        ["http://localhost/auth/callback/test-op"],
        post_logout_redirect_uris=["http://localhost/"],
        backchannel_logout_uri="http://localhost/auth/backchannel-logout/test-op",
    )
    return provider
