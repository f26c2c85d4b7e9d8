"""Cost of a password login beside one Argon2id verify, and unknown-user timing.

Prints medians over N runs, with the production Argon2id profile (t=3, m=64 MiB, p=4):

* one ``argon2.PasswordHasher.verify`` (the floor),
* a successful login through ``AuthnService`` (begin_login + verify_factor),
* a successful ``POST /login`` through Flask (session layer, audit, SQLite store),
* the overheads (login - verify),
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

from flask import Flask

from flask_authflow import (
    AuditContext,
    AuthFlow,
    AuthnService,
    AuthSession,
    FactorCredential,
    InMemoryBackend,
    LockoutPolicy,
    PasswordHasher,
)
from flask_authflow.session.model import new_guest_record

PASSWORD = "correct horse battery staple"


def interleaved_medians(variants: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """Median milliseconds of each variant, measured round-robin so that drift in the
    machine's speed (Argon2 with 64 MiB is memory-bound and noisy) hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():
        fn()  # warm up
    for _ in range(runs):
        for name, fn in variants.items():
            started = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=31)
    args = parser.parse_args()

    raw = argon2.PasswordHasher.from_parameters(argon2.profiles.RFC_9106_LOW_MEMORY)
    stored = raw.hash(PASSWORD)
    hasher = PasswordHasher()
    backend = InMemoryBackend(hasher=hasher).with_user_password("alice", "default", PASSWORD)
    service = AuthnService(backend, backend, hasher=hasher, lockout=LockoutPolicy(max_failures=10**9))
    handle = service.with_audit_context(AuditContext.unknown())

    def login(identifier: str, password: str, tenant: str = "default") -> object:
        session = AuthSession(new_guest_record(service.clock.now()), new=True, request_fingerprint="fp")
        handle.begin_login(identifier, tenant, session)
        return handle.verify_factor(FactorCredential.password(password), session)

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
        client._cookies.clear()

    medians = interleaved_medians(
        {
            "verify": lambda: raw.verify(stored, PASSWORD),
            "service": lambda: login("alice", PASSWORD),
            "http": post,
            "wrong": lambda: login("alice", "wrong password"),
            "unknown": lambda: login("nobody", PASSWORD),
            "tenant": lambda: login("alice", PASSWORD, "elsewhere"),
        },
        args.runs,
    )
    verify_ms, service_ms, http_ms = medians["verify"], medians["service"], medians["http"]
    wrong_ms, unknown_ms, tenant_ms = medians["wrong"], medians["unknown"], medians["tenant"]

    rows = [
        ("Argon2id verify (t=3, m=64 MiB, p=4)", verify_ms, ""),
        ("login via AuthnService (memory)", service_ms, f"overhead {service_ms - verify_ms:+.2f} ms"),
        ("POST /login via Flask (SQLite stores)", http_ms, f"overhead {http_ms - verify_ms:+.2f} ms"),
        ("wrong password", wrong_ms, ""),
        ("unknown user", unknown_ms, f"ratio {unknown_ms / wrong_ms:.3f}x wrong password"),
        ("wrong tenant", tenant_ms, f"ratio {tenant_ms / wrong_ms:.3f}x wrong password"),
    ]
    for label, value, note in rows:
        print(f"{label:<42} {value:8.2f} ms   {note}")


if __name__ == "__main__":
    main()
