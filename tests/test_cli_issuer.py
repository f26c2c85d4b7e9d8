"""``flask authflow rotate-key`` and ``flask authflow mint``.

Rotation prints the new kid and the JWKS size and never key material; minted tokens
verify with flask-authflow's ``JwtVerifier``, PyJWT and npm ``jose`` against the JWKS
the app serves. Every refusal is an ``Error: ...`` line with exit status 1 (or a
usage error, exit 2), never a traceback. One run goes through a real ``flask``
subprocess of the issuer example.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import jwt as pyjwt
import pytest
from click.testing import Result
from flask import Flask

from flask_authflow import get_state
from flask_authflow._clock import SystemClock
from flask_authflow._core.encoding import b64url_decode
from flask_authflow.issuer import FileLocalIdpKeyStore, LocalIdp
from flask_authflow.jose import JwtVerifier
from flask_authflow.jose._jwks import JwksHandle
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from tests.appfactory import AppFactory
from tests.parts import missing_part, require_marker

# Unwired: the issuer's default key store stays in the app's own database (instance folder),
# and the tokens minted here are checked by PyJWT and node's jose against the wall clock,
# which issuer_cli_app passes to the apps.
pytestmark = pytest.mark.authflow_stores("app")

ROOT = Path(__file__).resolve().parent.parent
INTEROP = ROOT / "tests" / "interop"
ISS = "https://cli-issuer.example"
AUD = "api://cli"
PRIVATE_JWK_MEMBERS = ("d", "p", "q", "dp", "dq", "qi")
FAST_ARGON2 = {
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 8,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}


@pytest.fixture
def issuer_cli_app(app_factory: AppFactory) -> AppFactory:
    """``app_factory`` with what these apps change in the base: the wall clock, their own
    in-memory users and sessions; the test's overrides on top."""

    def make(**overrides: Any) -> Flask:
        adapters = {
            "clock": SystemClock(),
            "backend": InMemoryBackend(),
            "session_store": MemorySessionStore(),
        }
        return app_factory(**{**adapters, **overrides})

    return make


@pytest.fixture
def key_dir(tmp_path: Path) -> Path:
    return tmp_path / "keys"


@pytest.fixture
def app(key_dir: Path, issuer_cli_app: AppFactory) -> Flask:
    return issuer_cli_app(AUTHFLOW_ISSUER=ISS, AUTHFLOW_ISSUER_KEY_STORE=f"file:{key_dir}")


def issuer_of(app: Flask) -> LocalIdp:
    issuer = get_state(app).issuer
    assert isinstance(issuer, LocalIdp)
    return issuer


def run(app: Flask, *args: str) -> Result:
    return app.test_cli_runner().invoke(args=["authflow", *args])


def assert_clean_error(result: Result, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: "), result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    for fragment in fragments:
        assert fragment in result.output


def served_jwks(app: Flask) -> dict[str, Any]:
    body = app.test_client().get("/jwks.json").get_json()
    assert isinstance(body, dict)
    return body


def header(token: str) -> dict[str, Any]:
    return dict(json.loads(b64url_decode(token.split(".")[0])))


def payload(token: str) -> dict[str, Any]:
    return dict(json.loads(b64url_decode(token.split(".")[1])))


def mint(app: Flask, *args: str) -> str:
    result = run(app, "mint", *args)
    assert result.exit_code == 0, result.output
    token = result.output.strip()
    assert token.count(".") == 2 and "\n" not in token
    return token


def verify_with_authflow(app: Flask, token: str, audience: str = AUD) -> dict[str, Any]:
    verifier = JwtVerifier(JwksHandle(served_jwks(app))).with_algorithms(["ES256", "RS256"])
    return dict(verifier.verify(token, audience, issuer=ISS).claims)


def verify_with_pyjwt(app: Flask, token: str, audience: str = AUD) -> dict[str, Any]:
    kid = header(token)["kid"]
    (jwk,) = [k for k in served_jwks(app)["keys"] if k["kid"] == kid]
    key = pyjwt.PyJWK(jwk)
    return dict(pyjwt.decode(token, key.key, algorithms=["ES256", "RS256"], audience=audience, issuer=ISS))


def verify_with_node(jwks: dict[str, Any], tokens: list[str]) -> list[dict[str, Any]]:
    require_marker("interop", "Node.js")
    if shutil.which("node") is None or not (INTEROP / "node_modules" / "jose" / "package.json").exists():
        missing_part("Node.js or tests/interop/node_modules/jose missing: run `npm ci` in tests/interop")
    cases = [
        {"token": t, "jwks": jwks, "audience": AUD, "issuer": ISS, "algorithms": ["ES256", "RS256"]}
        for t in tokens
    ]
    proc = subprocess.run(
        ["node", "verify.mjs"],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        cwd=INTEROP,
        timeout=60,
        check=True,
    )
    results: list[dict[str, Any]] = json.loads(proc.stdout)
    return results


# -- rotate-key -----------------------------------------------------------------------------------------


def test_rotate_key_prints_kid_and_jwks_size_never_key_material(app: Flask, key_dir: Path) -> None:
    old = issuer_of(app).current_kid
    result = run(app, "rotate-key", "--force")
    assert result.exit_code == 0, result.output
    new = issuer_of(app).current_kid
    assert new != old
    assert result.output == f"new current key {new} (ES256); the JWKS now has 2 key(s)\n"
    # Persisted through the configured store, old key kept as historical.
    assert (key_dir / "current.kid").read_text() == f"{new}\n"
    assert [k["kid"] for k in served_jwks(app)["keys"]] == [new, old]
    pem = (key_dir / "historical" / f"{new}.pem").read_text()
    for line in pem.splitlines()[1:-1]:
        assert line not in result.output
    assert "BEGIN" not in result.output and "PRIVATE" not in result.output
    for member in PRIVATE_JWK_MEMBERS:
        assert f'"{member}"' not in result.output


def test_rotate_key_rs256_with_kid(app: Flask) -> None:
    result = run(app, "rotate-key", "--force", "--algorithm", "RS256", "--kid", "rsa-2026")
    assert result.exit_code == 0, result.output
    assert result.output == "new current key rsa-2026 (RS256); the JWKS now has 2 key(s)\n"
    assert "BEGIN" not in result.output
    (jwk,) = [k for k in served_jwks(app)["keys"] if k["kid"] == "rsa-2026"]
    assert jwk["kty"] == "RSA" and not set(PRIVATE_JWK_MEMBERS) & set(jwk)
    token = mint(app, "--sub", "svc", "--aud", AUD)
    assert header(token) == {"alg": "RS256", "kid": "rsa-2026", "typ": "JWT"}
    assert verify_with_authflow(app, token)["sub"] == "svc"


def test_rotate_key_defaults_to_the_configured_algorithm(issuer_cli_app: AppFactory) -> None:
    app = issuer_cli_app(AUTHFLOW_ISSUER=ISS, AUTHFLOW_ISSUER_ALGORITHM="RS256")
    assert issuer_of(app).algorithm == "RS256"
    result = run(app, "rotate-key", "--force", "--kid", "next")
    assert result.exit_code == 0, result.output
    assert "(RS256)" in result.output
    assert issuer_of(app).algorithm == "RS256"


def test_rotate_key_duplicate_kid_is_a_clean_error(app: Flask, key_dir: Path) -> None:
    assert run(app, "rotate-key", "--force", "--kid", "k-2026-05").exit_code == 0
    files = sorted(p.name for p in (key_dir / "historical").iterdir())
    again = run(app, "rotate-key", "--force", "--kid", "k-2026-05")
    assert_clean_error(again, "k-2026-05")
    assert issuer_of(app).current_kid == "k-2026-05"
    assert len(served_jwks(app)["keys"]) == 2
    assert sorted(p.name for p in (key_dir / "historical").iterdir()) == files


@pytest.mark.parametrize("kid", ["../current", "a/b", "has.dot", "x" * 65, "", "nul\x00"])
def test_rotate_key_bad_kid_is_a_clean_error(app: Flask, key_dir: Path, kid: str) -> None:
    before = issuer_of(app).current_kid
    result = run(app, "rotate-key", "--force", "--kid", kid)
    assert_clean_error(result)
    assert "key id" in result.output.lower() or "kid" in result.output.lower()
    assert issuer_of(app).current_kid == before
    assert (key_dir / "current.kid").read_text() == f"{before}\n"
    assert sorted(p.name for p in key_dir.iterdir()) == [".lock", "current.kid", "historical"]


def test_rotate_key_unknown_algorithm_is_a_usage_error(app: Flask) -> None:
    result = run(app, "rotate-key", "--force", "--algorithm", "HS256")
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert len(served_jwks(app)["keys"]) == 1


@pytest.mark.parametrize("command", [["rotate-key"], ["mint", "--sub", "s", "--aud", AUD]])
def test_issuer_off_is_a_clean_error_naming_the_key(command: list[str], issuer_cli_app: AppFactory) -> None:
    app = issuer_cli_app()
    result = run(app, *command)
    assert_clean_error(result, "AUTHFLOW_ISSUER")
    assert "eyJ" not in result.output


# -- mint -----------------------------------------------------------------------------------------------


@pytest.mark.interop
def test_minted_token_verifies_with_authflow_pyjwt_and_node_jose(app: Flask) -> None:
    token = mint(app, "--sub", "billing", "--aud", AUD)
    assert header(token) == {"alg": "ES256", "kid": issuer_of(app).current_kid, "typ": "JWT"}
    ours = verify_with_authflow(app, token)
    theirs = verify_with_pyjwt(app, token)
    assert ours == theirs
    assert ours["iss"] == ISS and ours["sub"] == "billing" and ours["aud"] == AUD
    assert ours["exp"] - ours["iat"] == 300  # the default --ttl
    assert len(ours["jti"]) >= 22

    with pytest.raises(pyjwt.InvalidAudienceError):
        verify_with_pyjwt(app, token, audience="api://other")
    node = verify_with_node(served_jwks(app), [token])
    assert node[0]["ok"] is True, node
    assert node[0]["payload"] == ours


@pytest.mark.interop
def test_mint_tokens_before_and_after_rotation_verify_everywhere(app: Flask) -> None:
    before = mint(app, "--sub", "a", "--aud", AUD)
    assert run(app, "rotate-key", "--force", "--kid", "second").exit_code == 0
    after = mint(app, "--sub", "b", "--aud", AUD)
    assert header(after)["kid"] == "second" and header(before)["kid"] != "second"
    assert [verify_with_pyjwt(app, t)["sub"] for t in (before, after)] == ["a", "b"]
    assert [verify_with_authflow(app, t)["sub"] for t in (before, after)] == ["a", "b"]
    results = verify_with_node(served_jwks(app), [before, after])
    assert [r["ok"] for r in results] == [True, True], results


def test_mint_ttl_and_several_audiences(app: Flask) -> None:
    token = mint(app, "--sub", "svc", "--aud", AUD, "--aud", "api://two", "--ttl", "42")
    claims = verify_with_authflow(app, token, audience="api://two")
    assert claims["aud"] == [AUD, "api://two"]
    assert claims["exp"] - claims["iat"] == 42


def test_mint_claims_are_parsed_as_json_when_they_are_json(app: Flask) -> None:
    token = mint(
        app,
        "--sub",
        "svc",
        "--aud",
        AUD,
        "--claim",
        "n=5",
        "--claim",
        "flag=true",
        "--claim",
        'obj={"a": [1, 2.5, null]}',
        "--claim",
        "name=alice",
        "--claim",
        'quoted="007"',
        "--claim",
        "empty=",
        "--claim",
        "eq=a=b",
    )
    claims = verify_with_pyjwt(app, token)
    assert claims["n"] == 5
    assert claims["flag"] is True
    assert claims["obj"] == {"a": [1, 2.5, None]}
    assert claims["name"] == "alice"
    assert claims["quoted"] == "007"
    assert claims["empty"] == ""
    assert claims["eq"] == "a=b"


@pytest.mark.parametrize("claim", ["novalue", "=x"])
def test_mint_malformed_claim_is_a_usage_error(app: Flask, claim: str) -> None:
    result = run(app, "mint", "--sub", "svc", "--aud", AUD, "--claim", claim)
    assert result.exit_code == 2
    assert "--claim" in result.output and "k=v" in result.output
    assert "Traceback" not in result.output and "eyJ" not in result.output


def test_mint_non_json_number_claim_is_a_clean_error(app: Flask) -> None:
    result = run(app, "mint", "--sub", "svc", "--aud", AUD, "--claim", "x=NaN")
    assert_clean_error(result, "'x'", "JSON")
    assert "eyJ" not in result.output


@pytest.mark.parametrize(
    "claim", ["iss=x", "sub=y", "aud=api://evil", "exp=9999999999", "nbf=0", "iat=0", "jti=j"]
)
def test_mint_claim_overriding_a_registered_claim_is_a_clean_error(app: Flask, claim: str) -> None:
    result = run(app, "mint", "--sub", "svc", "--aud", AUD, "--claim", claim)
    name = claim.split("=")[0]
    assert_clean_error(result, f"'{name}'", "registered claim")
    assert "eyJ" not in result.output


def test_mint_ttl_over_max_lifetime_is_a_clean_error(key_dir: Path, issuer_cli_app: AppFactory) -> None:
    app = issuer_cli_app(
        AUTHFLOW_ISSUER=ISS,
        AUTHFLOW_ISSUER_KEY_STORE=f"file:{key_dir}",
        AUTHFLOW_ISSUER_MAX_LIFETIME=timedelta(minutes=10),
    )
    assert payload(mint(app, "--sub", "svc", "--aud", AUD, "--ttl", "600"))["sub"] == "svc"
    result = run(app, "mint", "--sub", "svc", "--aud", AUD, "--ttl", "601")
    assert_clean_error(result, "601s", "maximum of 600s")
    assert "eyJ" not in result.output


def test_mint_ttl_over_the_default_hour_is_a_clean_error(app: Flask) -> None:
    assert_clean_error(run(app, "mint", "--sub", "svc", "--aud", AUD, "--ttl", "3601"), "maximum of 3600s")


@pytest.mark.parametrize("ttl", ["0", "-5", "abc", "1.5"])
def test_mint_ttl_must_be_a_positive_integer(app: Flask, ttl: str) -> None:
    result = run(app, "mint", "--sub", "svc", "--aud", AUD, "--ttl", ttl)
    assert result.exit_code == 2
    assert "--ttl" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("args", [["--aud", AUD], ["--sub", "svc"], ["--sub", "", "--aud", AUD]])
def test_mint_needs_sub_and_aud(app: Flask, args: list[str]) -> None:
    result = run(app, "mint", *args)
    assert result.exit_code in (1, 2)
    assert "Traceback" not in result.output and "eyJ" not in result.output


# -- a real `flask` process -----------------------------------------------------------------------------


@pytest.mark.slow  # a real `flask` process
def test_flask_cli_subprocess_mints_with_the_issuer_example(tmp_path: Path) -> None:
    keys = tmp_path / "example-keys"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "FLASK_AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
        "FLASK_AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'example.db'}",
        "FLASK_AUTHFLOW_ISSUER": ISS,
        "FLASK_AUTHFLOW_ISSUER_KEY_STORE": f"file:{keys}",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flask",
            "--app",
            "examples/issuer/app.py",
            "authflow",
            "mint",
            "--sub",
            "svc-subprocess",
            "--aud",
            AUD,
            "--claim",
            "tier=3",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.strip()
    # The key store named by the environment was initialized, and the token is signed by it.
    loaded = FileLocalIdpKeyStore(keys).load_all()
    assert header(token)["kid"] == loaded.current.kid
    jwks = {"keys": [loaded.current.public_jwk()]}
    verifier = JwtVerifier(JwksHandle(jwks)).with_algorithms(["ES256"])
    claims = verifier.verify(token, AUD, issuer=ISS)
    assert claims.sub == "svc-subprocess" and claims.claims["tier"] == 3
    key = pyjwt.PyJWK(jwks["keys"][0]).key
    assert pyjwt.decode(token, key, algorithms=["ES256"], audience=AUD, issuer=ISS)["tier"] == 3
    assert "BEGIN" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("rotate-key", "--force"),
        ("rotate-key", "--force", "--kid", "k2"),
        ("mint", "--sub", "svc", "--aud", "api://x"),
    ],
)
def test_memory_key_store_is_refused_by_the_cli(args: tuple[str, ...], issuer_cli_app: AppFactory) -> None:
    """A CLI run on the memory store would use a throwaway key."""
    app = issuer_cli_app(AUTHFLOW_ISSUER=ISS, AUTHFLOW_ISSUER_KEY_STORE="memory")
    before = issuer_of(app).current_kid
    result = run(app, *args)
    assert_clean_error(result, "memory", "throwaway key")
    assert issuer_of(app).current_kid == before
