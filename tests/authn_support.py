"""Helpers shared by the authn / audit / stores tests."""

from __future__ import annotations

from flask_authflow._clock import MockClock
from flask_authflow._core.session import AuthSession, new_guest_record
from flask_authflow.audit._context import AuditContext
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user

CTX = AuditContext(
    client_ip="203.0.113.7", ip_source="forwarded", user_agent="pytest-agent", request_id="req-1"
)

_FAST = PasswordHasher.fast_for_tests()
FAST_HASHER = _FAST  # the hasher of the services these tests build (add_user hashes alike)


def fast_hasher() -> PasswordHasher:
    return _FAST


def new_session(clock: MockClock) -> AuthSession:
    return AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")


def memory_service(clock: MockClock | None = None) -> tuple[AuthnService, InMemoryBackend, MockClock]:
    clock = clock or MockClock()
    backend = InMemoryBackend(clock=clock)
    add_user(backend, "acme", "Alice", "correct horse", hasher=_FAST)
    add_user(backend, "globex", "bob", "hunter2", hasher=_FAST)
    return AuthnService(backend, backend, hasher=_FAST, clock=clock, account_tokens=backend), backend, clock
