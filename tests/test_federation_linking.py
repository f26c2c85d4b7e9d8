"""Account linking (link, unlink, refusals) and provisioning at a first federated sign-in."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from flask_authflow import AuthFlow, UserMixin, current_user, get_state, signals
from flask_authflow._clock import MockClock
from flask_authflow._core.identifiers import normalise_identifier, provider_identifier
from flask_authflow._web.views import csrf_token
from flask_authflow.errors import InvalidInput
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.testing._users import add_user
from tests.federation_support import PROVIDER, REDIRECT_URI, FederatedApp, federated_app

PASSWORD = "correct horse battery staple"


@pytest.fixture
def fed(oidc_provider, mock_clock, authflow_hasher) -> FederatedApp:
    oidc_provider.login_as("Linked-Sub", email="bob@example.com", email_verified=True)
    built = federated_app(oidc_provider, mock_clock, authflow_hasher)
    _add_routes(built.app, built.authflow)
    return built


def _add_routes(app: Flask, authflow: AuthFlow) -> None:
    app.add_url_rule("/token", "token", csrf_token)

    @app.post("/signin")
    def signin() -> str:
        outcome = authflow.login.password("bob@example.com", PASSWORD)
        return type(outcome).__name__

    @app.get("/me")
    def me() -> str:
        return str(current_user.get_id()) if current_user.is_authenticated else "anonymous"


def _bob(fed: FederatedApp, client: FlaskClient) -> str:
    """Bob has a password account and is signed in with it; returns his user id."""
    user = add_user(fed.backend, "default", "bob@example.com", PASSWORD)
    assert client.post("/signin").text == "Authenticated"
    return user.user_id


def _token(client: FlaskClient) -> str:
    return client.get("/token").text


def _link(fed: FederatedApp, client: FlaskClient, *, token: str | None = None) -> Any:
    """Press "Link" and come back through the provider; returns the callback's response
    (or the refusal of the link form)."""
    start = client.post(
        f"/auth/link/{PROVIDER}", data={"csrf_token": _token(client) if token is None else token}
    )
    if start.status_code != 302:
        return start
    answer = fed.browser().get(start.location, allow_redirects=False, timeout=5)
    assert answer.status_code == 302, answer.text
    callback = answer.headers["Location"]
    assert callback.startswith(REDIRECT_URI)
    return client.get(callback.removeprefix("http://localhost"))


def _rows(fed: FederatedApp, event: str) -> list[tuple[str, str | None, str | None]]:
    return [(r.status, r.user_id, r.reason) for r in fed.backend.audit_rows if r.event == event]


def _recorded(signal: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    signal.connect(lambda sender, **kw: seen.append(kw), weak=False)
    return seen


# --- linking -------------------------------------------------------------------------------------


def test_a_linked_provider_signs_in_as_the_same_user(fed: FederatedApp) -> None:
    linked = _recorded(signals.identity_linked)
    client = fed.client()
    bob = _bob(fed, client)
    done = _link(fed, client)
    assert done.status_code == 302 and done.location == "/"
    link = fed.backend.find_link(fed.provider.issuer, "Linked-Sub")
    assert link is not None and link.user_id == bob
    assert client.get("/me").text == bob  # still signed in as bob: the callback did not log in anew
    assert _rows(fed, "identity_link") == [("success", bob, None)]
    assert linked[-1] == {
        "tenant": "default",
        "user_id": bob,
        "provider": PROVIDER,
        "issuer": fed.provider.issuer,
    }
    other = fed.client()
    assert fed.sign_in(other).status_code == 302
    assert other.get("/me").text == bob
    assert fed.backend.find_user("default", "test-op:Linked-Sub") is None  # no second account


def test_an_identity_linked_to_another_user_is_refused(fed: FederatedApp) -> None:
    first = fed.client()
    assert fed.sign_in(first).status_code == 302  # the provider identity gets an account of its own
    owner = fed.backend.find_link(fed.provider.issuer, "Linked-Sub")
    assert owner is not None
    client = fed.client()
    bob = _bob(fed, client)
    refused = _link(fed, client)
    assert refused.status_code == 409
    assert "already linked to another user" in refused.text
    assert fed.backend.find_link(fed.provider.issuer, "Linked-Sub") == owner
    assert _rows(fed, "identity_link") == [("failure", bob, "identity_linked_elsewhere")]
    assert client.get("/me").text == bob


def test_linking_needs_a_fresh_login(fed: FederatedApp) -> None:
    client = fed.client()
    _bob(fed, client)
    fed.clock.advance(timedelta(minutes=11))  # past AUTHFLOW_FRESHNESS (10 minutes)
    refused = client.post(f"/auth/link/{PROVIDER}", data={"csrf_token": _token(client)})
    assert refused.status_code == 401
    assert "fresh authentication" in refused.text
    assert (
        fed.backend.links_of_user("default", fed.backend.find_user("default", "bob@example.com").user_id)
        == []
    )


def test_link_and_unlink_refuse_a_missing_or_wrong_csrf_token(fed: FederatedApp) -> None:
    client = fed.client()
    bob = _bob(fed, client)
    for path in (f"/auth/link/{PROVIDER}", f"/auth/unlink/{PROVIDER}"):
        assert client.post(path).status_code == 400
        assert client.post(path, data={"csrf_token": "forged"}).status_code == 400
    assert fed.backend.links_of_user("default", bob) == []


def test_link_and_unlink_need_a_signed_in_user(fed: FederatedApp) -> None:
    client = fed.client()
    for path in (f"/auth/link/{PROVIDER}", f"/auth/unlink/{PROVIDER}"):
        assert client.post(path, data={"csrf_token": _token(client)}).status_code == 401


def test_a_link_callback_after_signing_out_links_nothing(fed: FederatedApp) -> None:
    client = fed.client()
    bob = _bob(fed, client)
    start = client.post(f"/auth/link/{PROVIDER}", data={"csrf_token": _token(client)})
    callback = fed.browser().get(start.location, allow_redirects=False, timeout=5).headers["Location"]
    fed.sessions.delete_user_sessions("default", bob)  # signed out elsewhere meanwhile
    answer = client.get(callback.removeprefix("http://localhost"))
    assert answer.status_code == 401
    assert fed.backend.find_link(fed.provider.issuer, "Linked-Sub") is None


def test_linking_an_unknown_provider_is_404(fed: FederatedApp) -> None:
    client = fed.client()
    _bob(fed, client)
    assert client.post("/auth/link/nope", data={"csrf_token": _token(client)}).status_code == 404


# --- unlinking -----------------------------------------------------------------------------------


def test_unlink_removes_the_link(fed: FederatedApp) -> None:
    unlinked = _recorded(signals.identity_unlinked)
    client = fed.client()
    bob = _bob(fed, client)
    assert _link(fed, client).status_code == 302
    done = client.post(f"/auth/unlink/{PROVIDER}", data={"csrf_token": _token(client)})
    assert done.status_code == 302
    assert fed.backend.find_link(fed.provider.issuer, "Linked-Sub") is None
    assert _rows(fed, "identity_unlink") == [("success", bob, None)]
    assert unlinked[-1]["user_id"] == bob and unlinked[-1]["provider"] == PROVIDER
    again = client.post(f"/auth/unlink/{PROVIDER}", data={"csrf_token": _token(client)})
    assert again.status_code == 404
    assert _rows(fed, "identity_unlink")[-1] == ("failure", bob, "not_linked")


def test_unlinking_the_last_way_to_sign_in_is_refused(fed: FederatedApp) -> None:
    client = fed.client()
    assert fed.sign_in(client).status_code == 302  # a passwordless account: the provider is its only way in
    link = fed.backend.find_link(fed.provider.issuer, "Linked-Sub")
    assert link is not None
    refused = client.post(f"/auth/unlink/{PROVIDER}", data={"csrf_token": _token(client)})
    assert refused.status_code == 409
    assert "last way to sign in" in refused.text
    assert fed.backend.find_link(fed.provider.issuer, "Linked-Sub") == link
    assert _rows(fed, "identity_unlink") == [("failure", link.user_id, "last_sign_in_method")]


def test_unlinking_needs_a_fresh_login(fed: FederatedApp) -> None:
    client = fed.client()
    bob = _bob(fed, client)
    assert _link(fed, client).status_code == 302
    fed.clock.advance(timedelta(minutes=11))
    refused = client.post(f"/auth/unlink/{PROVIDER}", data={"csrf_token": _token(client)})
    assert refused.status_code == 401
    assert [link.user_id for link in fed.backend.links_of_user("default", bob)] == [bob]


# --- the account page ----------------------------------------------------------------------------


def test_the_account_page_lists_linked_and_linkable_providers(
    oidc_provider, mock_clock, authflow_hasher
) -> None:
    oidc_provider.login_as("Linked-Sub")
    built = federated_app(oidc_provider, mock_clock, authflow_hasher)
    built.app.config["AUTHFLOW_VIEWS"] = True
    built.authflow.views.register(built.app)
    _add_routes(built.app, built.authflow)
    client = built.client()
    _bob(built, client)
    page = client.get("/account").text
    assert f'id="link-{PROVIDER}"' in page and f'id="unlink-{PROVIDER}"' not in page
    done = _link(built, client)
    assert done.status_code == 302 and done.location.endswith("/account?notice=identity_linked")
    page = client.get(done.location).text
    assert f'id="unlink-{PROVIDER}"' in page and f'id="link-{PROVIDER}"' not in page
    assert "The provider is linked" in page
    built.clock.advance(timedelta(minutes=11))
    stale = client.post(f"/auth/link/{PROVIDER}", data={"csrf_token": _token(client)})
    assert stale.status_code == 302 and "/step-up" in stale.location  # asked to confirm it is you first


# --- provider-derived identifiers ----------------------------------------------------------------


def test_provider_identifiers_keep_the_subjects_case() -> None:
    assert normalise_identifier("microsoft:AbC-123") == "microsoft:AbC-123"
    assert provider_identifier("apple", "001.AbC") == "apple:001.AbC"
    assert normalise_identifier("Alice@Example.COM") == "alice@example.com"  # other identifiers still fold
    with pytest.raises(InvalidInput):
        provider_identifier("apple", "x" * 300)


def test_subjects_differing_only_in_case_are_two_users(fed: FederatedApp) -> None:
    one, two = fed.client(), fed.client()
    fed.provider.login_as("AbC")
    assert fed.sign_in(one).status_code == 302
    fed.provider.login_as("abc")
    assert fed.sign_in(two).status_code == 302
    first, second = one.get("/me").text, two.get("/me").text
    assert first != second
    assert fed.backend.find_user("default", "test-op:AbC").user_id == first
    assert fed.backend.find_user("default", "test-op:abc").user_id == second


# --- provisioning --------------------------------------------------------------------------------


def test_provision_user_creates_the_user_of_a_first_sign_in(fed: FederatedApp) -> None:
    seen: list[tuple[str, str]] = []

    @fed.authflow.provision_user
    def provision(identity: Any, tenant: str) -> str:
        seen.append((identity.subject, tenant))
        return fed.backend.create_user(tenant, identity.local_identifier).user_id

    client = fed.client()
    assert fed.sign_in(client).status_code == 302
    user = fed.backend.find_user("default", "test-op:Linked-Sub")
    assert user is not None and client.get("/me").text == user.user_id
    assert seen == [("Linked-Sub", "default")]
    assert fed.sign_in(fed.client()).status_code == 302
    assert len(seen) == 1  # the link finds the user from then on


@pytest.mark.parametrize("answer", [None, ""])
def test_provision_user_refusing_leaves_no_link(fed: FederatedApp, answer: Any) -> None:
    fed.authflow.provision_user(lambda identity, tenant: answer)
    client = fed.client()
    refused = fed.sign_in(client)
    assert refused.status_code == 403
    assert fed.backend.find_link(fed.provider.issuer, "Linked-Sub") is None
    assert client.get("/me").text == "anonymous"


def test_a_failing_provision_user_is_a_clear_403_without_a_link(fed: FederatedApp) -> None:
    def provision(identity: Any, tenant: str) -> str:
        raise RuntimeError("the profile service is down")

    fed.authflow.provision_user(provision)
    client = fed.client()
    refused = fed.sign_in(client)
    assert refused.status_code == 403
    assert "could not be created" in refused.text
    assert "profile service" not in refused.text
    assert fed.backend.find_link(fed.provider.issuer, "Linked-Sub") is None
    assert ("failure", None, "provisioning_failed") in _rows(fed, "oauth_login")


# --- provisioning with Flask-SQLAlchemy: the app's row and the link in one transaction ----------


def _sql_app(
    database_url: str, provider: Any, clock: MockClock, hasher: Any, *, fail: bool
) -> tuple[Flask, Any]:
    from flask_sqlalchemy import SQLAlchemy

    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    template = federated_app(provider, clock, hasher)  # registers the client; its settings are reused
    db = SQLAlchemy()

    class Person(UserMixin, db.Model):  # type: ignore[name-defined,misc]
        id = db.Column(db.String(64), primary_key=True)
        name = db.Column(db.String(100), nullable=False)

    app = Flask("provisioning")
    app.config.update(
        TESTING=True,
        SQLALCHEMY_DATABASE_URI=database_url,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_OAUTH_PROVIDERS=template.app.config["AUTHFLOW_OAUTH_PROVIDERS"],
    )
    db.init_app(app)
    authflow = AuthFlow(
        app,
        backend=SqlAlchemyBackend(db),
        session_store=MemorySessionStore(clock=clock),
        clock=clock,
        hasher=hasher,
        http_client=RequestsHttpClient(adapters=provider.http_adapters()),
    )
    with app.app_context():
        db.create_all()

    @authflow.user_loader
    def load(tenant: str, user_id: str) -> Any:
        return db.session.get(Person, user_id)

    @authflow.provision_user
    def provision(identity: Any, tenant: str) -> str:
        person = Person(name=identity.claims.get("name") or "someone")
        db.session.add(person)  # first: the account and the link join this transaction
        account = authflow.accounts.create(identity.local_identifier, tenant=tenant)
        person.id = account.user_id
        db.session.flush()
        if fail:
            raise RuntimeError("the application refused after writing")
        return account.user_id

    @app.get("/me")
    def me() -> str:
        return f"{current_user.is_authenticated}:{getattr(current_user, 'name', '-')}"

    return app, (db, Person, authflow)


@pytest.mark.parametrize("fail", [False, True], ids=["commit", "hook-raises"])
def test_provisioning_commits_the_apps_row_with_the_link(
    database_url: str, oidc_provider, mock_clock, authflow_hasher, fail: bool
) -> None:
    oidc_provider.login_as("Sql-Sub", name="Carol")
    app, (db, person, authflow) = _sql_app(
        database_url, oidc_provider, mock_clock, authflow_hasher, fail=fail
    )
    client = app.test_client()
    start = client.get(f"/auth/login/{PROVIDER}")
    browser = FederatedApp(app, authflow, None, None, oidc_provider, mock_clock).browser()  # type: ignore[arg-type]
    callback = browser.get(start.location, allow_redirects=False, timeout=5).headers["Location"]
    answer = client.get(callback.removeprefix("http://localhost"))
    try:
        _check_provisioned(app, (db, person), client, answer, issuer=oidc_provider.issuer, fail=fail)
    finally:
        with app.app_context():
            db.engine.dispose()


def _check_provisioned(
    app: Flask, models: tuple[Any, Any], client: FlaskClient, answer: Any, *, issuer: str, fail: bool
) -> None:
    """Both rows after a commit, neither after the hook raised; ``current_user`` follows."""
    db, person = models
    with app.app_context():
        link = get_state(app).backend.find_link(issuer, "Sql-Sub")
        people = db.session.query(person).all()
        account = get_state(app).backend.find_user("default", "test-op:Sql-Sub")
    if fail:
        assert answer.status_code == 403
        assert (link, people, account) == (None, [], None)
        assert client.get("/me").text == "False:-"
    else:
        assert answer.status_code == 302, answer.text
        assert link is not None and [p.id for p in people] == [link.user_id] == [account.user_id]
        assert client.get("/me").text == "True:Carol"  # current_user is the app's user at once


# --- the application-user hook at a first sign-in without provision_user ---------------------


def test_user_created_makes_the_apps_row_at_a_first_sign_in(fed: FederatedApp) -> None:
    seen: list[tuple[str, str, str | None]] = []

    @fed.authflow.user_created
    def created(new: Any) -> None:
        seen.append((new.account.identifier, new.source, new.claims.get("email")))

    client = fed.client()
    assert fed.sign_in(client).status_code == 302
    assert seen == [("test-op:Linked-Sub", "federation", "bob@example.com")]
    assert fed.sign_in(fed.client()).status_code == 302
    assert len(seen) == 1  # the link finds the account from then on


def test_a_refusing_user_created_hook_is_a_clear_403_without_an_account(fed: FederatedApp) -> None:
    def created(new: Any) -> None:
        raise RuntimeError("the profile service is down")

    fed.authflow.user_created(created)
    client = fed.client()
    refused = fed.sign_in(client)
    assert refused.status_code == 403
    assert "profile service" not in refused.text
    assert fed.backend.find_user("default", "test-op:Linked-Sub") is None
    assert fed.backend.find_link(fed.provider.issuer, "Linked-Sub") is None
    assert client.get("/me").text == "anonymous"
