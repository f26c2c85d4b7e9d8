"""Mint / verify throughput: flask-authflow beside raw cryptography, PyJWT and joserfc.

Run:  .venv/bin/python benchmarks/tokens.py

For ES256 (P-256) and RS256 (RSA-2048) it prints tokens per second for
``LocalIdp.mint`` and ``JwtVerifier.verify`` and for the peers doing the same
work (same claims: iss, sub, aud, exp, iat, jti; verification checks signature,
exp, aud and iss), then the ratios ours / peer. "raw" is the floor: JSON +
base64url + one cryptography sign/verify call with no library around it. Our
verifier is joserfc behind a strict pre-check, so "joserfc" (its jwt.decode and
a JWTClaimsRegistry built once) shows what the pre-check and our typed result cost.
Each figure is the best of seven 0.4 s windows, interleaved across contestants so
machine noise hits everyone alike; the run takes ~30 s.
"""

from __future__ import annotations

import base64
import json
import secrets
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt as pyjwt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from joserfc import jwt as jose_jwt
from joserfc.jwk import ECKey, RSAKey

from flask_authflow.issuer import LocalIdp, LocalIdpSigningKey, MemoryLocalIdpKeyStore, MintClaims

ISSUER = "https://issuer.bench"
AUDIENCE = "bench-api"
WINDOW = 0.4
ROUNDS = 7


def window(fn: Callable[[], Any]) -> float:
    """Calls per second over one WINDOW-second run."""
    n = 0
    start = time.perf_counter()
    deadline = start + WINDOW
    while True:
        for _ in range(20):
            fn()
        n += 20
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


def rates(contestants: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Best of ROUNDS windows each, interleaved so machine noise hits everyone alike."""
    for fn in contestants.values():
        for _ in range(20):
            fn()
    best = dict.fromkeys(contestants, 0.0)
    for _ in range(ROUNDS):
        for name, fn in contestants.items():
            best[name] = max(best[name], window(fn))
    return best


def b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def b64d(data: bytes) -> bytes:
    return base64.urlsafe_b64decode(data + b"=" * (-len(data) % 4))


def payload() -> dict[str, Any]:
    now = int(time.time())
    return {
        "iss": ISSUER,
        "sub": "workload-1",
        "aud": AUDIENCE,
        "exp": now + 600,
        "iat": now,
        "jti": secrets.token_urlsafe(16),
    }


def bench(alg: str, key: LocalIdpSigningKey, native: Any) -> dict[str, float]:
    idp = LocalIdp.from_key_store(ISSUER, MemoryLocalIdpKeyStore.with_current(key))
    verifier = idp.verifier()
    claims = MintClaims("workload-1", datetime.now(UTC) + timedelta(minutes=10)).with_audience(AUDIENCE)
    header = {"alg": alg, "kid": key.kid, "typ": "JWT"}
    header_b64 = b64(json.dumps(header, separators=(",", ":")).encode())
    public = native.public_key()

    if alg == "ES256":
        ecdsa = ec.ECDSA(hashes.SHA256())

        def raw_sign(data: bytes) -> bytes:
            r, s = decode_dss_signature(native.sign(data, ecdsa))
            return r.to_bytes(32, "big") + s.to_bytes(32, "big")

        def raw_check(data: bytes, sig: bytes) -> None:
            der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
            public.verify(der, data, ecdsa)

        jose_key: Any = ECKey.import_key(key.public_jwk())
        jose_private: Any = ECKey.import_key(key.private_pem())
    else:
        pad, sha = padding.PKCS1v15(), hashes.SHA256()

        def raw_sign(data: bytes) -> bytes:
            signature: bytes = native.sign(data, pad, sha)
            return signature

        def raw_check(data: bytes, sig: bytes) -> None:
            public.verify(sig, data, pad, sha)

        jose_key = RSAKey.import_key(key.public_jwk())
        jose_private = RSAKey.import_key(key.private_pem())

    def raw_mint() -> bytes:
        signing_input = header_b64 + b"." + b64(json.dumps(payload(), separators=(",", ":")).encode())
        return signing_input + b"." + b64(raw_sign(signing_input))

    def raw_verify(token: str) -> dict[str, Any]:
        data = token.encode()
        signing_input, _, sig = data.rpartition(b".")
        head, _, body = signing_input.partition(b".")
        if json.loads(b64d(head))["alg"] != alg:
            raise ValueError("alg")
        raw_check(signing_input, b64d(sig))
        claims_ = json.loads(b64d(body))
        if claims_["exp"] <= time.time() or claims_["aud"] != AUDIENCE or claims_["iss"] != ISSUER:
            raise ValueError("claims")
        return claims_  # type: ignore[no-any-return]

    claims_registry = jose_jwt.JWTClaimsRegistry(
        iss={"essential": True, "value": ISSUER}, aud={"essential": True, "value": AUDIENCE}
    )

    def joserfc_verify(token: str) -> None:
        tok = jose_jwt.decode(token, jose_key, algorithms=[alg])
        claims_registry.validate(tok.claims)

    token = idp.mint(claims)
    # every verifier accepts the token first, so no one is timed on a failure path
    verifier.verify(token, AUDIENCE, issuer=ISSUER)
    raw_verify(token)
    pyjwt.decode(token, public, algorithms=[alg], audience=AUDIENCE, issuer=ISSUER)
    joserfc_verify(token)

    mint = rates(
        {
            "mint ours": lambda: idp.mint(claims),
            "mint raw": raw_mint,
            "mint pyjwt": lambda: pyjwt.encode(payload(), native, algorithm=alg, headers={"kid": key.kid}),
            "mint joserfc": lambda: jose_jwt.encode(dict(header), payload(), jose_private, algorithms=[alg]),
        }
    )
    verify = rates(
        {
            "verify ours": lambda: verifier.verify(token, AUDIENCE, issuer=ISSUER),
            "verify raw": lambda: raw_verify(token),
            "verify pyjwt": lambda: pyjwt.decode(
                token, public, algorithms=[alg], audience=AUDIENCE, issuer=ISSUER
            ),
            "verify joserfc": lambda: joserfc_verify(token),
        }
    )
    return {**mint, **verify}


def main() -> int:
    started = time.perf_counter()
    print(
        f"Python {sys.version.split()[0]}; best of {ROUNDS} x {WINDOW}s windows; tokens/s (higher is better)"
    )
    es = ec.generate_private_key(ec.SECP256R1())
    rs = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cases = [
        ("ES256", LocalIdpSigningKey(es, algorithm="ES256"), es),
        ("RS256", LocalIdpSigningKey(rs, algorithm="RS256"), rs),
    ]
    verdicts: list[str] = []
    for alg, key, native in cases:
        r = bench(alg, key, native)
        label = "P-256" if alg == "ES256" else "RSA-2048"
        print(f"\n{alg} ({label})")
        for op in ("mint", "verify"):
            ours = r[f"{op} ours"]
            print(f"  {op:<6} flask-authflow {ours:>10,.0f}/s")
            for peer in ("raw", "pyjwt", "joserfc"):
                value = r[f"{op} {peer}"]
                name = {"raw": "raw cryptography", "pyjwt": "PyJWT", "joserfc": "joserfc"}[peer]
                print(f"  {op:<6} {name:<16}{value:>10,.0f}/s   ours/{peer} = {ours / value:5.2f}x")
        checks = [
            (f"{alg} mint >= 0.8x raw", r["mint ours"] >= 0.8 * r["mint raw"]),
            (f"{alg} mint > PyJWT encode", r["mint ours"] > r["mint pyjwt"]),
            (f"{alg} verify >= 0.8x raw", r["verify ours"] >= 0.8 * r["verify raw"]),
            (f"{alg} verify >= PyJWT decode", r["verify ours"] >= r["verify pyjwt"]),
        ]
        verdicts += [f"  {'PASS' if ok else 'MISS'}  {name}" for name, ok in checks]
    print("\nTargets")
    print("\n".join(verdicts))
    print(f"\n(total {time.perf_counter() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
