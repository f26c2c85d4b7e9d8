"""Cost of a password login beside one Argon2id verify, and unknown-user timing.

Prints medians over N runs, with the production Argon2id profile (t=3, m=64 MiB, p=4):

* one ``argon2.PasswordHasher.verify`` (the floor),
* a successful login through ``AuthnService`` (begin_login + verify_factor),
* a successful ``POST /login`` through Flask (session layer, audit, SQLite store),
* the overheads (login − verify),
* unknown user vs wrong password (must be within 10 %).

    .venv/bin/python benchmarks/login.py [--runs 21]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import argon2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask import Flask  # noqa: E402

from flask_authflow import (  # noqa: E402
    AuditContext,
    AuthFlow,
    AuthnService,
    AuthSession,
    FactorCredential,
    InMemoryBackend,
    LockoutPolicy,
    PasswordHasher,
)
from flask_authflow.session.model import new_guest_record  # noqa: E402

PASSWORD = "correct horse battery staple"


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm up
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()

    raw = argon2.PasswordHasher.from_parameters(argon2.profiles.RFC_9106_LOW_MEMORY)
    stored = raw.hash(PASSWORD)
    verify_ms = median_ms(lambda: raw.verify(stored, PASSWORD), args.runs)

    hasher = PasswordHasher()
    backend = InMemoryBackend(hasher=hasher).with_user_password("alice", "default", PASSWORD)
    service = AuthnService(backend, backend, hasher=hasher, lockout=LockoutPolicy(max_failures=10**9))
    handle = service.with_audit_context(AuditContext.unknown())

    def login(identifier: str, password: str, tenant: str = "default") -> object:
        session = AuthSession(new_guest_record(service.clock.now()), new=True, request_fingerprint="fp")
        handle.begin_login(identifier, tenant, session)
        return handle.verify_factor(FactorCredential.password(password), session)

    service_ms = median_ms(lambda: login("alice", PASSWORD), args.runs)
    wrong_ms = median_ms(lambda: login("alice", "wrong password"), args.runs)
    unknown_ms = median_ms(lambda: login("nobody", PASSWORD), args.runs)
    tenant_ms = median_ms(lambda: login("alice", PASSWORD, "elsewhere"), args.runs)

    workdir = Path(tempfile.mkdtemp(prefix="authflow-bench-"))
    app = Flask("login_bench")
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_DATABASE_URL=f"sqlite:///{workdir / 'login.db'}",
        AUTHFLOW_LOCKOUT_MAX_FAILURES=10**9,
    )
    authflow = AuthFlow(app)
    with app.app_context():
        authflow.state.backend.create_user("default", "alice", PASSWORD)

    @app.post("/login")
    def http_login() -> str:
        return type(authflow.login_with_password("alice", PASSWORD)).__name__

    client = app.test_client()

    def post() -> None:
        response = client.post("/login", json={})
        assert response.text == "Authenticated", response.text
        client._cookies.clear()  # noqa: SLF001 - each login starts as a fresh guest

    http_ms = median_ms(post, args.runs)

    print(f"Argon2id verify (t=3, m=64 MiB, p=4)      {verify_ms:8.2f} ms")
    print(f"login via AuthnService (memory)            {service_ms:8.2f} ms   overhead {service_ms - verify_ms:+.2f} ms")
    print(f"POST /login via Flask (SQLite stores)      {http_ms:8.2f} ms   overhead {http_ms - verify_ms:+.2f} ms")
    print(f"wrong password                             {wrong_ms:8.2f} ms")
    print(f"unknown user                               {unknown_ms:8.2f} ms   ratio {unknown_ms / wrong_ms:.3f}x wrong password")
    print(f"wrong tenant                               {tenant_ms:8.2f} ms   ratio {tenant_ms / wrong_ms:.3f}x wrong password")


if __name__ == "__main__":
    main()
