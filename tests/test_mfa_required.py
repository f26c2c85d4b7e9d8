"""Second factors required by policy (AUTHFLOW_MFA_REQUIRED, login/mfa_policy.py): after the
first factor of any sign-in, a user who must have a counting factor and has none is held in
the required enrollment; only the enrollment pages and logout are reachable; the first
counting factor set up authenticates the session."""

from __future__ import annotations

import dataclasses
import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from flask import jsonify
from flask.testing import FlaskClient

from flask_authflow import AuthFlow, get_state, login_required
from flask_authflow._core.ports import FactorConfig
from flask_authflow._core.session import AuthState
from flask_authflow._outcomes import FactorKind
from flask_authflow._web.decorators import roles_required
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.login import _required_enrollment as required_enrollment
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.appfactory import AppFactory
from tests.federation_support import CLIENT_ID, CLIENT_SECRET, PROVIDER, REDIRECT_URI, FederatedApp
from tests.test_required_enrollment import confirm_totp, start_totp, state_of
from tests.test_views import (
    AUTHENTICATOR,
    FakeKey,
    Site,
    confirm_recovery_codes,
    csrf_of,
    generate_recovery_codes,
    login,
    make_site,
)

ADMIN_POLICY = (
    'permit(principal in Role::"admin", action == Action::"require_mfa", resource);\n'
    'permit(principal in Role::"admin", action == Action::"admin_page", resource);\n'
)


def mfa_site(app_factory: AppFactory, **config: Any) -> Site:
    config.setdefault("AUTHFLOW_MFA_REQUIRED", True)
    site = make_site(app_factory, **config)
    app = site.app

    @app.get("/admin")
    @roles_required("admin")
    def admin() -> str:
        return "admin page"

    @app.get("/api/data")
    @login_required(api=True)
    def api_data() -> Any:
        return jsonify(ok=True)

    @app.post("/magic/<name>")
    def magic(name: str) -> Any:
        outcome = site.authflow.login.user(site.user_id(name), method="magic_link")
        return jsonify(outcome=type(outcome).__name__)

    return site


def held(site: Site, who: str = "alice") -> bool:
    return [r.state for r in site.sessions(who)] == [AuthState.PENDING_WORKFLOW]


def add_role(site: Site, who: str, role: str = "admin") -> None:
    if role not in {r.name for r in site.backend.list_roles("default")}:
        site.backend.create_role("default", role)
    site.backend.add_user_role("default", site.user_id(who), role)


# --- each form of the setting ------------------------------------------------------------------------


def test_off_by_default_nobody_is_held(app_factory: AppFactory) -> None:
    site = make_site(app_factory)
    client = site.client()
    assert login(client).location == "/account"
    assert client.get("/private").text == "private page"


def test_true_holds_every_user_without_a_factor_until_one_is_set_up(app_factory: AppFactory) -> None:
    site = mfa_site(app_factory)
    client = site.client()
    answer = login(client)
    assert answer.status_code == 302 and answer.location == "/account/factors"
    assert held(site)
    listing = client.get("/account/factors")
    assert listing.status_code == 200 and 'id="required-enrollment"' in listing.text
    assert 'id="add-totp-form"' in listing.text and 'id="recovery-codes-form"' not in listing.text
    held_sid = site.sessions()[0].sid
    secret, page = start_totp(client)
    assert confirm_totp(site, client, secret, page) == "/account/factors?notice=totp_added"
    (record,) = site.sessions()
    assert record.state is AuthState.AUTHENTICATED and record.sid != held_sid
    assert client.get("/private").text == "private page"
    rows = [r for r in site.backend.audit_rows if r.event in ("factor_verify", "login")]
    assert rows[-1].status == "success" and rows[-1].reason == "required_enrollment"
    assert any(r.status == "pending_workflow" and r.reason == "required_enrollment policy" for r in rows)
    # Nothing was stored: the next sign-in asks for the new factor, and is not held.
    assert (
        required_enrollment.required_kinds(
            get_state(site.app).service, "default", site.user_id(), site.clock.now()
        )
        == ()
    )
    assert login(site.client()).location.startswith("/login/factor")


def test_a_user_with_a_counting_factor_is_not_held(app_factory: AppFactory) -> None:
    site = mfa_site(app_factory)
    site.backend.enroll_factor("default", site.user_id("bob"), FactorKind.EMAIL_OTP, "bob@example.com")
    client = site.client()
    answer = login(client, username="bob", password="bob's own password")
    assert answer.location.startswith("/login/factor")  # the ordinary second step, no hold
    assert not held(site, "bob")


def test_recovery_codes_alone_do_not_count(app_factory: AppFactory) -> None:
    site = mfa_site(app_factory)
    site.backend.enroll_factor("default", site.user_id(), FactorKind.RECOVERY_CODE, "codes")
    client = site.client()
    assert login(client).location == "/account/factors" and held(site)
    assert client.get("/private").status_code == 401


def test_a_list_of_roles_holds_only_their_holders(app_factory: AppFactory) -> None:
    site = mfa_site(app_factory, AUTHFLOW_MFA_REQUIRED=["admin", "auditor"])
    add_role(site, "alice")
    alice, bob = site.client(), site.client()
    assert login(alice).location == "/account/factors" and held(site)
    assert login(bob, username="bob", password="bob's own password").location == "/account"
    assert bob.get("/private").text == "private page"


def test_a_cedar_action_holds_whom_the_policies_permit_it_for(app_factory: AppFactory) -> None:
    site = mfa_site(app_factory, AUTHFLOW_MFA_REQUIRED="require_mfa", AUTHFLOW_AUTHZ_POLICIES=[ADMIN_POLICY])
    add_role(site, "alice")
    alice, bob = site.client(), site.client()
    assert login(alice).location == "/account/factors" and held(site)
    assert login(bob, username="bob", password="bob's own password").location == "/account"


def test_a_forbid_exempts_and_the_full_uid_is_accepted(app_factory: AppFactory) -> None:
    policy = ADMIN_POLICY + 'forbid(principal in Role::"robot", action == Action::"require_mfa", resource);\n'
    site = mfa_site(
        app_factory, AUTHFLOW_MFA_REQUIRED='Action::"require_mfa"', AUTHFLOW_AUTHZ_POLICIES=[policy]
    )
    add_role(site, "alice")
    add_role(site, "bob")
    add_role(site, "bob", "robot")
    assert login(site.client()).location == "/account/factors"
    assert login(site.client(), username="bob", password="bob's own password").location == "/account"


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"AUTHFLOW_MFA_REQUIRED": 5}, "AUTHFLOW_MFA_REQUIRED must be"),
        ({"AUTHFLOW_MFA_REQUIRED": []}, "AUTHFLOW_MFA_REQUIRED must be"),
        ({"AUTHFLOW_MFA_REQUIRED": ["bad role!"]}, "AUTHFLOW_MFA_REQUIRED: a role name"),
        ({"AUTHFLOW_MFA_REQUIRED": " "}, "names a Cedar action"),
        ({"AUTHFLOW_MFA_REQUIRED": "require_mfa"}, "which no policy of AUTHFLOW_AUTHZ_POLICIES names"),
        (
            {
                "AUTHFLOW_MFA_REQUIRED": "require_mfa",
                "AUTHFLOW_AUTHZ_POLICIES": ['permit(principal, action == Action::"other", resource);'],
            },
            "which no policy of AUTHFLOW_AUTHZ_POLICIES names",
        ),
        (
            {"AUTHFLOW_MFA_REQUIRED": 'Role::"x"', "AUTHFLOW_AUTHZ_POLICIES": [ADMIN_POLICY]},
            "AUTHFLOW_MFA_REQUIRED: the action's type must be Action",
        ),
        ({"AUTHFLOW_MFA_REQUIRED_KINDS": "phishing_resistant"}, "set AUTHFLOW_WEBAUTHN_RP_ID"),
        ({"AUTHFLOW_MFA_REQUIRED_KINDS": ["password"]}, "'password' is not a second factor"),
        ({"AUTHFLOW_MFA_REQUIRED_KINDS": ["recovery_code"]}, "'recovery_code' is not a second factor"),
        ({"AUTHFLOW_MFA_REQUIRED_KINDS": ["sms"]}, "'sms' is not a factor kind"),
        ({"AUTHFLOW_MFA_REQUIRED_KINDS": "totp"}, "must be None, 'phishing_resistant' or a list"),
        ({"AUTHFLOW_MFA_REQUIRED_KINDS": []}, "must be None, 'phishing_resistant' or a list"),
    ],
)
def test_init_app_refuses_a_bad_setting_with_what_to_set(
    app_factory: AppFactory, config: dict[str, Any], words: str
) -> None:
    config.setdefault("AUTHFLOW_MFA_REQUIRED", True)
    with pytest.raises(ConfigurationError, match=words.replace("(", r"\(")) as refused:
        app_factory(authflow=AuthFlow(), **config)
    assert "AUTHFLOW_MFA_REQUIRED" in str(refused.value)


def test_unknown_role_names_are_fine_at_configuration_time(app_factory: AppFactory) -> None:
    site = mfa_site(app_factory, AUTHFLOW_MFA_REQUIRED=["no-such-role-yet"])
    assert login(site.client()).location == "/account"


# --- the kinds that count ------------------------------------------------------------------------


def test_a_list_of_kinds_holds_a_user_whose_factor_does_not_count(app_factory: AppFactory) -> None:
    site = mfa_site(app_factory, AUTHFLOW_MFA_REQUIRED_KINDS=["totp"])
    site.backend.enroll_factor("default", site.user_id("bob"), FactorKind.HOTP, "seed")
    client = site.client()
    login(client, username="bob", password="bob's own password")
    assert not held(site, "bob")  # the HOTP step comes first
    assert "totp" in get_state(site.app).service.mfa_requirement.kinds  # type: ignore[union-attr]


def key_site(app_factory: AppFactory, **config: Any) -> tuple[Site, FakeKey]:
    site = mfa_site(
        app_factory,
        AUTHFLOW_WEBAUTHN_RP_ID="example.com",
        AUTHFLOW_WEBAUTHN_ORIGINS=["https://example.com"],
        AUTHFLOW_PASSKEY_LOGIN=True,
        **config,
    )
    key = FakeKey()
    get_state(site.app).service.register_factor(key)
    return site, key


def test_phishing_resistant_counts_only_security_keys_and_passkeys(app_factory: AppFactory) -> None:
    site, _ = key_site(app_factory, AUTHFLOW_MFA_REQUIRED_KINDS="phishing_resistant")
    client = site.client()
    assert login(client).location == "/account/factors"
    listing = client.get("/account/factors").text
    assert 'id="add-webauthn-form"' in listing and 'id="add-totp-form"' not in listing
    token = csrf_of(listing)
    refused = client.post("/account/factors/totp", data={"csrf_token": token})
    assert refused.status_code != 200 and held(site)  # TOTP is not offered, nor accepted
    options = client.post("/account/factors/webauthn/options", data={"csrf_token": token, "label": "Key"})
    assert options.status_code == 200, options.text
    attestation = {
        "type": "public-key",
        "response": {"attestationObject": AUTHENTICATOR["attestationObject"], "transports": ["usb", "nfc"]},
    }
    done = client.post(
        "/account/factors/webauthn/confirm",
        data={
            "factor_id": options.json["factor_id"],
            "credential": json.dumps(attestation),
            "csrf_token": token,
        },
    )
    assert done.status_code == 302, done.text
    assert [r.state for r in site.sessions()] == [AuthState.AUTHENTICATED]
    assert client.get("/private").text == "private page"


# --- each kind of sign-in ------------------------------------------------------------------------


def passkey_user(site: Site, who: str = "alice") -> None:
    config = FactorConfig(
        user_id=site.user_id(who), kind=FactorKind.WEBAUTHN, created_at=site.clock.now(), factor_id="key1",
        confirmed=True, data={"label": "Phone", "passkey": True}, lookup=AUTHENTICATOR["rawId"],
    )  # fmt: skip
    site.backend.add_factor("default", config)


def passkey_sign_in(client: FlaskClient) -> Any:
    token = csrf_of(client.get("/login").text)
    assert client.post("/login/passkey/options", data={"csrf_token": token}).status_code == 200
    credential = {
        "type": "public-key", "id": AUTHENTICATOR["rawId"], "rawId": AUTHENTICATOR["rawId"],
        "response": {k: AUTHENTICATOR[k] for k in ("clientDataJSON", "authenticatorData", "signature",
                                                   "userHandle")},
    }  # fmt: skip
    return client.post("/login/passkey", data={"csrf_token": token, "credential": json.dumps(credential)})


def test_a_passkey_counts_and_its_sign_in_is_not_held(app_factory: AppFactory) -> None:
    site, _ = key_site(app_factory, AUTHFLOW_MFA_REQUIRED_KINDS="phishing_resistant")
    passkey_user(site)
    client = site.client()
    answer = passkey_sign_in(client)
    assert answer.json["status"] == "authenticated"
    assert client.get("/private").text == "private page"


def test_a_passkey_sign_in_is_held_when_its_kind_does_not_count(app_factory: AppFactory) -> None:
    site, _ = key_site(app_factory, AUTHFLOW_MFA_REQUIRED_KINDS=["totp"])
    passkey_user(site)
    client = site.client()
    answer = passkey_sign_in(client)
    assert answer.status_code == 200 and answer.json == {
        "status": "enrollment_required",
        "location": "/account/factors",
    }
    assert held(site) and client.get("/private").status_code == 401
    secret, page = start_totp(client)
    confirm_totp(site, client, secret, page)
    assert client.get("/private").text == "private page"


def test_login_user_is_held(app_factory: AppFactory) -> None:
    site = mfa_site(app_factory)
    client = site.client()
    assert client.post("/magic/alice").json == {"outcome": "WorkflowPending"}
    assert held(site) and client.get("/private").status_code == 401
    assert client.get("/account/factors").status_code == 200


def test_a_federated_sign_in_is_held(app_factory: AppFactory, oidc_provider: TestOpenIDProvider) -> None:
    oidc_provider.register_client(CLIENT_ID, CLIENT_SECRET, [REDIRECT_URI])
    provider = {"discovery_url": oidc_provider.discovery_url, "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET, "redirect_uri": REDIRECT_URI,
                "post_login_redirect": "/private"}  # fmt: skip
    site = mfa_site(
        app_factory,
        http_client=RequestsHttpClient(adapters=oidc_provider.http_adapters()),
        AUTHFLOW_OAUTH_PROVIDERS={PROVIDER: provider},
    )
    fed = FederatedApp(site.app, site.authflow, site.backend, site.store, oidc_provider, site.clock)
    oidc_provider.login_as("fed-user", email="fed@example.com", email_verified=True)
    client = fed.client()
    callback = fed.sign_in(client)
    assert callback.status_code == 302 and callback.location == "/private"
    to_enroll = client.get("/private", headers={"Accept": "text/html"})
    assert to_enroll.status_code == 302 and to_enroll.location == "/account/factors"
    assert (
        client.get("/private", headers={"Accept": "application/json"}).json["error"] == "enrollment_required"
    )
    assert client.get("/account/factors").status_code == 200


# --- what a held session can reach ---------------------------------------------------------------


@pytest.fixture
def held_client(app_factory: AppFactory) -> tuple[Site, FlaskClient]:
    site = mfa_site(app_factory)
    add_role(site, "alice")
    client = site.client()
    login(client)
    assert held(site)
    return site, client


@pytest.mark.parametrize("path", ["/private", "/sensitive", "/admin", "/api/data"])
def test_a_held_session_cannot_reach_a_protected_route(
    held_client: tuple[Site, FlaskClient], path: str
) -> None:
    site, client = held_client
    answer = client.get(path, headers={"Accept": "application/json"})
    assert answer.status_code == 401
    assert answer.json["error"] == "enrollment_required" and "totp" in answer.json["kinds"].split(",")
    browser = client.get(path, headers={"Accept": "text/html"})
    assert browser.status_code == 302 and browser.location == "/account/factors"
    assert held(site)


def test_a_held_session_with_a_bearer_header_is_still_refused(held_client: tuple[Site, FlaskClient]) -> None:
    _, client = held_client
    answer = client.get(
        "/api/data", headers={"Authorization": "Bearer afp_not-a-token", "Accept": "application/json"}
    )
    assert answer.status_code == 401 and answer.json["error"] != "ok"


def test_the_ready_views_other_than_enrollment_are_not_reachable(
    held_client: tuple[Site, FlaskClient],
) -> None:
    _, client = held_client
    for path in ("/account", "/step-up", "/account/api-tokens"):
        answer = client.get(path) if path != "/account/api-tokens" else client.post(path, data={"name": "x"})
        assert answer.status_code in (302, 400, 401), (path, answer.status_code)
        assert answer.location is None or answer.location.startswith("/login")


def test_logout_from_the_held_state(held_client: tuple[Site, FlaskClient]) -> None:
    site, client = held_client
    listing = client.get("/account/factors")
    out = client.post("/auth/logout", data={"csrf_token": csrf_of(listing.text)})
    assert out.status_code == 302 and out.location == "/login"
    assert client.get("/private", headers={"Accept": "application/json"}).json["error"] == "unauthenticated"
    assert all(r.state is not AuthState.AUTHENTICATED for r in site.sessions())


def test_the_hold_expires(held_client: tuple[Site, FlaskClient]) -> None:
    site, client = held_client
    site.clock.advance(required_enrollment.HOLD + timedelta(seconds=1))
    answer = client.get("/private", headers={"Accept": "application/json"})
    assert answer.status_code == 401 and answer.json["error"] == "unauthenticated"
    assert client.get("/account/factors").status_code in (302, 401)
    assert login(site.client()).location == "/account/factors"  # held again at the next sign-in


def test_the_stored_and_the_policy_requirement_combine(app_factory: AppFactory) -> None:
    site = mfa_site(app_factory)
    required_enrollment.require(
        site.backend, "default", site.user_id(), ["recovery_code"], site.clock.now(), "import"
    )
    client = site.client()
    login(client)
    listing = client.get("/account/factors").text
    assert 'id="add-totp-form"' in listing and 'id="recovery-codes-form"' in listing
    secret, page = start_totp(client)
    confirm_totp(site, client, secret, page)
    assert state_of(site) is AuthState.PENDING_WORKFLOW  # the stored recovery codes remain
    assert client.get("/private").status_code == 401
    codes, html = generate_recovery_codes(client)
    assert confirm_recovery_codes(client, html, codes[0]).status_code == 302
    assert state_of(site) is AuthState.AUTHENTICATED


def test_a_store_that_cannot_answer_refuses_the_sign_in(app_factory: AppFactory) -> None:
    site = mfa_site(app_factory, AUTHFLOW_MFA_REQUIRED=["admin"])
    service = get_state(site.app).service
    requirement = service.mfa_requirement
    assert requirement is not None

    def down(tenant: str, user_id: str, passed: tuple[str, ...]) -> bool:
        raise OSError("the role store is down")

    service.mfa_requirement = dataclasses.replace(requirement, decide=down)
    client = site.client()
    answer = login(client)
    assert answer.status_code == 503
    assert all(r.state is not AuthState.AUTHENTICATED for r in site.sessions())


def test_parallel_completions_leave_no_session_without_its_own_factor(app_factory: AppFactory) -> None:
    site = mfa_site(app_factory)
    first, second = site.client(), site.client()
    login(first)
    login(second)
    started = [start_totp(first), start_totp(second)]  # the second start replaces the first
    barrier = threading.Barrier(2)
    results: list[str | None] = [None, None]

    def run(index: int, client: FlaskClient) -> None:
        barrier.wait()
        secret, page = started[index]
        results[index] = confirm_totp(site, client, secret, page)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    confirmed = [
        c
        for c in site.backend.list_factors("default", site.user_id())
        if c.kind is FactorKind.TOTP and c.confirmed
    ]
    assert len(confirmed) == 1
    assert [r.state for r in site.sessions()].count(AuthState.AUTHENTICATED) == 1
    assert sum(client.get("/private").status_code == 200 for client in (first, second)) == 1
