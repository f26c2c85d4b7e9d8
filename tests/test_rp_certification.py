"""An emulation of the OpenID Foundation's relying-party certification plans, run offline.

Each test is one module of the conformance suite's RP plans, named after the module's
``rp-...`` name (the suite's own module name is in its docstring). The provider is the
scriptable :class:`~flask_authflow.testing._provider.TestOpenIDProvider` served on a real
127.0.0.1 port, shaped like the suite's: an issuer ending in ``/``, keys published
without ``alg``, RS256 ID tokens with ``at_hash``. The relying party is the reference app
(``examples.reference.app``) with the documented minimal configuration: discovery URL,
client id, client secret and redirect URI, nothing else.

Plans and modules emulated (30 tests, 31 module entries; ``rp-id-token-sig-none`` is in
both Basic and Config):

* Basic (oidcc-client-basic-certification-test-plan), 14: rp-response-type-code,
  rp-id-token-issuer-mismatch, rp-id-token-sub, rp-id-token-aud, rp-id-token-iat,
  rp-id-token-kid-absent-single-jwks, rp-id-token-kid-absent-multiple-jwks,
  rp-id-token-sig-rs256, rp-id-token-sig-none, rp-id-token-bad-sig-rs256,
  rp-userinfo-bad-sub-claim, rp-nonce-invalid, rp-scope-userinfo-claims,
  rp-token-endpoint-client-secret-basic.
* Config (oidcc-client-config-certification-test-plan), 6: rp-discovery-openid-configuration,
  rp-discovery-jwks-uri-keys, rp-discovery-issuer-not-matching-config, rp-id-token-sig-none,
  rp-key-rotation-op-sign-key-native, rp-key-rotation-op-sign-key. (WebFinger and dynamic
  registration modules are outside these plans' code-flow variant and are not emulated.)
* Back-Channel Logout (oidcc-client-back-channel-logout-rp-basic), 8:
  rp-backchannel-rpinitlogout and its -lt-alg-none, -lt-no-event, -lt-with-nonce,
  -lt-wrong-alg, -lt-wrong-aud, -lt-wrong-event, -lt-wrong-issuer variants.
* RP-Initiated Logout (oidcc-client-rp-initiated-logout-rp-basic), 3: rp-init-logout,
  rp-init-logout-other-state, rp-init-logout-no-state.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from examples.reference.app import create_app
from flask_authflow import get_state
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.federation_support import ServedProvider

# A deployment over real HTTP: the app keeps its wall clock (its JWKS refetch floor is waited
# out with time.sleep) and its SQLite file, as deployed.
pytestmark = [pytest.mark.http, pytest.mark.authflow_stores("app")]

NAME = "op"
CLIENT_ID = "rp-certification"
CLIENT_SECRET = "rp+cert%secret&with=specials"
REDIRECT_URI = f"http://localhost/auth/callback/{NAME}"
LOGOUT_RETURN = f"http://localhost/auth/logout/return/{NAME}"
BACKCHANNEL_URI = f"http://localhost/auth/backchannel-logout/{NAME}"
FAST_ARGON2 = {
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 8,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}


@dataclass
class Run:
    """One module run: the suite-shaped provider and the reference app configured minimally."""

    op: TestOpenIDProvider
    app: Flask

    def browser(self) -> FlaskClient:
        return self.app.test_client()

    def authorize(self, browser: FlaskClient) -> str:
        """The login redirect, followed through the provider; returns the callback path and query."""
        start = browser.get(f"/auth/login/{NAME}")
        assert start.status_code == 302, start.text
        answer = requests.get(start.location, allow_redirects=False, timeout=10)
        assert answer.status_code == 302, answer.text
        back = urlsplit(answer.headers["Location"])
        assert f"{back.scheme}://{back.netloc}{back.path}" == REDIRECT_URI
        return f"{back.path}?{back.query}"

    def sign_in(self, browser: FlaskClient) -> Any:
        return browser.get(self.authorize(browser))

    def signed_in(self, browser: FlaskClient) -> bool:
        status = browser.get("/dashboard", headers={"Accept": "application/json"}).status_code
        assert status in (200, 401)
        return status == 200

    def metric(self, name: str) -> int:
        lines = self.app.test_client().get("/metrics").text.splitlines()
        return int(next(line.split()[1] for line in lines if line.startswith(f"{name} ")))

    def failures(self, event: str = "oauth_login") -> list[str | None]:
        """The reasons of the failed ``event`` audit rows."""
        rows = get_state(self.app).backend.audit_rows
        return [row.reason for row in rows if row.event == event and row.status == "failure"]

    def rp_initiated_logout(self, browser: FlaskClient) -> str:
        """POST the app's logout (as a script does) and return the provider's end-session URL."""
        response = browser.post("/auth/logout", json={})
        assert response.status_code == 200 and response.json is not None, response.text
        location: str = response.json["location"]
        return location


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    served = ServedProvider(trailing_slash=True)
    op = served.provider
    op.publish_alg = False  # the suite's key sets name no alg
    op.register_client(
        CLIENT_ID,
        CLIENT_SECRET,
        [REDIRECT_URI],
        post_logout_redirect_uris=[LOGOUT_RETURN],
        backchannel_logout_uri=BACKCHANNEL_URI,
    )
    op.login_as("certification-user", email="user@example.com", email_verified=True, name="Cert User")
    minimal = {
        "discovery_url": op.discovery_url,
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uri": REDIRECT_URI,
    }
    app = create_app(
        {
            "TESTING": True,
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'rp.db'}",
            "AUTHFLOW_OAUTH_PROVIDERS": {NAME: minimal},
            **FAST_ARGON2,
        },
        instance_path=str(tmp_path / "instance"),
    )
    try:
        yield Run(op, app)
    finally:
        served.stop()


def refused(run: Run, *tamper: Any, text: str = "") -> None:
    """The module's ID token is refused: 401 naming the check, an audit row, no session."""
    run.op.tamper_next(*tamper)
    browser = run.browser()
    response = run.sign_in(browser)
    assert response.status_code == 401, response.text
    assert text in response.text
    assert len(run.failures()) == 1
    assert not run.signed_in(browser)


# --- Basic ------------------------------------------------------------------------------------------


def test_rp_response_type_code(run: Run) -> None:
    """oidcc-client-test: code flow with PKCE, token request, userinfo with the bearer header."""
    browser = run.browser()
    response = run.sign_in(browser)
    assert response.status_code == 302 and response.location == "/"
    assert run.signed_in(browser)
    assert run.op.token_requests == ["client_secret_basic"] and run.op.userinfo_requests == 1


def test_rp_id_token_issuer_mismatch(run: Run) -> None:
    """oidcc-client-test-invalid-iss."""
    refused(run, "wrong_iss", text="issuer")


def test_rp_id_token_sub(run: Run) -> None:
    """oidcc-client-test-missing-sub."""
    refused(run, "no_sub", text="sub")


def test_rp_id_token_aud(run: Run) -> None:
    """oidcc-client-test-invalid-aud."""
    refused(run, "wrong_aud", text="audience")


def test_rp_id_token_iat(run: Run) -> None:
    """oidcc-client-test-missing-iat."""
    refused(run, "no_iat", text="iat")


def test_rp_id_token_kid_absent_single_jwks(run: Run) -> None:
    """oidcc-client-test-kid-absent-single-jwks: one key, no kid in the header: accepted."""
    run.op.tamper_next("missing_kid")
    browser = run.browser()
    assert run.sign_in(browser).status_code == 302 and run.signed_in(browser)


def test_rp_id_token_kid_absent_multiple_jwks(run: Run) -> None:
    """oidcc-client-test-kid-absent-multiple-jwks: two matching keys, no kid: refused."""
    run.op.rotate_key(keep_old=True)
    refused(run, "missing_kid", text="kid")


def test_rp_id_token_sig_rs256(run: Run) -> None:
    """oidcc-client-test-idtoken-sig-rs256."""
    browser = run.browser()
    assert run.sign_in(browser).status_code == 302 and run.signed_in(browser)
    assert run.op.algorithm == "RS256"


def test_rp_id_token_sig_none(run: Run) -> None:
    """oidcc-client-test-idtoken-sig-none (Basic and Config): the client is registered for
    RS256 (the default), so an unsigned ID token is refused."""
    refused(run, "alg_none", text="algorithm")


def test_rp_id_token_bad_sig_rs256(run: Run) -> None:
    """oidcc-client-test-invalid-sig-rs256."""
    refused(run, "bad_signature", text="signature")


def test_rp_userinfo_bad_sub_claim(run: Run) -> None:
    """oidcc-client-test-userinfo-invalid-sub: userinfo is fetched without any option."""
    refused(run, "userinfo_wrong_sub", text="userinfo")


def test_rp_nonce_invalid(run: Run) -> None:
    """oidcc-client-test-nonce-invalid."""
    refused(run, "wrong_nonce", text="nonce")


def test_rp_scope_userinfo_claims(run: Run) -> None:
    """oidcc-client-test-scope-userinfo-claims: profile and email requested, claims from userinfo."""
    browser = run.browser()
    start = browser.get(f"/auth/login/{NAME}")
    scopes = parse_qs(urlsplit(start.location).query)["scope"][0].split()
    assert {"openid", "profile", "email"} <= set(scopes)
    answer = requests.get(start.location, allow_redirects=False, timeout=10)
    back = urlsplit(answer.headers["Location"])
    assert browser.get(f"{back.path}?{back.query}").status_code == 302
    assert run.op.userinfo_requests == 1 and run.signed_in(browser)


def test_rp_token_endpoint_client_secret_basic(run: Run) -> None:
    """oidcc-client-test-client-secret-basic: HTTP Basic with the form-urlencoded secret."""
    run.op.register_client(
        CLIENT_ID,
        CLIENT_SECRET,
        [REDIRECT_URI],
        post_logout_redirect_uris=[LOGOUT_RETURN],
        token_endpoint_auth_method="client_secret_basic",
    )
    browser = run.browser()
    assert run.sign_in(browser).status_code == 302
    assert run.op.token_requests == ["client_secret_basic"]


# --- Config -----------------------------------------------------------------------------------------


def test_rp_discovery_openid_configuration(run: Run) -> None:
    """oidcc-client-test-discovery-openid-config: the issuer ends in /, the document is found."""
    assert run.op.issuer.endswith("/") and not run.op.discovery_url.endswith(
        "//.well-known/openid-configuration"
    )
    browser = run.browser()
    assert run.sign_in(browser).status_code == 302
    assert run.op.discovery_requests == 1


def test_rp_discovery_jwks_uri_keys(run: Run) -> None:
    """oidcc-client-test-discovery-jwks-uri-keys: the keys come from the document's jwks_uri."""
    browser = run.browser()
    assert run.sign_in(browser).status_code == 302 and run.signed_in(browser)
    assert run.metric("authflow_jwks_refreshes_total") == 1


def test_rp_discovery_issuer_not_matching_config(run: Run) -> None:
    """oidcc-client-test-discovery-issuer-mismatch: the document names another issuer."""
    run.op.discovery_overrides["issuer"] = "https://another-issuer.example/"
    response = run.browser().get(f"/auth/login/{NAME}")
    assert response.status_code == 502 and "issuer" in response.text


def test_rp_key_rotation_op_sign_key_native(run: Run) -> None:
    """oidcc-client-test-signing-key-rotation-just-before-signing: keys replaced right
    before the ID token is signed; the client fetches them again at once."""
    assert run.sign_in(run.browser()).status_code == 302  # the keys are cached
    time.sleep(1.05)  # past the 1 s floor of the last fetch
    browser = run.browser()
    target = run.authorize(browser)
    run.op.rotate_key(keep_old=False)  # before the token endpoint signs
    assert browser.get(target).status_code == 302 and run.signed_in(browser)
    assert run.metric("authflow_jwks_refreshes_total") == 2


def test_rp_key_rotation_op_sign_key(run: Run) -> None:
    """oidcc-client-test-signing-key-rotation: rotated after the first ID token."""
    assert run.sign_in(run.browser()).status_code == 302
    run.op.rotate_key(keep_old=False)
    time.sleep(1.05)
    browser = run.browser()
    assert run.sign_in(browser).status_code == 302 and run.signed_in(browser)
    assert run.metric("authflow_jwks_refreshes_total") == 2


# --- Back-Channel Logout ----------------------------------------------------------------------------


def backchannel(run: Run, *tamper: Any) -> tuple[int, FlaskClient]:
    """Sign in twice, log the first session out (RP-initiated), then the provider POSTs a
    logout token for the user; returns its status and the other (second) session."""
    first, second = run.browser(), run.browser()
    assert run.sign_in(first).status_code == 302 and run.sign_in(second).status_code == 302
    end_session = run.rp_initiated_logout(first)
    assert requests.get(end_session, allow_redirects=False, timeout=10).status_code == 302
    result = run.op.send_backchannel_logout(run.app.test_client(), sub="certification-user", tamper=tamper)
    assert result.headers.get("Cache-Control") == "no-store"
    return result.status_code, second


def test_rp_backchannel_rpinitlogout(run: Run) -> None:
    """oidcc-client-test-rp-backchannel-rpinitlogout: a valid logout token ends the user's sessions."""
    status, other = backchannel(run)
    assert status == 200 and not run.signed_in(other)


@pytest.mark.parametrize(
    ("tamper", "module"),
    [
        ("alg_none", "alg-none"),
        ("logout_no_events", "no-event"),
        ("logout_nonce", "with-nonce"),
        ("wrong_aud", "wrong-aud"),
        ("logout_wrong_event", "wrong-event"),
        ("wrong_iss", "wrong-issuer"),
    ],
)
def test_rp_backchannel_rpinitlogout_lt(run: Run, tamper: str, module: str) -> None:
    """oidcc-client-test-rp-backchannel-rpinitlogout-{module}: refused with 400, nothing revoked."""
    status, other = backchannel(run, tamper)
    assert status == 400 and run.signed_in(other), module
    assert run.failures("backchannel_logout") == ["logout_token_invalid"]


def test_rp_backchannel_rpinitlogout_wrong_alg(run: Run) -> None:
    """oidcc-client-test-rp-backchannel-rpinitlogout-wrong-alg: a valid provider key of
    another algorithm than the client's RS256: refused with 400."""
    status, other = backchannel(run, "wrong_alg")
    assert status == 400 and run.signed_in(other)


# --- RP-Initiated Logout ----------------------------------------------------------------------------


def logout_round_trip(run: Run) -> tuple[FlaskClient, dict[str, str], Any]:
    browser = run.browser()
    assert run.sign_in(browser).status_code == 302
    end_session = run.rp_initiated_logout(browser)
    params = {k: v[0] for k, v in parse_qs(urlsplit(end_session).query).items()}
    back = requests.get(end_session, allow_redirects=False, timeout=10)
    assert back.status_code == 302
    returned = urlsplit(back.headers["Location"])
    assert f"{returned.scheme}://{returned.netloc}{returned.path}" == LOGOUT_RETURN
    return browser, params, browser.get(f"{returned.path}?{returned.query}")


def test_rp_init_logout(run: Run) -> None:
    """oidcc-client-test-rp-init-logout: id_token_hint, the app's own return URI and a state."""
    browser, params, landed = logout_round_trip(run)
    assert params["post_logout_redirect_uri"] == LOGOUT_RETURN and params["state"]
    assert params["id_token_hint"].count(".") == 2 and params["client_id"] == CLIENT_ID
    assert landed.status_code == 302 and landed.location == "/"
    assert not run.signed_in(browser)
    assert run.op.end_session_requests[-1]["state"] == params["state"]


def test_rp_init_logout_other_state(run: Run) -> None:
    """oidcc-client-test-rp-init-logout-other-state: the return is refused, the user stays out."""
    run.op.logout_state = "other"
    browser, _, landed = logout_round_trip(run)
    assert landed.status_code == 400 and "does not match" in landed.text
    assert not run.signed_in(browser)


def test_rp_init_logout_no_state(run: Run) -> None:
    """oidcc-client-test-rp-init-logout-no-state: the return is refused, the user stays out."""
    run.op.logout_state = "omit"
    browser, _, landed = logout_round_trip(run)
    assert landed.status_code == 400
    assert not run.signed_in(browser)
