"""Cost of a password login beside one Argon2id verify, and unknown-user timing.

Prints medians over N runs, with the production Argon2id profile (t=3, m=64 MiB, p=4):

* one ``argon2.PasswordHasher.verify`` (the floor),
* a successful login through ``AuthnService`` (begin_login + verify_factor),
* a successful ``POST /login`` through Flask (session layer, audit, SQLite store),
* the overheads (login - verify),
* unknown user vs wrong password (must be within 10 %),
* 50 parallel wrong guesses at lockout threshold 5: how many Argon2 verifications ran
  (must be at most 5), on the memory and SQLite backends,
* TOTP as the second step: a password + TOTP login beside a password-only login on the
  same store (the TOTP step's overhead; target < 2 ms on SQLite), with pyotp's own
  verify as the floor (``--totp-only`` runs just this part),
* legacy hashes (``--legacy-only`` runs just this part): the first login of a user brought
  over from Flask-Security-Too with a bcrypt hash (cost 12) and with FST's default (Argon2id
  of the HMAC of the password), each verify plus the rehash to Argon2id, beside a native
  Argon2id login; and a wrong password against the FST default beside an unknown user,
* uniform work with a legacy scheme on (``--uniform-only`` runs just this part): a wrong
  password for a user on bcrypt (cost 12), for a native Argon2id user and for an unknown user,
  with bcrypt enabled (each refused check does one Argon2id and one bcrypt verification).

With ``--postgres`` (a URL, or ``auto`` for a throwaway server started with initdb/pg_ctl
as the tests do), the overheads are also measured with every store on PostgreSQL.

    .venv/bin/python benchmarks/login.py [--runs 21] [--postgres auto|URL]
        [--totp-only|--legacy-only|--uniform-only]
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import argon2
import pyotp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask import Flask

from flask_authflow import AuthFlow, AuthSession, FactorCredential
from flask_authflow._clock import MockClock
from flask_authflow._core.ports import FactorConfig
from flask_authflow._core.session import new_guest_record
from flask_authflow._outcomes import FactorKind
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import UserExists
from flask_authflow.login._lockout import LockoutPolicy
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._service import AuthnService
from flask_authflow.mfa._sealing import FactorSealer
from flask_authflow.mfa._totp import TotpFactor
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user

PASSWORD = "correct horse battery staple"


def bench_workdir() -> Path:
    """A scratch folder for the SQLite files of a run, removed when the run ends."""
    workdir = Path(tempfile.mkdtemp(prefix="authflow-bench-"))
    atexit.register(shutil.rmtree, workdir, True)
    return workdir


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


def memory_with_alice(hasher: PasswordHasher) -> InMemoryBackend:
    """A memory backend with alice, her password hashed by ``hasher``."""
    backend = InMemoryBackend()
    add_user(backend, "default", "alice", PASSWORD, hasher=hasher)
    return backend


def service_login(hasher: PasswordHasher, backend: Any) -> Callable[..., object]:
    """A login through AuthnService (begin_login + verify_factor) on ``backend``."""
    service = AuthnService(
        backend, backend, hasher=hasher, lockout=LockoutPolicy(max_failures=10**9), account_tokens=backend
    )
    handle = service.with_audit_context(AuditContext.unknown())

    def login(identifier: str = "alice", password: str = PASSWORD, tenant: str = "default") -> object:
        session = AuthSession(new_guest_record(service.clock.now()), new=True, request_fingerprint="fp")
        handle.begin_login(identifier, tenant, session)
        return handle.verify_factor(FactorCredential.password(password), session)

    return login


def http_login(hasher: PasswordHasher, database_url: str, *, own_backend: bool = False) -> Callable[[], None]:
    """A successful ``POST /login`` through Flask, sessions and users on ``database_url``
    (``own_backend``: a SqlAlchemyBackend built here, which creates its tables itself)."""
    app = Flask("login_bench")
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_DATABASE_URL=database_url,
        AUTHFLOW_LOCKOUT_MAX_FAILURES=10**9,
    )
    backend = SqlAlchemyBackend(database_url) if own_backend else None
    authflow = AuthFlow(app, hasher=hasher, backend=backend)
    with app.app_context(), contextlib.suppress(UserExists):  # a --postgres URL used twice
        add_user(authflow.state.backend, "default", "alice", PASSWORD, hasher=hasher)

    @app.post("/login")
    def login_view() -> str:
        return type(authflow.login.password("alice", PASSWORD)).__name__

    client = app.test_client()

    def post() -> None:
        response = client.post("/login", json={})
        assert response.text == "Authenticated", response.text
        client._cookies.clear()  # each login starts as a fresh guest

    return post


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument(
        "--postgres",
        default="off",
        help="PostgreSQL URL (two databases are made in it), 'auto' for a throwaway server, 'off'",
    )
    args = parser.parse_args()
    workdir = bench_workdir()

    # 1. Production Argon2id: the login beside the verify, and the unknown-user timing.
    raw = argon2.PasswordHasher.from_parameters(argon2.profiles.RFC_9106_LOW_MEMORY)
    stored = raw.hash(PASSWORD)
    hasher = PasswordHasher()
    login = service_login(hasher, memory_with_alice(hasher))
    post = http_login(hasher, f"sqlite:///{workdir / 'login.db'}")
    medians = interleaved_medians(
        {
            "verify": lambda: raw.verify(stored, PASSWORD),
            "service": login,
            "http": post,
            "wrong": lambda: login("alice", "wrong password"),
            "unknown": lambda: login("nobody", PASSWORD),
            "tenant": lambda: login("alice", PASSWORD, "elsewhere"),
        },
        args.runs,
    )
    verify_ms, wrong_ms = medians["verify"], medians["wrong"]
    print("Production Argon2id (medians of interleaved runs; Argon2 itself varies by a few ms):")
    rows = [
        ("Argon2id verify (t=3, m=64 MiB, p=4)", verify_ms, ""),
        ("login via AuthnService (memory)", medians["service"], ""),
        ("POST /login via Flask (SQLite stores)", medians["http"], ""),
        ("wrong password", wrong_ms, ""),
        ("unknown user", medians["unknown"], f"ratio {medians['unknown'] / wrong_ms:.3f}x wrong password"),
        ("wrong tenant", medians["tenant"], f"ratio {medians['tenant'] / wrong_ms:.3f}x wrong password"),
    ]
    for label, value, note in rows:
        print(f"  {label:<42} {value:8.2f} ms   {note}")

    # 2. The overhead itself, without Argon2's noise: the same paths with a minimal-cost
    #    Argon2id, minus that hasher's own verify.
    fast = PasswordHasher.fast_for_tests()
    fast_hash = fast.hash(PASSWORD)
    sql_backend = SqlAlchemyBackend(f"sqlite:///{workdir / 'service.db'}")
    add_user(sql_backend, "default", "alice", PASSWORD, hasher=fast)
    variants = {
        "verify": lambda: fast.verify(fast_hash, PASSWORD),
        "memory": service_login(fast, memory_with_alice(fast)),
        "sqlite": service_login(fast, sql_backend),
        "http": http_login(fast, f"sqlite:///{workdir / 'fast.db'}"),
    }
    labels = [
        ("AuthnService, memory backend", "memory"),
        ("AuthnService, SQLite backend (audit + attempt rows)", "sqlite"),
        ("POST /login via Flask, SQLite stores (+ session write)", "http"),
    ]
    server = None
    if args.postgres != "off":
        if args.postgres == "auto":
            from tests.parts import start_postgres

            server = start_postgres()
            service_url, http_url = server.new_database(), server.new_database()
        else:
            service_url = http_url = args.postgres
        pg_backend = SqlAlchemyBackend(service_url)
        if pg_backend.find_user("default", "alice") is None:
            add_user(pg_backend, "default", "alice", PASSWORD, hasher=fast)
        variants["postgresql"] = service_login(fast, pg_backend)
        variants["http_pg"] = http_login(fast, http_url, own_backend=True)
        labels += [
            ("AuthnService, PostgreSQL backend (audit + attempt rows)", "postgresql"),
            ("POST /login via Flask, PostgreSQL stores (+ session write)", "http_pg"),
        ]
    try:
        fast_medians = interleaved_medians(variants, args.runs * 10)
    finally:
        if server is not None:
            server.stop()
    base = fast_medians["verify"]
    print("Overhead beyond one Argon2id verify (measured with a minimal-cost hasher):")
    for label, name in labels:
        print(f"  {label:<60} {fast_medians[name] - base:6.2f} ms")


class _CountingHasher(PasswordHasher):
    """The production profile, counting every Argon2 verification."""

    def __init__(self) -> None:
        super().__init__(max_concurrent=64)
        self.count = 0
        self._lock = threading.Lock()

    def _verify(self, hash: str, data: bytes) -> bool:
        with self._lock:
            self.count += 1
        return super()._verify(hash, data)


def parallel_guesses(backend_factory: Callable[[PasswordHasher], Any], attempts: int = 50) -> tuple[int, int]:
    """(Argon2 verifications, attempts answered Locked) for ``attempts`` parallel wrong guesses."""
    hasher = _CountingHasher()
    backend = backend_factory(hasher)
    add_user(backend, "default", "alice", PASSWORD, hasher=hasher)
    hasher.count = 0
    service = AuthnService(
        backend, backend, hasher=hasher, lockout=LockoutPolicy(max_failures=5), account_tokens=backend
    )
    barrier = threading.Barrier(attempts)

    def guess(i: int) -> object:
        barrier.wait()
        session = AuthSession(new_guest_record(service.clock.now()), new=True, request_fingerprint="fp")
        handle = service.with_audit_context(AuditContext.unknown())
        begun = handle.begin_login("alice", "default", session)
        if type(begun).__name__ == "Locked":
            return begun
        with FactorCredential.password(f"wrong-{i}") as credential:
            return handle.verify_factor(credential, session)

    with ThreadPoolExecutor(max_workers=attempts) as pool:
        outcomes = list(pool.map(guess, range(attempts)))
    return hasher.count, sum(type(o).__name__ == "Locked" for o in outcomes)


def main_parallel(workdir: Path) -> None:
    print("Parallel guessing (50 concurrent wrong passwords, lockout threshold 5, production Argon2id):")
    for label, factory in (
        ("memory backend", lambda h: InMemoryBackend()),
        ("SQLite backend", lambda h: SqlAlchemyBackend(f"sqlite:///{workdir / 'parallel.db'}")),
    ):
        verified, locked = parallel_guesses(factory)
        verdict = "PASS" if verified <= 5 else "FAIL"
        print(f"  {label:<20} {verified:3d} Argon2 verifications, {locked:2d} answered Locked  {verdict}")


def totp_logins(
    backend: Any, hasher: PasswordHasher
) -> tuple[Callable[[], object], Callable[[], object], str]:
    """(a password-only login, a password + TOTP login, the TOTP key) on ``backend``.

    Each call starts a fresh session; the mock clock moves one TOTP step first, so every
    login presents a code that was never used (a used one is refused, by design)."""
    clock = MockClock()
    backend.clock = clock
    add_user(backend, "default", "plain", PASSWORD, hasher=hasher)
    user = add_user(backend, "default", "otp", PASSWORD, hasher=hasher)
    sealer = FactorSealer.from_key(secrets.token_bytes(32))
    service = AuthnService(
        backend,
        backend,
        hasher=hasher,
        clock=clock,
        lockout=LockoutPolicy(max_failures=10**9),
        account_tokens=backend,
    )
    totp = TotpFactor(sealer)
    service.register_factor(totp)
    key = pyotp.random_base32(32)
    factor_id = secrets.token_urlsafe(16)
    backend.add_factor(
        "default",
        FactorConfig(
            user_id=user.user_id, kind=FactorKind.TOTP, created_at=clock.now(),
            secret=sealer.seal(factor_id, key.encode()), factor_id=factor_id, confirmed=False,
        ),
    )  # fmt: skip
    backend.confirm_factor("default", user.user_id, factor_id, replace_kind=True)
    handle = service.with_audit_context(AuditContext.unknown())

    def password_only() -> object:
        clock.advance(30)
        session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
        handle.begin_login("plain", "default", session)
        outcome = handle.verify_factor(FactorCredential.password(PASSWORD), session)
        assert type(outcome).__name__ == "Authenticated", outcome
        return outcome

    def with_totp() -> object:
        clock.advance(30)
        session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
        handle.begin_login("otp", "default", session)
        handle.verify_factor(FactorCredential.password(PASSWORD), session)
        code = pyotp.TOTP(key).at(clock.now())
        outcome = handle.verify_factor(FactorCredential.code(FactorKind.TOTP, code), session)
        assert type(outcome).__name__ == "Authenticated", outcome
        return outcome

    return password_only, with_totp, key


def main_totp(workdir: Path, runs: int) -> None:
    """The TOTP step's cost beyond the password step, on SQLite and in memory."""
    fast = PasswordHasher.fast_for_tests()
    variants: dict[str, Callable[[], object]] = {}
    floor_key = pyotp.random_base32(32)
    floor = pyotp.TOTP(floor_key)
    variants["pyotp"] = lambda: floor.verify(floor.now(), valid_window=1)
    for name, backend in (
        ("memory", InMemoryBackend()),
        ("sqlite", SqlAlchemyBackend(f"sqlite:///{workdir / 'totp.db'}")),
    ):
        password_only, with_totp, _ = totp_logins(backend, fast)
        variants[f"{name}:password"] = password_only
        variants[f"{name}:totp"] = with_totp
    medians = interleaved_medians(variants, runs)
    print(f"TOTP as the second step (medians of {runs} interleaved runs, minimal-cost Argon2id):")
    print(f"  {'pyotp.TOTP.verify alone (the floor)':<52} {medians['pyotp']:6.3f} ms")
    for name, label in (("memory", "memory backend"), ("sqlite", "SQLite backend")):
        password_ms, totp_ms = medians[f"{name}:password"], medians[f"{name}:totp"]
        overhead = totp_ms - password_ms
        verdict = "PASS" if overhead < 2.0 else "FAIL"
        print(
            f"  {label:<16} password {password_ms:6.3f} ms, password + TOTP {totp_ms:6.3f} ms: "
            f"TOTP step {overhead:6.3f} ms (target < 2 ms on SQLite) {verdict if name == 'sqlite' else ''}"
        )


def main_legacy(runs: int) -> None:
    """First logins of users with legacy hashes (verify + rehash) beside a native login."""
    from passlib import hash as passlib_hash  # type: ignore[import-untyped]

    from flask_authflow.login._legacy_hashes import LegacyHashes, fst_hmac

    salt = "benchmark-fst-salt"
    hasher = PasswordHasher()
    backend = InMemoryBackend()
    signed = fst_hmac(salt.encode(), PASSWORD.encode())
    old = {
        "bcrypt": str(passlib_hash.bcrypt.using(rounds=12).hash(signed[:72])),
        "fst_default": str(passlib_hash.argon2.hash(signed)),  # FST 5.9's default, as FST makes it
    }
    users = {
        name: add_user(backend, "default", name, PASSWORD, hasher=hasher).user_id for name in (*old, "native")
    }
    legacy = LegacyHashes(
        ["bcrypt", "argon2"], salt=salt, argon2_over_ceiling=hasher.over_ceiling, slot=hasher.slot
    )
    service = AuthnService(
        backend,
        backend,
        hasher=hasher,
        lockout=LockoutPolicy(max_failures=10**9),
        legacy_hashes=legacy,
        account_tokens=backend,
    )
    handle = service.with_audit_context(AuditContext.unknown())

    def login(name: str, password: str = PASSWORD) -> object:
        if name in old:
            backend.set_password_hash("default", users[name], old[name])  # a first login each time
        session = AuthSession(new_guest_record(service.clock.now()), new=True, request_fingerprint="fp")
        handle.begin_login(name, "default", session)
        return handle.verify_factor(FactorCredential.password(password), session)

    for name in (*old, "native"):
        assert type(login(name)).__name__ == "Authenticated", name
    medians = interleaved_medians(
        {
            "native": lambda: login("native"),
            "bcrypt": lambda: login("bcrypt"),
            "fst_default": lambda: login("fst_default"),
            "fst_wrong": lambda: login("fst_default", "wrong password"),
            "unknown": lambda: login("nobody"),
        },
        runs,
    )
    print(f"Legacy hashes (medians of {runs} interleaved runs; production Argon2id for the rehash):")
    rows = [
        ("native Argon2id login", "native", ""),
        ("FST bcrypt (cost 12, HMAC) first login", "bcrypt", "verify + rehash"),
        ("FST default (Argon2id of HMAC) first login", "fst_default", "native try + HMAC verify + rehash"),
        ("FST default, wrong password", "fst_wrong", ""),
        ("unknown user", "unknown", f"ratio {medians['unknown'] / medians['fst_wrong']:.3f}x wrong password"),
    ]
    for label, name, note in rows:
        print(f"  {label:<44} {medians[name]:8.2f} ms   {note}")


def main_uniform(runs: int) -> None:
    """Wrong passwords for a legacy (bcrypt) user, a native user and an unknown user."""
    from passlib import hash as passlib_hash

    from flask_authflow.login._legacy_hashes import LegacyHashes

    hasher = PasswordHasher()
    backend = InMemoryBackend()
    legacy_id = add_user(backend, "default", "legacy", PASSWORD, hasher=hasher).user_id
    add_user(backend, "default", "native", PASSWORD, hasher=hasher)
    backend.set_password_hash("default", legacy_id, str(passlib_hash.bcrypt.using(rounds=12).hash(PASSWORD)))
    legacy = LegacyHashes(["bcrypt"], argon2_over_ceiling=hasher.over_ceiling, slot=hasher.slot)
    service = AuthnService(
        backend,
        backend,
        hasher=hasher,
        lockout=LockoutPolicy(max_failures=10**9),
        legacy_hashes=legacy,
        account_tokens=backend,
    )
    handle = service.with_audit_context(AuditContext.unknown())

    def wrong(name: str) -> object:
        session = AuthSession(new_guest_record(service.clock.now()), new=True, request_fingerprint="fp")
        handle.begin_login(name, "default", session)
        return handle.verify_factor(FactorCredential.password("a wrong password"), session)

    for name in ("legacy", "native", "nobody"):
        assert type(wrong(name)).__name__ == "InvalidCredential", name
    medians = interleaved_medians(
        {name: (lambda name=name: wrong(name)) for name in ("legacy", "native", "nobody")}, runs
    )
    print(f"Uniform work, bcrypt enabled (medians of {runs} interleaved runs; production Argon2id):")
    unknown = medians["nobody"]
    for label, name in (
        ("wrong password, user on bcrypt (cost 12)", "legacy"),
        ("wrong password, native Argon2id user", "native"),
        ("unknown user", "nobody"),
    ):
        print(f"  {label:<44} {medians[name]:8.2f} ms   ratio {medians[name] / unknown:.3f}x unknown")


if __name__ == "__main__":
    if "--uniform-only" in sys.argv:
        sys.argv.remove("--uniform-only")
        main_uniform(21)
        raise SystemExit(0)
    if "--legacy-only" in sys.argv:
        sys.argv.remove("--legacy-only")
        main_legacy(21)
        raise SystemExit(0)
    if "--totp-only" in sys.argv:
        sys.argv.remove("--totp-only")
        main_totp(bench_workdir(), 301)
        raise SystemExit(0)
    main()
    main_totp(bench_workdir(), 301)
    main_parallel(bench_workdir())
    main_legacy(21)
    main_uniform(21)
