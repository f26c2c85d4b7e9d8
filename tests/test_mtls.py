"""Mutual TLS with the provider (RFC 8705) against the in-process test provider, behind an
emulated TLS front (:class:`MtlsFront`): it sees the ``cert=`` and ``verify=`` that ``requests``
hands a transport, serves the provider's ``mtls_endpoint_aliases`` host (``mtls.op.test``),
answers a handshake without a certificate there with a refusal, authenticates a
``tls_client_auth`` client by its certificate, and binds the access tokens it passes out to the
certificate's thumbprint, as a provider with certificate-bound tokens does.

The FAPI 2.0 RP test plan's happy path with the mTLS sender constraint, the calls that go to the
aliases, and every refusal at configuration (``init_app``): ``tls_client_auth`` without a
certificate, a missing, unreadable, non-PEM, encrypted, mismatched, expired or not-yet-valid
certificate, DPoP together with mTLS, the ``fapi2`` preset's rules with a certificate; at
discovery: an alias that is not https, an endpoint that would carry the certificate over http.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import pytest
import requests
import requests.adapters
from flask import Flask
from requests.structures import CaseInsensitiveDict

from flask_authflow._clock import MockClock
from flask_authflow._web.state import get_state
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._errors import Discovery
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._presets import preset
from flask_authflow.federation._provider import OAuthProvider, OAuthProviderConfig
from flask_authflow.issuer import LocalIdpSigningKey, MemoryLocalIdpKeyStore
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.federation_support import (
    CLIENT_ID,
    CLIENT_SECRET,
    PROVIDER,
    REDIRECT_URI,
    FederatedApp,
    federated_app,
)
from tests.mtls_certs import Certs, make_certs, thumbprint_of

JSON = {"Accept": "application/json"}
SCOPES = ("openid", "email", "offline_access")
OP = "https://op.test"
MTLS = "https://mtls.op.test"
ALIASES = {
    "token_endpoint": f"{MTLS}/token",
    "pushed_authorization_request_endpoint": f"{MTLS}/par",
    "userinfo_endpoint": f"{MTLS}/userinfo",
    "revocation_endpoint": f"{MTLS}/revoke",
}


@dataclass(frozen=True)
class Seen:
    """One request as the TLS front saw it."""

    host: str
    path: str
    cert: Any
    verify: Any
    form: Mapping[str, str]


def _answer(request: requests.PreparedRequest, status: int, body: dict[str, Any]) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response.headers = CaseInsensitiveDict({"Content-Type": "application/json"})
    response._content = json.dumps(body).encode()
    response._content_consumed = True  # type: ignore[attr-defined]
    response.url = request.url or ""
    response.request = request
    return response


@dataclass
class MtlsFront(requests.adapters.BaseAdapter):
    """The provider's TLS terminator, emulated (see the module docstring)."""

    inner: requests.adapters.BaseAdapter
    client_cert: tuple[str, str] | None = None
    seen: list[Seen] = field(default_factory=list)
    bound: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__()

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        parts = urlsplit(request.url or "")
        body = request.body.decode() if isinstance(request.body, bytes) else request.body or ""
        form = dict(parse_qsl(body)) if request.method == "POST" else {}
        self.seen.append(Seen(parts.hostname or "", parts.path, cert, verify, form))
        presented = thumbprint_of(cert[0]) if parts.hostname == "mtls.op.test" and cert else None
        if parts.hostname == "mtls.op.test" and presented is None:
            return _answer(request, 401, {"error": "invalid_client", "error_description": "no certificate"})
        if parts.path == "/revoke":
            return _answer(request, 200, {})
        token = (request.headers.get("Authorization") or " ").split(" ", 1)[1]
        if parts.path == "/userinfo" and token in self.bound and self.bound[token] != presented:
            return _answer(request, 401, {"error": "invalid_token", "error_description": "x5t#S256"})
        forward = request.copy()
        forward.url = urlunsplit(("https", "op.test", parts.path, parts.query, ""))
        if presented is not None and self.client_cert and cert == self.client_cert and _bare(form):
            forward.prepare_body({**form, "client_secret": CLIENT_SECRET}, None)  # tls_client_auth
        answer = self.inner.send(forward, stream=stream, timeout=timeout, verify=verify, cert=cert)
        if parts.path == "/token" and answer.status_code == 200 and presented is not None:
            issued = answer.json()
            for name in ("access_token", "refresh_token"):
                if name in issued:
                    self.bound[issued[name]] = presented
        return answer

    def close(self) -> None:
        self.inner.close()


def _bare(form: Mapping[str, str]) -> bool:
    """Only ``client_id`` authenticates the request: the certificate must do the rest."""
    return "client_id" in form and "client_secret" not in form and "client_assertion" not in form


class MtlsProvider(TestOpenIDProvider):
    """The test provider behind :class:`MtlsFront`, its aliases in discovery."""

    __test__ = False

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.front = MtlsFront(self.requests_adapter())
        self.discovery_overrides["mtls_endpoint_aliases"] = dict(ALIASES)
        self.discovery_overrides["tls_client_certificate_bound_access_tokens"] = True

    def http_adapters(self) -> dict[str, requests.adapters.BaseAdapter]:
        return {OP: self.front, MTLS: self.front}


class Keys:
    """The client's private_key_jwt key store (ES256)."""

    def __init__(self) -> None:
        self.client = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_es256())

    def jwks(self) -> list[dict[str, Any]]:
        key = self.client.load_all().current
        return [{**key.public_jwk(), "kid": key.kid}]


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path)


@pytest.fixture
def op(mock_clock: MockClock) -> MtlsProvider:
    provider = MtlsProvider(algorithm="ES256", clock=mock_clock)
    provider.login_as("alice-sub", email="alice@example.com", email_verified=True)
    return provider


def fapi_mtls_settings(op: TestOpenIDProvider, keys: Keys, certs: Certs, **extra: Any) -> dict[str, Any]:
    return {
        "preset": "fapi2",
        "discovery_url": op.discovery_url,
        "client_id": CLIENT_ID,
        "client_secret": "",
        "redirect_uri": REDIRECT_URI,
        "client_key_store": keys.client,
        "client_certificate": certs.pair,
        "mtls_ca_bundle": str(certs.ca),
        "id_token_signed_response_alg": "ES256",
        "store_tokens": True,
        "scopes": SCOPES,
        **extra,
    }


def mtls_app(
    op: MtlsProvider, clock: MockClock, hasher: Any, settings: dict[str, Any], keys: Keys | None = None
) -> FederatedApp:
    """The app with ``settings``; the provider holds the client to PAR and, with ``keys``, to
    FAPI 2.0's private_key_jwt (else to what the TLS front authenticates)."""
    fed = federated_app(op, clock, hasher, **settings)
    op.register_client(
        CLIENT_ID,
        CLIENT_SECRET,
        [REDIRECT_URI],
        token_endpoint_auth_method="private_key_jwt" if keys is not None else None,
        jwks=keys.jwks() if keys is not None else (),
        require_par=True,
        fapi2=keys is not None,
    )
    add_resource_view(fed.app, fed)
    return fed


def add_resource_view(app: Flask, fed: FederatedApp) -> None:
    """``/resource/<host>``: the app calls userinfo with the stored token, its certificate and CA."""

    @app.get("/resource/<host>")
    def resource(host: str) -> tuple[str, int]:
        token = fed.authflow.federation.token(PROVIDER)
        session = fed.browser()
        answer = session.get(
            f"https://{host}/userinfo", auth=token.auth, cert=token.cert, verify=token.verify, timeout=5
        )
        return f"{token.token_type} {answer.json().get('sub', answer.status_code)}", answer.status_code


def _sign_in(fed: FederatedApp, client: Any) -> Any:
    start = client.get(f"/auth/login/{PROVIDER}", headers=JSON)
    assert start.status_code == 302, start.text
    answer = fed.browser().get(start.location, allow_redirects=False, timeout=5)
    callback = urlsplit(answer.headers["Location"])
    return client.get(f"{callback.path}?{callback.query}", headers=JSON)


def _calls(op: MtlsProvider, path: str) -> list[Seen]:
    return [seen for seen in op.front.seen if seen.path == path]


def test_fapi2_security_profile_final_client_test_happy_path_with_mtls(
    op: MtlsProvider, mock_clock: MockClock, authflow_hasher: Any, certs: Certs
) -> None:
    """...-happy-path, sender constraint mTLS: PAR, token and userinfo at the aliases with the
    certificate; the stored token is bound to it (refused without it) and a refresh keeps it."""
    keys = Keys()
    fed = mtls_app(op, mock_clock, authflow_hasher, fapi_mtls_settings(op, keys, certs), keys)
    client = fed.client()
    assert _sign_in(fed, client).status_code == 302
    for path in ("/par", "/token", "/userinfo"):
        (call,) = _calls(op, path)
        assert (call.host, call.cert, call.verify) == ("mtls.op.test", certs.pair, str(certs.ca))
    assert {a["aud"] for a in op.client_assertions} == {op.issuer}  # private_key_jwt as FAPI 2.0 asks
    assert op.dpop_proofs == []  # one sender constraint: mTLS

    used = client.get("/resource/mtls.op.test")
    assert (used.status_code, used.text) == (200, "Bearer alice-sub")
    assert op.front.seen[-1].cert == certs.pair
    assert client.get("/resource/op.test").status_code == 401  # the bound token without the certificate

    fed.clock.advance(timedelta(seconds=290))  # the 300 s token is refreshed first
    assert client.get("/resource/mtls.op.test").text == "Bearer alice-sub"
    refresh = _calls(op, "/token")[-1]
    assert refresh.form["grant_type"] == "refresh_token"
    assert (refresh.host, refresh.cert) == ("mtls.op.test", certs.pair)  # the binding is kept


def test_tls_client_auth_sends_no_secret_and_revokes_at_the_alias(
    op: MtlsProvider, mock_clock: MockClock, authflow_hasher: Any, certs: Certs
) -> None:
    """``tls_client_auth``: only ``client_id`` in the form, the certificate authenticates; the
    stored tokens are revoked at the revocation alias with the certificate."""
    op.discovery_overrides["token_endpoint_auth_methods_supported"] = ["tls_client_auth"]
    op.front.client_cert = certs.pair
    settings = fapi_mtls_settings(op, Keys(), certs, token_endpoint_auth_method="tls_client_auth")
    del settings["client_key_store"]
    fed = mtls_app(op, mock_clock, authflow_hasher, settings)
    client = fed.client()
    assert _sign_in(fed, client).status_code == 302
    for call in _calls(op, "/par") + _calls(op, "/token"):
        assert call.cert == certs.pair and _bare(call.form)
    assert op.client_assertions == []
    user = fed.backend.find_user("default", f"{PROVIDER}:alice-sub")
    assert user is not None
    with fed.app.app_context():
        tokens = get_state().federation.tokens
        assert tokens.forget("default", user.user_id, PROVIDER, reason="unlink")
    revoked = _calls(op, "/revoke")
    assert [c.form["token_type_hint"] for c in revoked] == ["refresh_token", "access_token"]
    assert all(c.host == "mtls.op.test" and c.cert == certs.pair and _bare(c.form) for c in revoked)


def test_a_token_bound_to_a_renewed_certificate_is_refused(
    op: MtlsProvider, mock_clock: MockClock, authflow_hasher: Any, certs: Certs, tmp_path: Path
) -> None:
    """The stored token is bound to the certificate of its login: with another one configured
    it is not handed out (a typed 401), never sent with a certificate it is not bound to."""
    keys = Keys()
    fed = mtls_app(op, mock_clock, authflow_hasher, fapi_mtls_settings(op, keys, certs), keys)
    client = fed.client()
    assert _sign_in(fed, client).status_code == 302
    renewed = {**fapi_mtls_settings(op, keys, make_certs(tmp_path, name="renewed")), "preset": None}
    fed.authflow.register_provider(PROVIDER, OAuthProviderConfig(**preset("fapi2", **_values(renewed))))
    answer = client.get("/resource/mtls.op.test", headers=JSON)
    assert answer.status_code == 401 and answer.json["error"] == "client_certificate_changed"


def _values(settings: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in settings.items() if name != "preset"}


def test_without_aliases_the_https_endpoints_carry_the_certificate(op: MtlsProvider, certs: Certs) -> None:
    op.discovery_overrides["mtls_endpoint_aliases"] = None
    rp = _discover(op, _config(op, certs))
    assert rp.endpoint("token_endpoint") == f"{OP}/token"
    assert rp.endpoint("userinfo_endpoint") == f"{OP}/userinfo"
    assert rp.tls is not None and rp.tls.thumbprint == certs.thumbprint


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"mtls_endpoint_aliases": {"token_endpoint": "http://127.0.0.1:1/token"}}, "must be an https URL"),
        ({"mtls_endpoint_aliases": ["https://mtls.op.test/token"]}, "not an object"),
        (
            {"mtls_endpoint_aliases": None, "token_endpoint": "http://127.0.0.1:1/token"},
            "token_endpoint is not https",
        ),
    ],
)
def test_discovery_refuses_a_certificate_over_plain_http(
    op: MtlsProvider, certs: Certs, override: dict[str, Any], match: str
) -> None:
    op.discovery_overrides.update(override)
    with pytest.raises(Discovery, match=match):
        _discover(op, _config(op, certs))
    if "token_endpoint" not in override:  # a client without a certificate never calls the aliases
        op.discovery_overrides["token_endpoint_auth_methods_supported"] = None  # the provider's own
        plain = _discover(op, OAuthProviderConfig(op.discovery_url, CLIENT_ID, CLIENT_SECRET, REDIRECT_URI))
        assert plain.endpoint("token_endpoint") == f"{OP}/token"


def _config(op: TestOpenIDProvider, certs: Certs, **overrides: Any) -> OAuthProviderConfig:
    settings: dict[str, Any] = {
        "discovery_url": op.discovery_url,
        "client_id": CLIENT_ID,
        "client_secret": "",
        "redirect_uri": REDIRECT_URI,
        "token_endpoint_auth_method": "tls_client_auth",
        "client_certificate": certs.pair,
        "mtls_ca_bundle": str(certs.ca),
        **overrides,
    }
    return OAuthProviderConfig(**settings)


def _discover(op: TestOpenIDProvider, config: OAuthProviderConfig) -> OAuthProvider:
    op.discovery_overrides.setdefault("token_endpoint_auth_methods_supported", ["tls_client_auth"])
    return OAuthProvider.from_config(PROVIDER, config, http=RequestsHttpClient(adapters=op.http_adapters()))


# --- refused at configuration (init_app) ---------------------------------------------------------


def test_tls_client_auth_without_a_certificate_is_refused_at_init_app(
    op: MtlsProvider, mock_clock: MockClock, authflow_hasher: Any
) -> None:
    with pytest.raises(ConfigurationError, match=r"tls_client_auth needs client_certificate=\(cert_path"):
        federated_app(
            op, mock_clock, authflow_hasher, client_secret="", token_endpoint_auth_method="tls_client_auth"
        )


def _garbage(path: Path) -> str:
    path.write_text("not a certificate\n")
    return str(path)


@pytest.mark.parametrize(
    ("spoil", "match"),
    [
        (lambda c, d: (str(d / "missing.pem"), str(c.key)), "cannot read .*missing.pem"),
        (lambda c, d: (str(d), str(c.key)), "cannot read"),  # a directory: unreadable as a file
        (lambda c, d: (_garbage(d / "bad.pem"), str(c.key)), "is not a PEM certificate"),
        (lambda c, d: (str(c.cert), _garbage(d / "bad-key.pem")), "is not a PEM private key"),
        (lambda c, d: (str(c.cert), str(c.server_key)), "is not the certificate's key"),
        (lambda c, d: (str(c.cert), str(make_certs(d, name="enc", key_password=b"pw").key)), "is encrypted"),
        (
            lambda c, d: (
                make_certs(d, name="old", valid_from=timedelta(days=-10), valid_for=timedelta(days=1)).pair
            ),
            "client_certificate expired on",
        ),
        (lambda c, d: make_certs(d, name="new", valid_from=timedelta(days=2)).pair, "is not valid before"),
        (lambda c, d: str(c.cert), r"must be a pair \(cert_path, key_path\)"),
    ],
    ids=[
        "missing",
        "unreadable",
        "not-pem",
        "key-not-pem",
        "other-key",
        "encrypted-key",
        "expired",
        "not-yet-valid",
        "not-a-pair",
    ],
)
def test_a_bad_client_certificate_is_refused_at_configuration(
    op: MtlsProvider, certs: Certs, tmp_path: Path, spoil: Any, match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match):
        _config(op, certs, client_certificate=spoil(certs, tmp_path))


def test_an_expired_certificate_is_refused_at_init_app(
    op: MtlsProvider, mock_clock: MockClock, authflow_hasher: Any, tmp_path: Path
) -> None:
    old = make_certs(tmp_path, valid_from=timedelta(days=-10), valid_for=timedelta(days=1))
    keys = Keys()
    with pytest.raises(ConfigurationError, match=r"expired on .*: renew it"):
        mtls_app(op, mock_clock, authflow_hasher, fapi_mtls_settings(op, keys, old), keys)


@pytest.mark.parametrize(
    ("changed", "match"),
    [
        ({"mtls_ca_bundle": "/nonexistent/ca.pem"}, "mtls_ca_bundle: cannot read"),
        ({"client_certificate": None}, "mtls_ca_bundle is set without client_certificate"),
        ({"dpop": True, "dpop_key_store": "a store"}, "choose one sender constraint"),
    ],
)
def test_mtls_settings_refused_together(
    op: MtlsProvider, certs: Certs, changed: dict[str, Any], match: str
) -> None:
    if changed.get("dpop_key_store"):
        changed["dpop_key_store"] = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_es256())
    if changed.get("client_certificate", certs) is None:
        changed["token_endpoint_auth_method"] = "none"
    with pytest.raises(ConfigurationError, match=match):
        _config(op, certs, **changed)


def _preset(op: TestOpenIDProvider, certs: Certs, **values: Any) -> dict[str, Any]:
    return preset(
        "fapi2",
        discovery_url=op.discovery_url,
        client_id=CLIENT_ID,
        redirect_uri=REDIRECT_URI,
        client_certificate=certs.pair,
        id_token_signed_response_alg="ES256",
        **values,
    )


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"client_key_store": "keys", "dpop_key_store": "keys"}, "choose one sender constraint"),
        ({"client_key_store": "keys", "dpop": True}, "fapi2 preset sets dpop=False"),
        (
            {"token_endpoint_auth_method": "client_secret_basic", "client_secret": "s"},
            "not 'client_secret_basic'",
        ),
        ({"token_endpoint_auth_method": "tls_client_auth", "client_secret": "s"}, "sets client_secret=''"),
        ({}, "missing client_key_store"),  # private_key_jwt, the default, needs its keys
    ],
)
def test_the_fapi2_preset_with_mtls_refuses_what_the_profile_forbids(
    op: MtlsProvider, certs: Certs, values: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match):
        _preset(op, certs, **values)


def test_the_fapi2_preset_accepts_mtls_in_place_of_dpop(op: MtlsProvider, certs: Certs) -> None:
    settings = _preset(op, certs, token_endpoint_auth_method="self_signed_tls_client_auth")
    assert (settings["dpop"], settings["use_par"], settings["fapi2"]) == (False, True, True)
    config = OAuthProviderConfig(**settings)
    assert config.client_tls is not None and config.client_tls.thumbprint == certs.thumbprint
    op.discovery_overrides["token_endpoint_auth_methods_supported"] = ["self_signed_tls_client_auth"]
    rp = _discover(op, config)
    assert rp.uses_par and rp.dpop is None and rp.token_auth_method == "self_signed_tls_client_auth"
    with pytest.raises(ConfigurationError, match="forbids ID tokens signed with RS256"):
        OAuthProviderConfig(**{**settings, "id_token_signed_response_alg": "RS256"})
    op.discovery_overrides["authorization_response_iss_parameter_supported"] = None
    with pytest.raises(Discovery, match="authorization_response_iss_parameter"):
        _discover(op, config)


def test_a_bound_provider_token_survives_pickling_with_its_certificate() -> None:
    """A worker process hands its token back through a queue: the certificate comes along."""
    import pickle

    from flask_authflow.federation._dpop import BearerAuth
    from flask_authflow.federation._provider_tokens import ProviderToken

    made = ProviderToken("at-1", "Bearer", BearerAuth("at-1"), ("c.pem", "k.pem"), "ca.pem")
    token = pickle.loads(pickle.dumps(made))
    assert (token, token.cert, token.verify) == ("at-1", ("c.pem", "k.pem"), "ca.pem")
    assert ProviderToken("at-2", "Bearer", BearerAuth("at-2")).cert is None  # not bound: requests' defaults
