"""Tokens from LocalIdp and LocalIdpFixture verify with PyJWT, joserfc and npm `jose`.

The JWK set is fetched from ``/jwks.json`` served by a real HTTP server on
127.0.0.1, before and after a rotation; tampered tokens and tokens signed by
an unpublished key fail in all three verifiers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt as pyjwt
import pytest
from flask import Flask
from joserfc import jwt as jose_jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from werkzeug.serving import BaseWSGIServer, make_server

from flask_authflow._core.encoding import b64url_decode, b64url_encode
from flask_authflow.issuer import LocalIdp, LocalIdpSigningKey, MemoryLocalIdpKeyStore, MintClaims
from flask_authflow.testing._fixture import LocalIdpFixture
from tests.parts import missing_part, require_marker

pytestmark = [pytest.mark.http, pytest.mark.interop]

INTEROP = Path(__file__).parent / "interop"
AUD = "api://interop"
ALGS = ["ES256", "RS256", "RS384", "RS512"]


@pytest.fixture(scope="module")
def rsa_keys() -> list[LocalIdpSigningKey]:
    return [LocalIdpSigningKey.generate_rsa("RS256", 2048) for _ in range(2)]


@dataclass
class Served:
    url: str
    server: BaseWSGIServer
    idp: LocalIdp  # the served issuer (with_base_url returns a new one)


@pytest.fixture
def serve() -> Iterator[Callable[[LocalIdp], Served]]:
    """Serve an issuer's blueprint on 127.0.0.1 from a real HTTP server in a thread."""
    running: list[tuple[BaseWSGIServer, threading.Thread]] = []

    def start(idp: LocalIdp) -> Served:
        app = Flask(__name__)
        server = make_server("127.0.0.1", 0, app, threaded=True)
        url = f"http://127.0.0.1:{server.port}"
        idp = idp.with_base_url(url)
        app.register_blueprint(idp.blueprint())
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        running.append((server, thread))
        return Served(url, server, idp)

    yield start
    for server, thread in running:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def node_ready() -> bool:
    require_marker("interop", "Node.js")
    return shutil.which("node") is not None and (INTEROP / "node_modules" / "jose" / "package.json").exists()


# -- the three verifiers -----------------------------------------------------------------------------


def check_pyjwt(token: str, jwks_url: str, issuer: str) -> dict[str, Any] | None:
    client = pyjwt.PyJWKClient(jwks_url, cache_jwk_set=False, cache_keys=False)
    try:
        key = client.get_signing_key_from_jwt(token)
        return dict(pyjwt.decode(token, key.key, algorithms=ALGS, audience=AUD, issuer=issuer))
    except pyjwt.PyJWTError:
        return None


def check_joserfc(token: str, jwks_url: str, issuer: str) -> dict[str, Any] | None:
    with urllib.request.urlopen(jwks_url, timeout=10) as resp:
        keyset = KeySet.import_key_set(json.loads(resp.read()))
    registry = jose_jwt.JWTClaimsRegistry(
        iss={"essential": True, "value": issuer}, aud={"essential": True, "value": AUD}
    )
    try:
        decoded = jose_jwt.decode(token, keyset, algorithms=ALGS)
        registry.validate(decoded.claims)
        return dict(decoded.claims)
    except (JoseError, ValueError):
        return None


def check_node(cases: list[tuple[str, str, str]]) -> list[dict[str, Any] | None]:
    if not node_ready():
        missing_part("Node.js or tests/interop/node_modules/jose missing: run `npm ci` in tests/interop")
    payload = {
        "cases": [
            {"token": t, "jwks_url": url, "audience": AUD, "issuer": iss, "algorithms": ALGS}
            for t, url, iss in cases
        ]
    }
    proc = subprocess.run(
        ["node", "verify.mjs"],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=INTEROP,
        timeout=60,
        check=True,
    )
    return [r["payload"] if r["ok"] else None for r in json.loads(proc.stdout)]


def check_all(tokens: list[str], jwks_url: str, issuer: str) -> list[tuple[Any, Any, Any]]:
    """For each token, the payload (or None) as seen by PyJWT, joserfc and node jose."""
    node = check_node([(t, jwks_url, issuer) for t in tokens])
    return [
        (check_pyjwt(t, jwks_url, issuer), check_joserfc(t, jwks_url, issuer), n)
        for t, n in zip(tokens, node, strict=True)
    ]


def tamper(token: str) -> str:
    head, body, sig = token.split(".")
    claims = json.loads(b64url_decode(body))
    claims["sub"] = "admin"
    return f"{head}.{b64url_encode(json.dumps(claims).encode())}.{sig}"


def claims() -> MintClaims:
    return MintClaims("workload", datetime.now(UTC) + timedelta(minutes=5)).with_audience(AUD)


def assert_accepted(results: list[tuple[Any, Any, Any]], subject: str = "workload") -> None:
    for pyjwt_claims, joserfc_claims, node_claims in results:
        assert pyjwt_claims is not None and pyjwt_claims["sub"] == subject
        assert joserfc_claims is not None and joserfc_claims["sub"] == subject
        assert node_claims is not None and node_claims["sub"] == subject


def assert_rejected(results: list[tuple[Any, Any, Any]]) -> None:
    for triple in results:
        assert triple == (None, None, None)


# -- tests ------------------------------------------------------------------------------------------------


def test_local_idp_tokens_interop_across_rotation(
    serve: Callable[[LocalIdp], Served], rsa_keys: list[LocalIdpSigningKey]
) -> None:
    first = LocalIdpSigningKey.generate_es256()
    idp = LocalIdp.from_key_store("https://issuer.interop", MemoryLocalIdpKeyStore.with_current(first))
    served = serve(idp)
    idp = served.idp
    jwks_url = f"{served.url}/jwks.json"
    discovery = json.loads(urllib.request.urlopen(f"{served.url}/.well-known/openid-configuration").read())
    assert discovery["jwks_uri"] == jwks_url

    before = idp.mint(claims())
    unpublished = LocalIdpSigningKey.generate_es256()
    impostor = unpublished.with_key_id(first.kid)  # claims a published kid, wrong key
    foreign = LocalIdp.from_key_store(idp.issuer, MemoryLocalIdpKeyStore.with_current(unpublished))
    foreign_impostor = LocalIdp.from_key_store(idp.issuer, MemoryLocalIdpKeyStore.with_current(impostor))

    results = check_all(
        [before, tamper(before), foreign.mint(claims()), foreign_impostor.mint(claims())],
        jwks_url,
        idp.issuer,
    )
    assert_accepted(results[:1])
    assert_rejected(results[1:])

    idp.rotate_signing_key(rsa_keys[0])
    after = idp.mint(claims())
    assert json.loads(b64url_decode(after.split(".")[0]))["alg"] == "RS256"
    results = check_all([before, after, tamper(after), foreign.mint(claims())], jwks_url, idp.issuer)
    assert_accepted(results[:2])
    assert_rejected(results[2:])


def test_fixture_tokens_interop_across_rotation(
    serve: Callable[[LocalIdp], Served], rsa_keys: list[LocalIdpSigningKey]
) -> None:
    fixture = LocalIdpFixture.with_signing_key("https://fixture.interop", rsa_keys[1])
    served = serve(fixture.idp)
    jwks_url = f"{served.url}/jwks.json"
    before = fixture.mint(claims())
    svid = fixture.mint_jwt_svid("example.org", "billing", "acme", AUD, timedelta(minutes=5))
    stranger = LocalIdpFixture.with_algorithm(fixture.issuer, "ES256")
    results = check_all([before, svid, tamper(svid), stranger.mint(claims())], jwks_url, fixture.issuer)
    assert_accepted(results[:1])
    assert_accepted(results[1:2], subject="spiffe://example.org/billing/acme")
    assert_rejected(results[2:])

    fixture.rotate_signing_key(LocalIdpSigningKey.generate_es256())
    after = fixture.mint(claims())
    results = check_all([before, after, tamper(after)], jwks_url, fixture.issuer)
    assert_accepted(results[:2])
    assert_rejected(results[2:])


@pytest.mark.parametrize("alg", ["RS384", "RS512"])
def test_fixture_rsa_variants_interop(serve: Callable[[LocalIdp], Served], alg: str) -> None:
    fixture = LocalIdpFixture.with_algorithm("https://fixture.interop", alg)
    served = serve(fixture.idp)
    results = check_all([fixture.mint(claims())], f"{served.url}/jwks.json", fixture.issuer)
    assert_accepted(results)


def test_node_single_mode(serve: Callable[[LocalIdp], Served]) -> None:
    if not node_ready():
        missing_part("Node.js or tests/interop/node_modules/jose missing: run `npm ci` in tests/interop")
    idp = LocalIdp.from_key_store(
        "https://issuer.interop", MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_es256())
    )
    token = idp.mint(claims())
    proc = subprocess.run(
        ["node", "verify.mjs", token, AUD],
        input=json.dumps(idp.jwks()),
        capture_output=True,
        text=True,
        cwd=INTEROP,
        timeout=60,
        check=True,
    )
    result = json.loads(proc.stdout)
    assert result["ok"] is True and result["payload"]["iss"] == "https://issuer.interop"
    proc = subprocess.run(
        ["node", "verify.mjs", tamper(token), AUD],
        input=json.dumps(idp.jwks()),
        capture_output=True,
        text=True,
        cwd=INTEROP,
        timeout=60,
        check=True,
    )
    assert json.loads(proc.stdout)["ok"] is False
