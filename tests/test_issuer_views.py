"""The issuer blueprint: discovery and JWKS routes, headers, and spoofing resistance."""

from __future__ import annotations

import pytest
from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

from flask_authflow.errors import ConfigurationError
from flask_authflow.issuer import LocalIdp, LocalIdpSigningKey, MemoryLocalIdpKeyStore
from flask_authflow.issuer._views import jwks, openid_configuration

ISS = "https://issuer.test"
PRIVATE_MEMBERS = {"d", "p", "q", "dp", "dq", "qi"}


@pytest.fixture(scope="module")
def rsa_key() -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_rs256(bits=2048)


@pytest.fixture
def idp(rsa_key: LocalIdpSigningKey) -> LocalIdp:
    store = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_es256())
    store.rotate(rsa_key)
    return LocalIdp.from_key_store(ISS, store)


@pytest.fixture
def app(idp: LocalIdp) -> Flask:
    app = Flask(__name__)
    app.register_blueprint(idp.blueprint())
    return app


def test_discovery_route(app: Flask, idp: LocalIdp) -> None:
    resp = app.test_client().get("/.well-known/openid-configuration")
    assert resp.status_code == 200
    assert resp.mimetype == "application/json"
    assert resp.headers["Cache-Control"] == "public, max-age=300"
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    doc = resp.get_json()
    assert doc["issuer"] == ISS
    assert doc["jwks_uri"] == f"{ISS}/jwks.json"
    assert doc["id_token_signing_alg_values_supported"] == ["RS256", "ES256"]
    assert doc["response_types_supported"] == ["id_token"]
    assert doc["subject_types_supported"] == ["public"]


def test_jwks_route_has_current_and_historical_public_keys_only(app: Flask, idp: LocalIdp) -> None:
    resp = app.test_client().get("/jwks.json")
    assert resp.status_code == 200
    assert resp.mimetype == "application/json"
    assert resp.headers["Cache-Control"] == "public, max-age=300"
    keys = resp.get_json()["keys"]
    assert [k["kty"] for k in keys] == ["RSA", "EC"]
    assert [k["kid"] for k in keys] == list(idp.loaded_keys().kids())
    for k in keys:
        assert not PRIVATE_MEMBERS & set(k), k
        assert k["use"] == "sig"
    assert "PRIVATE" not in resp.get_data(as_text=True)


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.test"},
        {"X-Forwarded-Host": "evil.test"},
        {"X-Forwarded-Host": "evil.test", "X-Forwarded-Proto": "http", "X-Forwarded-Prefix": "/x"},
        {"Forwarded": "host=evil.test;proto=http"},
    ],
)
def test_spoofed_host_does_not_change_jwks_uri(app: Flask, headers: dict[str, str]) -> None:
    app.wsgi_app = ProxyFix(app.wsgi_app, x_for=1, x_proto=1, x_host=1, x_prefix=1)  # type: ignore[method-assign]
    doc = app.test_client().get("/.well-known/openid-configuration", headers=headers).get_json()
    assert doc["jwks_uri"] == f"{ISS}/jwks.json"
    assert "evil" not in str(doc)


def test_base_url_and_prefix(idp: LocalIdp) -> None:
    idp = idp.with_base_url("https://public.example/auth")
    app = Flask(__name__)
    app.register_blueprint(idp.blueprint(url_prefix="/auth"))
    client = app.test_client()
    assert client.get("/auth/jwks.json").status_code == 200
    assert client.get("/jwks.json").status_code == 404
    doc = client.get("/auth/.well-known/openid-configuration").get_json()
    assert doc["jwks_uri"] == "https://public.example/auth/jwks.json"


def test_only_get(app: Flask) -> None:
    client = app.test_client()
    assert client.post("/jwks.json").status_code == 405
    assert client.post("/.well-known/openid-configuration").status_code == 405


def test_blueprint_name(idp: LocalIdp) -> None:
    assert idp.blueprint().name == "authflow_issuer"


def test_rotation_shows_up(app: Flask, idp: LocalIdp) -> None:
    new = LocalIdpSigningKey.generate_es256()
    idp.rotate_signing_key(new)
    kids = [k["kid"] for k in app.test_client().get("/jwks.json").get_json()["keys"]]
    assert kids[0] == new.kid and len(kids) == 3


def test_standalone_views_find_the_issuer_the_blueprint_bound(idp: LocalIdp) -> None:
    app = Flask(__name__)
    app.register_blueprint(idp.blueprint(url_prefix="/issuer"))  # as the extension does
    app.add_url_rule("/oidc/config", view_func=openid_configuration)
    app.add_url_rule("/oidc/keys", view_func=jwks)
    client = app.test_client()
    assert client.get("/oidc/config").get_json()["issuer"] == ISS
    assert len(client.get("/oidc/keys").get_json()["keys"]) == 2


def test_standalone_views_without_issuer_fail_loudly() -> None:
    app = Flask(__name__)
    app.add_url_rule("/jwks.json", view_func=jwks)
    app.testing = True
    with pytest.raises(ConfigurationError):
        app.test_client().get("/jwks.json")


def test_second_idp_on_same_app_refused(idp: LocalIdp) -> None:
    other = LocalIdp.from_key_store(
        ISS, MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_es256())
    )
    app = Flask(__name__)
    app.register_blueprint(idp.blueprint())
    with pytest.raises((ConfigurationError, ValueError)):
        app.register_blueprint(other.blueprint(), name="authflow_issuer_2")


def test_same_blueprint_on_two_apps(idp: LocalIdp) -> None:
    bp = idp.blueprint()
    apps = [Flask("a"), Flask("b")]
    for a in apps:
        a.register_blueprint(bp)
        assert a.test_client().get("/jwks.json").status_code == 200
