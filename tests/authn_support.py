"""Helpers shared by the authn / audit / stores tests."""

from __future__ import annotations

from flask_authflow.audit.context import AuditContext
from flask_authflow.clock import MockClock
from flask_authflow.core.session import AuthSession, new_guest_record
from flask_authflow.login.password import PasswordHasher
from flask_authflow.login.service import AuthnService
from flask_authflow.storage.memory import InMemoryBackend

CTX = AuditContext(
    client_ip="203.0.113.7", ip_source="forwarded", user_agent="pytest-agent", request_id="req-1"
)

_FAST = PasswordHasher.fast_for_tests()


def fast_hasher() -> PasswordHasher:
    return _FAST


def new_session(clock: MockClock) -> AuthSession:
    return AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")


def memory_service(clock: MockClock | None = None) -> tuple[AuthnService, InMemoryBackend, MockClock]:
    clock = clock or MockClock()
    backend = InMemoryBackend(hasher=_FAST, clock=clock)
    backend.with_user_password("Alice", "acme", "correct horse").with_user_password(
        "bob", "globex", "hunter2"
    )
    return AuthnService(backend, backend, hasher=_FAST, clock=clock), backend, clock
