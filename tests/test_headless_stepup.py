"""The headless API's step-up and passkey routes with both kinds of client: the user's
strongest step again (here TOTP), its refusals, and the passkey routes' refusals when
passkeys are not offered or no ceremony was begun."""

from __future__ import annotations

import pytest

from flask_authflow._core.ports import FactorConfig
from flask_authflow._outcomes import FactorKind
from flask_authflow._web.state import get_state
from tests.appfactory import AppFactory
from tests.headless_support import KINDS, ApiClient
from tests.test_devices_web import make_device_site
from tests.test_views import AUTHENTICATOR, PASSWORD, FakeKey, Site, make_site
from tests.webauthn_soft import b64url

ALICE = {"username": "alice", "password": PASSWORD}


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    return make_device_site(app_factory)  # alice: password, then TOTP 123456


@pytest.fixture(params=KINDS)
def api(request: pytest.FixtureRequest, site: Site) -> ApiClient:
    client = ApiClient(site.app, request.param)
    client.post("/login/password", ALICE)
    client.post("/login/factor", {"code": "123456"})
    return client


def test_a_step_up_asks_the_strongest_step_and_rotates_the_session(api: ApiClient) -> None:
    begun = api.post("/step-up")
    assert begun.json["kinds"] == ["totp"] and begun.json["session"]["pending_step_up"] == ["totp"]
    before = api.token or api.client.get_cookie("authflow_session").value  # type: ignore[union-attr]
    done = api.post("/step-up/verify", {"kind": "totp", "code": "123456"})
    assert done.json["status"] == "stepped_up" and done.json["session"]["pending_step_up"] == []
    after = api.token or api.client.get_cookie("authflow_session").value  # type: ignore[union-attr]
    assert after != before


def test_the_password_alone_is_not_enough_with_a_second_factor(api: ApiClient) -> None:
    api.post("/step-up")
    refused = api.post("/step-up/verify", {"kind": "password", "password": PASSWORD})
    assert refused.status_code == 400 and refused.json["error"] == "stronger_step"
    refused = api.post("/step-up/verify", {"password": PASSWORD})
    assert refused.status_code == 400 and refused.json["error"] == "stronger_step"


def test_a_wrong_code_ends_the_step_up_and_a_new_one_passes(api: ApiClient) -> None:
    api.post("/step-up")
    wrong = api.post("/step-up/verify", {"code": "000000"})
    assert wrong.status_code == 401 and wrong.json["error"] == "retry_code"
    assert api.get("/session").json["pending_step_up"] == []  # ended, the login stays
    assert api.get("/session").json["state"] == "authenticated"
    assert api.post("/step-up/verify", {"code": "123456"}).json["status"] == "stepped_up"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"kind": "totp"}, "missing_code"),
        ({"kind": "hotp", "code": "1"}, "wrong_kind"),
        ({"code": 1}, "invalid_input"),
    ],
)
def test_a_malformed_step_up_is_400(api: ApiClient, body: dict[str, object], code: str) -> None:
    refused = api.post("/step-up/verify", body)
    assert refused.status_code == 400 and refused.json["error"] == code


def test_sending_a_code_needs_a_kind_that_sends(api: ApiClient) -> None:
    refused = api.post("/step-up/send", {"kind": "totp"})
    assert refused.status_code == 400 and refused.json["error"] == "sends_nothing"
    assert api.post("/step-up/send", {"kind": "email_otp"}).json["error"] == "wrong_kind"
    assert api.post("/step-up/webauthn/options").json["error"] == "wrong_kind"


@pytest.mark.parametrize("kind", KINDS)
def test_the_step_up_routes_need_a_signed_in_user(site: Site, kind: str) -> None:
    guest = ApiClient(site.app, kind)
    for path in ("/step-up", "/step-up/send", "/step-up/webauthn/options"):
        refused = guest.post(path, {"kind": "totp"} if path.endswith("send") else {})
        assert refused.status_code == 401 and refused.json["error"] == "login_required"
    refused = guest.post("/step-up/verify", {"code": "123456"})
    assert refused.status_code == 401 and refused.json["error"] == "login_required"


@pytest.mark.parametrize("kind", KINDS)
def test_passkey_routes_refuse_without_the_factor_or_a_ceremony(app_factory: AppFactory, kind: str) -> None:
    api = ApiClient(make_site(app_factory).app, kind)
    off = api.post("/login/passkey/options")
    assert off.status_code == 400 and off.json["error"] == "factor_not_registered"
    assertion = {"credential": {"type": "public-key", "id": "x", "rawId": "x", "response": {}}}
    refused = api.post("/login/passkey", assertion)
    assert refused.status_code == 401 and refused.json["error"] == "invalid_credential"
    assert api.post("/login/passkey", {"credential": "not an object"}).json["error"] == "invalid_input"
    assert api.get("/session").json["state"] == "guest"


# --- security keys and passkeys that pass --------------------------------------------------------

ASSERTION = {
    "type": "public-key",
    "id": AUTHENTICATOR["rawId"],
    "rawId": AUTHENTICATOR["rawId"],
    "response": {
        key: AUTHENTICATOR[key] for key in ("clientDataJSON", "authenticatorData", "signature", "userHandle")
    },
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_security_key_passes_the_factor_step(app_factory: AppFactory, kind: str) -> None:
    site = make_site(
        app_factory, AUTHFLOW_WEBAUTHN_RP_ID="example.com", AUTHFLOW_WEBAUTHN_ORIGINS=["https://example.com"]
    )
    key = FakeKey()
    get_state(site.app).service.register_factor(key)
    site.backend.enroll_factor("default", site.user_id(), FactorKind.WEBAUTHN, "seed")
    api = ApiClient(site.app, kind)
    assert api.post("/login/password", ALICE).json["kinds"] == ["webauthn"]
    options = api.post("/login/factor/webauthn/options")
    assert options.json["publicKey"]["challenge"] == b64url(key.challenge_bytes)
    forged = {**ASSERTION, "response": {**ASSERTION["response"], "signature": b64url(b"forged")}}
    refused = api.post("/login/factor", {"kind": "webauthn", "credential": forged})
    assert refused.status_code == 401 and refused.json["error"] == "retry_key"
    api.post("/login/factor/webauthn/options")
    done = api.post("/login/factor", {"kind": "webauthn", "credential": ASSERTION})
    assert done.json["status"] == "authenticated"


@pytest.mark.parametrize("kind", KINDS)
def test_a_passkey_signs_in_without_a_username(app_factory: AppFactory, kind: str) -> None:
    site = make_site(
        app_factory,
        AUTHFLOW_WEBAUTHN_RP_ID="example.com",
        AUTHFLOW_WEBAUTHN_ORIGINS=["https://example.com"],
        AUTHFLOW_PASSKEY_LOGIN=True,
    )
    state = get_state(site.app)
    state.service.register_factor(FakeKey())
    site.backend.add_factor(
        "default",
        FactorConfig(
            user_id=site.user_id(), kind=FactorKind.WEBAUTHN, created_at=site.clock.now(), factor_id="key-1",
            confirmed=True, data={"label": "Phone", "passkey": True}, lookup=AUTHENTICATOR["rawId"],
        ),
    )  # fmt: skip
    api = ApiClient(site.app, kind)
    options = api.post("/login/passkey/options").json["publicKey"]
    assert "allowCredentials" not in options
    done = api.post("/login/passkey", {"credential": ASSERTION})
    assert done.json["status"] == "authenticated" and done.json["session"]["user"]["identifier"] == "alice"
    replay = ApiClient(site.app, kind).post("/login/passkey", {"credential": ASSERTION})
    assert replay.status_code in (400, 401) and replay.json["error"] in (
        "invalid_credential",
        "login_not_started",
    )
