"""Cedar policies: loading and checking at start-up, decisions (default deny), the web glue."""

from __future__ import annotations

import logging
import re
import secrets
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import cedarpy  # the [cedar] extra is part of what the suite installs: never skipped
import pytest
from flask import Flask

from flask_authflow import AuthFlow
from flask_authflow._extras import check_extras
from flask_authflow._settings import apply_defaults
from flask_authflow._web.authz import AUTHZ_KEY, authorize, authz_hooks, decide, is_authorized
from flask_authflow._web.state import get_state
from flask_authflow.authz import AuthzSettings, Decision, Entity, Evaluator, Principal, load_policies
from flask_authflow.authz._policies import LoadedPolicies, statement_lines
from flask_authflow.errors import ConfigurationError, MissingExtraError
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import login_test_client
from flask_authflow.testing._users import add_user

assert cedarpy.PolicySet  # the module is imported for real, not stubbed

SCHEMA = """
entity Role;
entity User in [Role] {
  id: String, tenant: String, roles: Set<String>, department?: String,
  session: { factors: Set<String>, device_trusted: Bool, authenticated_at?: Long, auth_age?: Long },
};
entity Document { tenant: String, owner?: String };
action edit, view, delete, audit appliesTo { principal: [User], resource: [Document] };
"""

POLICIES = """// Editors may edit documents of their own tenant.
@id("editors-edit-own-tenant")
permit(principal in Role::"editor", action == Action::"edit", resource)
when { resource.tenant == principal.tenant };

@id("legal-views")
permit(principal, action == Action::"view", resource)
when { principal has department && principal.department == "legal" };

@id("recent-totp-deletes")
permit(principal, action == Action::"delete", resource)
when {
  principal.session.factors.contains("totp") &&
  principal.session has auth_age && principal.session.auth_age <= 300
};

@id("no-archive-edits")
forbid(principal, action == Action::"edit", resource == Document::"archive");
"""

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def evaluator(tmp_path: Path) -> Evaluator:
    policies = _write(tmp_path, "docs.cedar", POLICIES)
    return Evaluator(load_policies(AuthzSettings(policies=(str(policies),), schema=SCHEMA)))


def _user(**overrides: Any) -> Principal:
    values: dict[str, Any] = {
        "id": "u1",
        "tenant": "acme",
        "authenticated_at": NOW - timedelta(seconds=60),
        "factors": ("password",),
    }
    values.update(overrides)
    return Principal(**values)


def _doc(tenant: str = "acme", doc_id: str = "42") -> Entity:
    return Entity("Document", doc_id, {"tenant": tenant})


# --- decisions ----------------------------------------------------------------------------


def test_role_allows_within_its_tenant_only(evaluator: Evaluator) -> None:
    editor = _user(roles=frozenset({"editor"}))
    assert evaluator.decide(editor, "edit", _doc(), now=NOW) == Decision(True, ("editors-edit-own-tenant",))
    assert not evaluator.decide(editor, "edit", _doc(tenant="globex"), now=NOW).allowed
    assert not evaluator.decide(_user(roles=frozenset({"viewer"})), "edit", _doc(), now=NOW).allowed


def test_forbid_wins_over_permit_and_is_named(evaluator: Evaluator) -> None:
    decision = evaluator.decide(_user(roles=frozenset({"editor"})), "edit", _doc(doc_id="archive"), now=NOW)
    assert decision == Decision(False, ("no-archive-edits",))


def test_attribute_from_the_application(evaluator: Evaluator) -> None:
    assert evaluator.decide(_user(attributes={"department": "legal"}), "view", _doc(), now=NOW).allowed
    assert not evaluator.decide(_user(attributes={"department": "sales"}), "view", _doc(), now=NOW).allowed
    assert not evaluator.decide(_user(), "view", _doc(), now=NOW).allowed


def test_session_facts_factors_and_authentication_age(evaluator: Evaluator) -> None:
    with_totp = _user(factors=("password", "totp"))
    assert evaluator.decide(with_totp, "delete", _doc(), now=NOW).allowed
    assert not evaluator.decide(_user(), "delete", _doc(), now=NOW).allowed  # no TOTP this session
    later = NOW + timedelta(minutes=10)
    assert not evaluator.decide(with_totp, "delete", _doc(), now=later).allowed  # too long ago
    unknown_age = _user(factors=("password", "totp"), authenticated_at=None)
    assert not evaluator.decide(unknown_age, "delete", _doc(), now=NOW).allowed


def test_default_deny_without_policies_or_matching_policy(evaluator: Evaluator) -> None:
    assert Evaluator(None).decide(_user(roles=frozenset({"editor"})), "edit", _doc()) == Decision(False)
    assert evaluator.decide(_user(), "audit", _doc(), now=NOW) == Decision(False)


def test_an_evaluation_error_denies_even_when_a_policy_permits(tmp_path: Path) -> None:
    text = (
        'permit(principal, action, resource);\n@id("needs-owner")\n'
        "permit(principal, action, resource) when { resource.owner == principal.id };\n"
    )
    evaluator = Evaluator(load_policies(AuthzSettings(policies=(text,), schema=None)))
    decision = evaluator.decide(_user(), "view", _doc(), now=NOW)
    assert not decision.allowed and decision.errors  # an error recorded, not a default deny
    assert not _RAW_CEDAR_ID.search(" ".join(decision.errors))  # policies go by our labels


def test_a_resource_without_attributes_is_denied_not_raised(evaluator: Evaluator) -> None:
    decision = evaluator.decide(_user(roles=frozenset({"editor"})), "edit", 'Document::"42"', now=NOW)
    assert not decision.allowed and decision.errors  # Cedar's evaluation error (its words are its own)


class Doc:
    """An application object following the PolicyResource protocol."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant

    def policy_entity(self) -> Entity:
        return Entity("Document", "7", {"tenant": self.tenant})


def test_resource_protocol_object(evaluator: Evaluator) -> None:
    editor = _user(roles=frozenset({"editor"}))
    assert evaluator.decide(editor, "edit", Doc("acme"), now=NOW).allowed
    assert not evaluator.decide(editor, "edit", Doc("globex"), now=NOW).allowed


@pytest.mark.parametrize(
    ("action", "resource", "context", "reason"),
    [
        (7, _doc(), None, "action must be a non-empty string"),
        ("", _doc(), None, "action must be a non-empty string"),
        ('Document::"edit"', _doc(), None, "type must be Action"),
        ("edit", 'Document::"42', None, "must be an entity uid"),
        ("edit", "Document 42", None, "must be an entity uid"),
        ("edit", 42, None, "got int"),
        ("edit", {"type": "Document"}, None, "got dict"),
        ("edit", _doc(), ["not", "a", "mapping"], "context must be a mapping"),
        ("edit", _doc(), {"ratio": 0.5}, "float cannot be a Cedar value"),
        ("edit", _doc(), {"big": 2**70}, "does not fit a Cedar Long"),
        ("edit", _doc(), {1: "x"}, "record keys must be strings"),
        ("edit", Entity("Bad Type", "1"), None, "not a Cedar name"),
        ("edit", Entity("Document", "1", parents=("nope",)), None, "must be an entity uid"),
    ],
)
def test_bad_input_is_a_denial_with_a_reason(
    evaluator: Evaluator, action: Any, resource: Any, context: Any, reason: str
) -> None:
    decision = evaluator.decide(_user(roles=frozenset({"editor"})), action, resource, context, now=NOW)
    assert not decision.allowed
    assert reason in decision.errors[0]


def test_reserved_or_odd_principal_attributes_deny(evaluator: Evaluator) -> None:
    editor = frozenset({"editor"})
    reserved = evaluator.decide(_user(roles=editor, attributes={"tenant": "acme"}), "edit", _doc(), now=NOW)
    assert not reserved.allowed and "may not be named ['tenant']" in reserved.errors[0]
    odd = evaluator.decide(_user(roles=editor, attributes={"x": object()}), "edit", _doc(), now=NOW)
    assert not odd.allowed and "cannot be a Cedar value" in odd.errors[0]
    not_str = evaluator.decide(_user(roles=frozenset({"editor", 3})), "edit", _doc(), now=NOW)  # type: ignore[arg-type]
    assert not not_str.allowed and "roles must be strings" in not_str.errors[0]


def test_entity_ids_with_quotes_and_escapes(evaluator: Evaluator) -> None:
    editor = _user(roles=frozenset({"editor"}))
    assert evaluator.decide(editor, "edit", Entity("Document", 'a"b\\c', {"tenant": "acme"}), now=NOW)
    decision = evaluator.decide(editor, 'Action::"edit"', 'Document::"a\\"b"', now=NOW)
    assert not decision.allowed and decision.errors  # parsed: the uid names a real id, without a tenant


def test_every_decision_is_logged_with_its_policy_ids(
    evaluator: Evaluator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flask_authflow.authz")
    evaluator.decide(_user(roles=frozenset({"editor"})), "edit", _doc(), now=NOW)
    evaluator.decide(_user(), "audit", _doc(), now=NOW)
    evaluator.decide(_user(), 3, _doc(), now=NOW)
    allow, deny, bad = caplog.records
    assert allow.levelno == logging.INFO and allow.name == "flask_authflow.authz"
    assert "authz allow" in allow.getMessage() and "policies=editors-edit-own-tenant" in allow.getMessage()
    assert 'resource=Document::"42"' in allow.getMessage()
    assert "authz deny" in deny.getMessage() and "policies=-" in deny.getMessage()
    assert bad.levelno == logging.WARNING and "action must be" in bad.getMessage()


def test_unnamed_policies_are_labelled_by_file_and_line(tmp_path: Path) -> None:
    policy = _write(tmp_path, "p.cedar", "// header\n\npermit(principal, action, resource);\n")
    decision = Evaluator(load_policies(AuthzSettings(policies=(policy,), schema=None))).decide(
        _user(), "view", _doc(), now=NOW
    )
    assert decision == Decision(True, (f"{policy}:3",))


# --- loading and validation -----------------------------------------------------------------


def _load(tmp_path: Path, text: str, schema: Any = SCHEMA) -> None:
    load_policies(AuthzSettings(policies=(str(_write(tmp_path, "bad.cedar", text)),), schema=schema))


#: Cedar's own id of a policy (``policy3``), which errors show by our label instead.
_RAW_CEDAR_ID = re.compile(r"`policy[0-9]+`")
MISMATCH, SCHEMA_KEY = "the policy does not match the schema: ", "AUTHFLOW_AUTHZ_SCHEMA"


def _refusal(name: str, line: int, what: str = "", key: str = "AUTHFLOW_AUTHZ_POLICIES") -> str:
    """Our frame of a refusal: where (file and line), what (when we say it), the setting. Cedar's
    own words between them (``unexpected token ...``) change between its releases."""
    return rf"{re.escape(name)}:{line}: {re.escape(what)}.+ \({key}\)$"


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    text = "permit(principal, action, resource);\n\npermit(principal,\n  action\n  resource);\n"
    with pytest.raises(ConfigurationError, match=_refusal("bad.cedar", 5)):
        _load(tmp_path, text)


def test_unterminated_policy_names_its_last_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=_refusal("bad.cedar", 2)):
        _load(tmp_path, "permit(principal, action, resource)\nwhen { true }\n")


def test_schema_violation_names_file_and_line_of_the_policy(tmp_path: Path) -> None:
    text = (
        POLICIES
        + '\n\n@id("typo")\npermit(principal, action == Action::"view", resource)\n'
        + 'when { principal.tenantt == "x" };\n'
    )
    line = text.splitlines().index('@id("typo")') + 1
    with pytest.raises(ConfigurationError, match=_refusal("bad.cedar", line, MISMATCH, SCHEMA_KEY)) as exc:
        _load(tmp_path, text)
    assert not _RAW_CEDAR_ID.search(str(exc.value))  # a policy Cedar names goes by its label


def test_a_cedar_error_names_policies_by_their_labels() -> None:
    """Cedar's errors name a policy by its own id (``policy1``): they are shown with the
    policy's label (its ``@id`` or file:line); an id that is not one of ours is kept."""
    loaded = LoadedPolicies(None, ("a.cedar:1", "typo"))
    cedar_said = "for policy `policy1`, attribute `x` not found; see `policy0`, `policy7` and policy1"
    assert loaded.relabel(cedar_said) == (
        "for policy `typo`, attribute `x` not found; see `a.cedar:1`, `policy7` and policy1"
    )


def test_unknown_action_is_a_schema_violation(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=_refusal("bad.cedar", 1, MISMATCH, SCHEMA_KEY)):
        _load(tmp_path, 'permit(principal, action == Action::"publish", resource);')


def test_policies_from_json_schema_and_a_directory(tmp_path: Path) -> None:
    schema = {
        "": {
            "entityTypes": {"User": {}, "Document": {}},
            "actions": {"view": {"appliesTo": {"principalTypes": ["User"], "resourceTypes": ["Document"]}}},
        }
    }
    folder = tmp_path / "policies"
    folder.mkdir()
    _write(folder, "a.cedar", 'permit(principal, action == Action::"view", resource);')
    _write(folder, "b.cedar", "// nothing yet\n")
    loaded = load_policies(AuthzSettings(policies=(folder,), schema=schema))
    assert loaded is not None and loaded.labels == (f"{folder / 'a.cedar'}:1",)
    with pytest.raises(ConfigurationError, match=_refusal("a.cedar", 1, MISMATCH, SCHEMA_KEY)):
        _write(folder, "a.cedar", 'permit(principal, action == Action::"edit", resource);')
        load_policies(AuthzSettings(policies=(folder,), schema=schema))


@pytest.mark.parametrize(
    ("entry", "schema", "message"),
    [
        ("missing.cedar", None, "names 'missing.cedar', which cannot be read"),
        ("permit(principal, action, resource)", None, _refusal("AUTHFLOW_AUTHZ_POLICIES[0]", 1)),
        ("permit(principal, action, resource);", "entity User {", "the Cedar schema is invalid"),
        ("permit(principal, action, resource);", '{"": {"entityTypes": 3}}', "the Cedar schema is invalid"),
        ("permit(principal, action, resource);", "no-such.cedarschema", "AUTHFLOW_AUTHZ_SCHEMA names"),
    ],
)
def test_configuration_errors_name_the_source(entry: str, schema: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_policies(AuthzSettings(policies=(entry,), schema=schema))


def test_empty_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"holds no \.cedar file"):
        load_policies(AuthzSettings(policies=(tmp_path,), schema=None))


def test_statement_lines_skip_comments_and_strings() -> None:
    text = (
        '// a; comment\n@id("x;y")\npermit(principal, action, resource)\n'
        'when { "//;" == "//;" };\n\n  forbid(principal, action, resource);'
    )
    assert statement_lines(text) == [2, 6]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"AUTHFLOW_AUTHZ_POLICIES": 5}, "AUTHFLOW_AUTHZ_POLICIES must be a list"),
        ({"AUTHFLOW_AUTHZ_POLICIES": ["a.cedar", 5]}, "AUTHFLOW_AUTHZ_POLICIES must be a list"),
        ({"AUTHFLOW_AUTHZ_SCHEMA": 5}, "AUTHFLOW_AUTHZ_SCHEMA must be a schema file path"),
    ],
)
def test_settings_types(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        AuthzSettings.from_config(config)


def test_settings_accept_one_entry() -> None:
    settings = AuthzSettings.from_config({"AUTHFLOW_AUTHZ_POLICIES": "policies/"})
    assert settings.policies == ("policies/",) and settings.schema is None
    assert AuthzSettings.from_config({}).policies == ()


def test_policies_need_the_cedar_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cedarpy", None)
    with pytest.raises(ConfigurationError, match=r"AUTHFLOW_AUTHZ_POLICIES.*flask-authflow\[cedar\]"):
        check_extras({"AUTHFLOW_AUTHZ_POLICIES": ["p.cedar"]}, federation=False)
    check_extras({"AUTHFLOW_AUTHZ_POLICIES": []}, federation=False)
    with pytest.raises(MissingExtraError, match=r"flask-authflow\[cedar\]"):
        load_policies(AuthzSettings(policies=("permit(principal, action, resource);",), schema=None))


# --- the web glue -----------------------------------------------------------------------------

ROLES: dict[str, set[str]] = {"alice": {"editor"}}
DEPARTMENTS: dict[str, str] = {"bob": "legal"}


def _make_app(mock_clock: Any, hasher: Any, policies: Any) -> tuple[Flask, AuthFlow]:
    app = Flask(__name__)
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_AUTHZ_POLICIES=policies,
        AUTHFLOW_AUTHZ_SCHEMA=SCHEMA,
    )
    authflow = AuthFlow(
        backend=InMemoryBackend(clock=mock_clock),
        session_store=MemorySessionStore(clock=mock_clock),
        clock=mock_clock,
        hasher=hasher,
    )
    hooks = authz_hooks(authflow)
    hooks.roles_loader(lambda user: ROLES.get(user.identifier, set()))
    hooks.principal_attributes(
        lambda user: {"department": DEPARTMENTS[user.identifier]} if user.identifier in DEPARTMENTS else {}
    )
    authflow.init_app(app)
    return app, authflow


@pytest.fixture
def app(mock_clock: Any, authflow_hasher: Any, tmp_path: Path) -> Flask:
    flask_app, _authflow = _make_app(
        mock_clock, authflow_hasher, [str(_write(tmp_path, "docs.cedar", POLICIES))]
    )
    documents = {"1": _doc("default", "1"), "2": _doc("globex", "2")}

    @flask_app.get("/docs/<doc_id>/edit")
    @authorize("edit", resource=lambda doc_id: documents.get(doc_id, f'Document::"{doc_id}"'))
    def edit(doc_id: str) -> str:
        return f"editing {doc_id}"

    @flask_app.get("/docs/<doc_id>/view")
    async def view(doc_id: str) -> Any:
        return {"allowed": is_authorized("view", documents.get(doc_id, doc_id))}

    @flask_app.get("/raw/<path:uid>")
    @authorize("edit", resource=lambda uid: uid)
    def raw(uid: str) -> str:
        return "raw"

    @flask_app.get("/odd")
    @authorize("edit", resource=lambda: object(), context=lambda: {"n": 1.5})
    def odd() -> str:
        return "odd"

    return flask_app


BROWSER = {"Accept": "text/html,application/xhtml+xml"}
API = {"Accept": "application/json"}


def test_decorator_lets_an_editor_in(login_client: Any) -> None:
    response = login_client("alice").get("/docs/1/edit")
    assert response.status_code == 200 and response.text == "editing 1"


def test_decorator_denial_is_html_for_a_browser_and_json_for_an_api(login_client: Any) -> None:
    alice = login_client("alice")
    page = alice.get("/docs/2/edit", headers=BROWSER)  # another tenant's document
    assert page.status_code == 403 and page.mimetype == "text/html"
    assert "Not allowed" in page.text and "your account may not open this page" in page.text
    assert page.headers["X-Frame-Options"] == "DENY" and page.headers["Cache-Control"] == "no-store"
    assert page.headers["Cache-Control"] == "no-store" and page.headers["X-Frame-Options"] == "DENY"
    api = alice.get("/docs/2/edit", headers=API)
    assert api.status_code == 403 and api.json["error"] == "permission_denied"
    assert login_client("carol").get("/docs/1/edit", headers=API).status_code == 403  # no role


def test_guest_is_asked_to_log_in_not_evaluated(
    authflow_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flask_authflow.authz")
    response = authflow_client.get("/docs/1/edit", headers=API)
    assert response.status_code == 401 and response.json["error"] == "unauthenticated"
    assert not caplog.records


def test_authorize_method_uses_attributes_hook(
    login_client: Any, authflow_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    assert login_client("bob").get("/docs/1/view").json == {"allowed": True}
    assert login_client("alice").get("/docs/1/view").json == {"allowed": False}
    caplog.set_level(logging.INFO, logger="flask_authflow.authz")
    assert authflow_client.get("/docs/1/view").json == {"allowed": False}  # a guest: no user
    assert [r.getMessage() for r in caplog.records] == ["authz deny: no signed-in user, action='view'"]


def test_resource_ids_cannot_forge_log_lines(evaluator: Evaluator, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="flask_authflow.authz")
    evaluator.decide(
        _user(), "edit", Entity("Document", "1\nauthz allow: forged", {"tenant": "acme"}), now=NOW
    )
    (record,) = caplog.records
    assert "\n" not in record.getMessage() and "\\n" in record.getMessage()


def test_a_user_the_loader_no_longer_finds_is_no_principal(app: Flask, login_client: Any) -> None:

    bob = login_client("bob")
    assert bob.get("/docs/1/view").json == {"allowed": True}
    get_state(app).hooks.user_loader = lambda tenant, user_id: None  # the account is gone
    assert bob.get("/docs/1/view").json == {"allowed": False}


def test_principal_carries_session_facts(app: Flask, login_client: Any) -> None:
    client = login_client("alice")
    seen: list[Decision] = []

    @app.get("/probe")
    def probe() -> str:
        from flask_authflow._web.authz import current_principal

        principal = current_principal()
        assert principal is not None
        seen.append(decide("edit", _doc("default")))
        return f"{principal.tenant}|{sorted(principal.roles)}|{principal.factors}|{principal.device_trusted}"

    assert client.get("/probe").text == "default|['editor']|('password',)|False"
    assert seen == [Decision(True, ("editors-edit-own-tenant",))]


@pytest.mark.parametrize("uid", ['Document::"1', "Document::1", "x" * 5000, 'Bad Type::"1"', "%00"])
def test_malformed_resources_from_the_url_never_500(login_client: Any, uid: str) -> None:
    response = login_client("alice").get(f"/raw/{uid}", headers=API)
    assert response.status_code == 403 and response.json["error"] == "permission_denied"


def test_resource_of_the_wrong_shape_never_500(login_client: Any) -> None:
    response = login_client("alice").get("/odd", headers=API)
    assert response.status_code == 403


def test_the_applications_403_handler_answers(app: Flask, login_client: Any) -> None:
    @app.errorhandler(403)
    def forbidden(error: Any) -> tuple[str, int]:
        return f"custom: {error.description}", 403

    response = login_client("alice").get("/docs/2/edit", headers=BROWSER)
    assert response.status_code == 403 and response.text.startswith("custom: You are signed in")


def test_the_applications_permission_denied_handler_answers(app: Flask, login_client: Any) -> None:
    from flask_authflow.errors import PermissionDenied

    @app.errorhandler(PermissionDenied)
    def denied(error: PermissionDenied) -> tuple[str, int]:
        return f"mine: {error.code}", error.status

    response = login_client("alice").get("/docs/2/edit", headers=BROWSER)
    assert response.status_code == 403 and response.text == "mine: permission_denied"


def test_a_base_class_handler_flask_would_not_pick_leaves_the_page(app: Flask, login_client: Any) -> None:
    from flask_authflow.errors import AuthnError

    @app.errorhandler(AuthnError)
    def authn(error: AuthnError) -> tuple[str, int]:  # pragma: no cover - the extension's is more specific
        return "base", error.status

    response = login_client("alice").get("/docs/2/edit", headers=BROWSER)
    assert response.status_code == 403 and "Not allowed" in response.text


def test_decorator_refuses_a_non_string_action() -> None:
    with pytest.raises(TypeError, match="action's name as a string"):
        authorize(3, 'Document::"1"')  # type: ignore[arg-type]


def test_invalid_policy_file_stops_init_app(mock_clock: Any, authflow_hasher: Any, tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.cedar", 'permit(principal, action == Action::"nope", resource);')
    with pytest.raises(ConfigurationError, match=_refusal("bad.cedar", 1, MISMATCH, SCHEMA_KEY)):
        _make_app(mock_clock, authflow_hasher, [str(bad)])


def test_app_without_policies_denies_everything(mock_clock: Any, authflow_hasher: Any) -> None:
    app, _authflow = _make_app(mock_clock, authflow_hasher, [])

    @app.get("/view")
    def view() -> Any:
        return {"allowed": is_authorized("view", _doc("default"))}

    assert app.extensions[AUTHZ_KEY].evaluator.policies is None
    assert login_test_client(app, "bob").get("/view").json == {"allowed": False}
    config: dict[str, Any] = {}
    apply_defaults(config)
    assert config["AUTHFLOW_AUTHZ_POLICIES"] == [] and config["AUTHFLOW_AUTHZ_SCHEMA"] is None


def test_authorization_needs_an_initialised_app() -> None:
    with Flask("bare").test_request_context(), pytest.raises(RuntimeError, match="not initialised"):
        decide("view", 'Document::"1"')


def test_stored_roles_are_the_principals_roles_without_a_roles_loader(
    tmp_path: Path, mock_clock: Any, authflow_hasher: Any
) -> None:
    """With no roles_loader hook, a role given with the store (as ``users add-role`` does) is
    what the policies see; taking it away denies on the next request."""
    policy = _write(tmp_path, "editors.cedar", 'permit(principal in Role::"editor", action, resource);\n')
    app = Flask(__name__)
    app.config.update(
        TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_AUTHZ_POLICIES=[policy]
    )
    backend = InMemoryBackend(clock=mock_clock)
    AuthFlow(app, backend=backend, session_store=MemorySessionStore(clock=mock_clock), clock=mock_clock)

    @app.get("/edit")
    @authorize("edit", 'Document::"1"')
    def edit() -> str:
        return "editing"

    user = add_user(backend, "default", "erin", "correct horse battery")
    backend.create_role("default", "editor")
    client = login_test_client(app, "erin", password="correct horse battery")
    json_only = {"Accept": "application/json"}
    assert client.get("/edit", headers=json_only).status_code == 403
    backend.add_user_role("default", user.user_id, "editor")
    assert client.get("/edit").text == "editing"
    backend.remove_user_role("default", user.user_id, "editor")
    assert client.get("/edit", headers=json_only).status_code == 403
