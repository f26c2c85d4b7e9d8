"""A stored Argon2 hash above the ceilings is refused without being computed."""

from __future__ import annotations

import re
from typing import Any

import pytest

from flask_authflow import AuthFlow
from flask_authflow._clock import MockClock
from flask_authflow._outcomes import FactorCredential, InvalidCredential
from flask_authflow._web.state import get_state
from flask_authflow.errors import ConfigurationError
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._service import AuthnService
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user
from tests.appfactory import base_app
from tests.authn_support import CTX, new_session

PASSWORD = "correct horse battery staple"


class Counting(PasswordHasher):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1, **kwargs)
        self.computed = 0

    def _verify(self, hash: str, data: bytes) -> bool:
        self.computed += 1
        return super()._verify(hash, data)


def planted(hasher: PasswordHasher, **params: int) -> str:
    """A real Argon2id hash of PASSWORD whose parameter fields say something else."""
    real = hasher.hash(PASSWORD)
    names = {"memory_cost": "m", "time_cost": "t", "parallelism": "p"}
    for name, value in params.items():
        real = re.sub(rf"([$,]){names[name]}=\d+", rf"\g<1>{names[name]}={value}", real, count=1)
    return real


@pytest.mark.parametrize(
    "params",
    [
        {"memory_cost": 4 * 1024 * 1024},
        {"time_cost": 11},
        {"parallelism": 17},
        {"memory_cost": 256 * 1024 + 1},
    ],
)
def test_hash_over_ceiling_is_refused_without_computing(params: dict[str, int]) -> None:
    hasher = Counting()
    stored = planted(hasher, **params)
    assert hasher.over_ceiling(stored)
    assert hasher.verify(stored, PASSWORD) is False
    assert hasher.computed == 0


def test_hash_at_the_ceiling_is_computed() -> None:
    hasher = Counting(max_time_cost=1, max_memory_cost=8, max_parallelism=1)
    stored = hasher.hash(PASSWORD)
    assert not hasher.over_ceiling(stored)
    assert hasher.verify(stored, PASSWORD) is True and hasher.computed == 1


def test_ceilings_are_configurable_and_checked_against_the_cost() -> None:
    hasher = Counting(max_time_cost=5)
    assert hasher.over_ceiling(planted(hasher, time_cost=6))
    assert not hasher.over_ceiling(planted(hasher, time_cost=5))
    with pytest.raises(ConfigurationError, match="ceilings"):
        PasswordHasher(time_cost=4, max_time_cost=3)


def test_login_against_a_planted_hash_is_an_audited_invalid_credential() -> None:
    clock = MockClock()
    hasher = Counting()
    backend = InMemoryBackend(clock=clock)
    user = add_user(backend, "acme", "alice", PASSWORD, hasher=hasher)
    backend.set_password_hash("acme", user.user_id, planted(hasher, memory_cost=8 * 1024 * 1024))
    hasher.computed = 0
    service = AuthnService(backend, backend, hasher=hasher, clock=clock, account_tokens=backend)
    session = new_session(clock)
    handle = service.with_audit_context(CTX)
    handle.begin_login("alice", "acme", session)
    with FactorCredential.password(PASSWORD) as credential:
        outcome = handle.verify_factor(credential, session)
    assert isinstance(outcome, InvalidCredential)
    assert hasher.computed == 0
    row = backend.audit_rows[-1]
    assert (row.event, row.status, row.reason) == ("factor_verify", "failure", "hash_over_ceiling")
    assert [(e.subject, e.success) for e in backend.attempt_log if "\x1f" not in e.subject] == [
        ("alice", False)
    ]


@pytest.mark.authflow_stores("app")  # the hasher built from the config
def test_init_app_passes_the_configured_ceilings() -> None:
    app = base_app(AUTHFLOW_ARGON2_MAX_MEMORY_COST=128 * 1024, AUTHFLOW_ARGON2_MEMORY_COST=64 * 1024)
    AuthFlow(app, backend=InMemoryBackend(), session_store=MemorySessionStore())
    assert get_state(app).hasher.max_memory_cost == 128 * 1024
    bad = base_app(AUTHFLOW_ARGON2_MAX_TIME_COST=2)
    with pytest.raises(ConfigurationError, match="AUTHFLOW_ARGON2_MAX_TIME_COST"):
        AuthFlow(bad, backend=InMemoryBackend(), session_store=MemorySessionStore())
