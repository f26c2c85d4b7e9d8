"""Cedar at the cost of Cedar: the principal's entities are built and parsed once per
request (and session state), the policy set once per app; nothing carries over between
requests or users. Counted, never timed."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import cedarpy
import pytest
from flask import Flask, g

from flask_authflow import AuthFlow
from flask_authflow._web.authz import authz_hooks, is_authorized
from flask_authflow.authz import Entity, Evaluator, Principal
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import login_test_client

assert cedarpy.Entities  # the [cedar] extra is part of what the suite installs: never skipped

EDIT = """
@id("editors-edit-own-tenant")
permit(principal in Role::"editor", action == Action::"edit", resource)
when { resource.tenant == principal.tenant };
"""
NOBODY = """
@id("nobody")
forbid(principal, action, resource);
"""


def _app(
    mock_clock: Any, hasher: Any, policies: list[str], roles: dict[str, set[str]]
) -> tuple[Flask, AuthFlow]:
    app = Flask(__name__)
    app.config.update(
        TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_AUTHZ_POLICIES=policies
    )
    authflow = AuthFlow(
        backend=InMemoryBackend(clock=mock_clock),
        session_store=MemorySessionStore(clock=mock_clock),
        clock=mock_clock,
        hasher=hasher,
    )
    authz_hooks(authflow).roles_loader(lambda user: roles.get(user.identifier, set()))
    authflow.init_app(app)
    document = Entity("Document", "1", {"tenant": "default"})

    @app.get("/twice")
    def twice() -> dict[str, Any]:
        return {"allowed": [is_authorized("edit", document), is_authorized("edit", document)]}

    @app.get("/then-logout")
    def then_logout() -> dict[str, Any]:
        before = is_authorized("edit", document)
        authflow.login.logout()
        return {"before": before, "after": is_authorized("edit", document)}

    @app.get("/other")
    def other() -> dict[str, Any]:
        principal_itself = Entity("User", "x")  # not the principal's uid: parsed as the resource
        return {"allowed": is_authorized("edit", principal_itself)}

    return app, authflow


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many times the principal's entities were built and parsed."""
    counts = {"entities": 0, "prepare": 0}

    def counting(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return original(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(Principal, "entities", counting("entities", Principal.entities))
    monkeypatch.setattr(Evaluator, "prepare", counting("prepare", Evaluator.prepare))
    return counts


def test_a_second_authorize_in_a_request_builds_no_entities(
    mock_clock: Any, authflow_hasher: Any, counted: dict[str, int]
) -> None:
    app, _ = _app(mock_clock, authflow_hasher, [EDIT], {"alice": {"editor"}})
    client = login_test_client(app, "alice")
    counted.update(entities=0, prepare=0)
    assert client.get("/twice").json == {"allowed": [True, True]}
    assert counted == {"entities": 1, "prepare": 1}
    assert client.get("/twice").json == {"allowed": [True, True]}
    assert counted == {"entities": 2, "prepare": 2}  # the next request builds its own


def test_the_first_decision_hands_cedar_the_entities_and_the_second_parses_them_once(
    mock_clock: Any, authflow_hasher: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A request with one decision costs one parse of the entities (inside the decision, as
    # a bare cedarpy call); the handle is parsed by the second and reused by the third.
    app, _authflow = _app(mock_clock, authflow_hasher, [EDIT], {"alice": {"editor"}})
    document = Entity("Document", "1", {"tenant": "default"})

    @app.get("/thrice")
    def thrice() -> dict[str, Any]:
        decisions = []
        for _ in range(3):
            decisions.append(is_authorized("edit", document))
            decisions.append(len(parsed))
        return {"decisions": decisions}

    parsed: list[str] = []
    original = cedarpy.Entities.from_json_str

    def counting(text: str, *args: Any, **kwargs: Any) -> Any:
        parsed.append(text)
        return original(text, *args, **kwargs)

    monkeypatch.setattr(cedarpy.Entities, "from_json_str", staticmethod(counting))
    client = login_test_client(app, "alice")
    assert client.get("/thrice").json == {"decisions": [True, 0, True, 1, True, 1]}
    assert client.get("/thrice").json == {"decisions": [True, 1, True, 2, True, 2]}  # its own


def test_a_change_of_session_state_in_the_request_builds_them_again(
    mock_clock: Any, authflow_hasher: Any, counted: dict[str, int]
) -> None:
    app, _ = _app(mock_clock, authflow_hasher, [EDIT], {"alice": {"editor"}})
    client = login_test_client(app, "alice")
    assert client.get("/then-logout").json == {"before": True, "after": False}


def test_entities_never_carry_over_between_users(mock_clock: Any, authflow_hasher: Any) -> None:
    app, _ = _app(mock_clock, authflow_hasher, [EDIT], {"alice": {"editor"}})
    alice, bob = login_test_client(app, "alice"), login_test_client(app, "bob")
    for _ in range(3):  # interleaved, on the same app and thread
        assert alice.get("/twice").json == {"allowed": [True, True]}
        assert bob.get("/twice").json == {"allowed": [False, False]}
    with app.test_request_context("/"):
        assert g.get("_authflow_authz_principal") is None  # a new request starts empty


def test_a_role_granted_between_requests_is_seen(mock_clock: Any, authflow_hasher: Any) -> None:
    roles: dict[str, set[str]] = {}
    app, _ = _app(mock_clock, authflow_hasher, [EDIT], roles)
    client = login_test_client(app, "carol")
    assert client.get("/twice").json == {"allowed": [False, False]}
    roles["carol"] = {"editor"}
    assert client.get("/twice").json == {"allowed": [True, True]}


def test_a_role_granted_between_requests_in_one_app_context_is_seen(
    mock_clock: Any, authflow_hasher: Any
) -> None:
    # ``with app.app_context():`` around requests gives them one flask.g: the principal
    # (and the user, the roles) kept by one request must not answer for the next.
    roles: dict[str, set[str]] = {}
    app, _ = _app(mock_clock, authflow_hasher, [EDIT], roles)
    client = login_test_client(app, "carol")
    with app.app_context():
        assert client.get("/twice").json == {"allowed": [False, False]}
        roles["carol"] = {"editor"}
        assert client.get("/twice").json == {"allowed": [True, True]}


def test_changed_policies_are_seen_by_the_app_they_are_loaded_into(
    mock_clock: Any, authflow_hasher: Any
) -> None:
    # Policies are read at start-up (docs/authz.rst): the changed set is a new init_app.
    roles = {"alice": {"editor"}}
    before, _ = _app(mock_clock, authflow_hasher, [EDIT], roles)
    after, _ = _app(mock_clock, authflow_hasher, [EDIT, NOBODY], roles)
    on_before, on_after = login_test_client(before, "alice"), login_test_client(after, "alice")
    assert on_before.get("/twice").json == {"allowed": [True, True]}
    assert on_after.get("/twice").json == {"allowed": [False, False]}
    assert on_before.get("/twice").json == {"allowed": [True, True]}


def test_a_resource_that_is_not_among_the_prepared_entities_is_added_per_decision(
    mock_clock: Any, authflow_hasher: Any
) -> None:
    app, _ = _app(mock_clock, authflow_hasher, [EDIT], {"alice": {"editor"}})
    client = login_test_client(app, "alice")
    assert client.get("/other").json == {"allowed": False}  # no tenant attribute: not permitted
    assert client.get("/twice").json == {"allowed": [True, True]}
