"""The headless API's provider routes against the in-process test provider: the list, the
redirect flow for a browser (the callback finishes it as for the pages), and the native
hand-over for apps, whose ID token is checked as the callback's (nonce, audience, expiry,
signature), single use, with each bad token refused and audited."""

from __future__ import annotations

import base64
import hashlib
import secrets
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._web.headless import register_api
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.appfactory import AppFactory
from tests.federation_support import CLIENT_ID, PROVIDER, REDIRECT_URI, FederatedApp, federated_app
from tests.headless_support import ApiClient
from tests.test_views import make_site


@pytest.fixture
def fed(oidc_provider: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any) -> FederatedApp:
    oidc_provider.login_as("alice-sub", email="alice@example.com", email_verified=True)
    made = federated_app(oidc_provider, mock_clock, authflow_hasher)
    register_api(made.app)
    return made


def oauth_rows(fed: FederatedApp) -> list[tuple[str, str | None]]:
    return [(row.status, row.reason) for row in fed.backend.audit_rows if row.event == "oauth_login"]


def rows(fed: FederatedApp) -> list[tuple[str, str, str | None]]:
    return [(row.event, row.status, row.factor) for row in fed.backend.audit_rows]


def test_the_providers_are_listed(fed: FederatedApp, app_factory: AppFactory) -> None:
    assert ApiClient(fed.app, "app").get("/providers").json == {"providers": [{"name": PROVIDER}]}
    assert ApiClient(make_site(app_factory).app, "app").get("/providers").json == {"providers": []}


def test_an_app_hands_over_the_id_token_its_sdk_obtained(fed: FederatedApp) -> None:
    api = ApiClient(fed.app, "app")
    nonce = api.post(f"/providers/{PROVIDER}/native/begin").json["nonce"]
    id_token = fed.provider.id_token(CLIENT_ID, "alice-sub", nonce=nonce)
    done = api.post(f"/providers/{PROVIDER}/native", {"id_token": id_token})
    assert done.json["status"] == "authenticated" and api.token
    assert api.get("/session").json["user"]["identifier"]
    native_rows = rows(fed)
    assert native_rows and all(status != "failure" for _, status, _ in native_rows)
    fed.sign_in(fed.client())  # the same identity through the redirect callback: the same rows,
    browser = rows(fed)[len(native_rows) :]  # and the browser's device (an app keeps no device cookie)
    assert [row for row in browser if row[0] != "device_sign_in"] == native_rows
    again = ApiClient(fed.app, "app")
    again.token = None
    replay = again.post(f"/providers/{PROVIDER}/native", {"id_token": id_token})
    assert replay.status_code == 401 and replay.json["error"] == "csrf_mismatch"  # no ceremony of its own


@pytest.mark.parametrize(
    ("tamper", "code"),
    [("wrong_nonce", "id_token_invalid"), ("wrong_aud", "id_token_invalid"), ("expired", "id_token_invalid"),
     ("no_nonce", "id_token_invalid"), ("bad_signature", "id_token_invalid")],
)  # fmt: skip
def test_a_bad_id_token_is_refused_audited_and_uses_up_the_nonce(
    fed: FederatedApp, tamper: str, code: str
) -> None:
    api = ApiClient(fed.app, "app")
    nonce = api.post(f"/providers/{PROVIDER}/native/begin").json["nonce"]
    bad = fed.provider.id_token(CLIENT_ID, "alice-sub", nonce=nonce, tamper=[tamper])  # type: ignore[list-item]
    refused = api.post(f"/providers/{PROVIDER}/native", {"id_token": bad})
    assert refused.status_code == 401 and refused.json["error"] in (code, "unknown_kid")
    assert oauth_rows(fed) and oauth_rows(fed)[-1][0] == "failure"
    good = fed.provider.id_token(CLIENT_ID, "alice-sub", nonce=nonce)
    assert api.post(f"/providers/{PROVIDER}/native", {"id_token": good}).json["error"] == "csrf_mismatch"
    assert api.get("/session").json["state"] == "guest"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"id_token": "x", "code": "y", "code_verifier": "v" * 43},
        {"code": "y"},
        {"id_token": "x", "code_verifier": "v" * 43},
    ],
)
def test_the_hand_over_takes_a_token_or_a_code_with_its_verifier(
    fed: FederatedApp, body: dict[str, str]
) -> None:
    api = ApiClient(fed.app, "app")
    api.post(f"/providers/{PROVIDER}/native/begin")
    refused = api.post(f"/providers/{PROVIDER}/native", body)
    assert refused.status_code == 400 and refused.json["error"] == "invalid_input"


def _sdk_code(fed: FederatedApp, nonce: str, verifier: str) -> str:
    """What an app's native SDK does itself: an authorization request with its own PKCE
    challenge and the nonce the API gave, answered with a code at the redirect URI."""
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = {
        "response_type": "code",
        "client_id": CLIENT_ID,
        "redirect_uri": REDIRECT_URI,
        "scope": "openid email",
        "state": secrets.token_urlsafe(16),
        "nonce": nonce,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    answer = fed.browser().get(
        f"{fed.provider.issuer}/authorize?{urlencode(query)}", allow_redirects=False, timeout=5
    )
    assert answer.status_code == 302, answer.text
    return parse_qs(urlsplit(answer.headers["Location"]).query)["code"][0]


def test_an_app_hands_over_the_code_and_verifier_its_sdk_obtained(fed: FederatedApp) -> None:
    api = ApiClient(fed.app, "app")
    nonce = api.post(f"/providers/{PROVIDER}/native/begin").json["nonce"]
    verifier = secrets.token_urlsafe(48)
    done = api.post(
        f"/providers/{PROVIDER}/native", {"code": _sdk_code(fed, nonce, verifier), "code_verifier": verifier}
    )
    assert done.json["status"] == "authenticated" and api.token
    assert api.get("/session").json["user"]["identifier"]
    assert rows(fed) and all(status != "failure" for _, status, _ in rows(fed))


def test_a_code_with_another_verifier_is_refused_audited_and_uses_up_the_nonce(fed: FederatedApp) -> None:
    api = ApiClient(fed.app, "app")
    nonce = api.post(f"/providers/{PROVIDER}/native/begin").json["nonce"]
    verifier = secrets.token_urlsafe(48)
    code = _sdk_code(fed, nonce, verifier)
    refused = api.post(
        f"/providers/{PROVIDER}/native", {"code": code, "code_verifier": secrets.token_urlsafe(48)}
    )
    assert refused.status_code == 401 and refused.json["error"] == "token_exchange_failed"  # invalid_grant
    assert oauth_rows(fed)[-1][0] == "failure"
    again = api.post(f"/providers/{PROVIDER}/native", {"code": code, "code_verifier": verifier})
    assert again.json["error"] == "csrf_mismatch"  # the ceremony was single use
    assert api.get("/session").json["state"] == "guest"


def test_unknown_providers_and_the_wrong_client_kind_are_refused(fed: FederatedApp) -> None:
    app, browser = ApiClient(fed.app, "app"), ApiClient(fed.app, "browser")
    assert app.post("/providers/nope/native/begin").json["error"] == "unknown_provider"
    assert app.post("/providers/bad%20name/native/begin").status_code == 400
    assert browser.post(f"/providers/{PROVIDER}/native/begin").json["error"] == "client_kind_mismatch"
    assert app.post(f"/providers/{PROVIDER}/redirect").json["error"] == "client_kind_mismatch"


def test_a_browser_is_sent_to_the_provider_and_the_callback_signs_it_in(fed: FederatedApp) -> None:
    api = ApiClient(fed.app, "browser")
    location = api.post(f"/providers/{PROVIDER}/redirect", {"next": "/dashboard"}).json["location"]
    assert location.startswith(fed.provider.issuer)
    answer = fed.browser().get(location, allow_redirects=False, timeout=5)
    callback = urlsplit(answer.headers["Location"])
    finished = api.client.get(f"{callback.path}?{callback.query}")
    assert finished.status_code == 302 and finished.location == "/dashboard"
    assert api.get("/session").json["state"] == "authenticated"


def test_a_native_code_is_exchanged_with_a_dpop_proof_when_the_provider_uses_dpop(
    mock_clock: MockClock, authflow_hasher: Any
) -> None:
    """With DPoP configured, the native hand-over's code exchange carries a proof of the
    ceremony's key, as the callback's does: the provider (which holds this client to
    DPoP-bound tokens) answers, and the stored tokens are bound to that key. Without the
    proof the exchange was refused (``token_exchange_failed``)."""
    from flask_authflow.federation._dpop import DpopNonces, DpopSigner
    from flask_authflow.issuer import LocalIdpSigningKey, MemoryLocalIdpKeyStore
    from tests.federation_support import CLIENT_SECRET

    op = TestOpenIDProvider(algorithm="ES256", clock=mock_clock)
    op.login_as("dora-sub", email="dora@example.com", email_verified=True)
    dpop = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_es256())
    fed = federated_app(
        op, mock_clock, authflow_hasher, dpop=True, dpop_key_store=dpop, id_token_signed_response_alg="ES256"
    )
    op.register_client(CLIENT_ID, CLIENT_SECRET, [REDIRECT_URI], dpop_bound=True)  # held to DPoP
    register_api(fed.app)
    api = ApiClient(fed.app, "app")
    nonce = api.post(f"/providers/{PROVIDER}/native/begin").json["nonce"]
    verifier = secrets.token_urlsafe(48)
    done = api.post(
        f"/providers/{PROVIDER}/native", {"code": _sdk_code(fed, nonce, verifier), "code_verifier": verifier}
    )
    assert done.json.get("status") == "authenticated", done.json
    proofs = [p for p in op.dpop_proofs if p["htu"] == f"{op.issuer}/token"]
    assert [p["error"] for p in proofs] == [None]  # one proof, accepted ...
    signer = DpopSigner(dpop, mock_clock, DpopNonces())
    assert proofs[0]["jkt"] == signer.thumbprint(signer.current_kid())  # ... of the configured key
