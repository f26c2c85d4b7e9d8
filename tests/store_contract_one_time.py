"""The store contract of one-time tokens (``use_once``, ``remember_jti``).

Mixed into a test class whose module gives ``backend`` and ``clock`` fixtures
(tests/test_store_contracts.py runs it on every adapter).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask_authflow._clock import MockClock
from tests.store_contract import RACERS, race

ISSUER = "https://idp.example"
OTHER_ISSUER = "https://other.example"


class OneTimeContract:
    """Single-use values by scope, and the logout tokens' replay cache."""

    def test_use_once(self, backend: Any, clock: MockClock) -> None:
        """A one-time token is used once until it expires; scopes and logout jtis are apart."""
        until = clock.now() + timedelta(minutes=5)
        assert backend.use_once("email_otp", "digest-1", expires_at=until)
        assert not backend.use_once("email_otp", "digest-1", expires_at=until)  # a replay
        assert backend.use_once("webauthn", "digest-1", expires_at=until)  # another scope
        assert backend.remember_jti("email_otp", "digest-1", until)  # not a logout token's jti
        clock.advance(timedelta(minutes=6))
        assert backend.use_once("email_otp", "digest-2", expires_at=clock.now() + timedelta(minutes=5))
        assert backend.use_once("email_otp", "digest-1", expires_at=clock.now() + timedelta(minutes=5))

    def test_parallel_uses_of_one_token_have_one_winner(self, backend: Any, clock: MockClock) -> None:
        until = clock.now() + timedelta(minutes=5)
        for token in ("a", "b"):
            won = race(RACERS, lambda _i, t=token: backend.use_once("webauthn", t, expires_at=until))
            assert won.count(True) == 1

    def test_a_logout_jti_is_remembered_until_it_expires(self, backend: Any, clock: MockClock) -> None:
        until = clock.now() + timedelta(minutes=5)
        assert backend.remember_jti(ISSUER, "jti-1", until)
        assert not backend.remember_jti(ISSUER, "jti-1", until)  # a replay
        assert backend.remember_jti(OTHER_ISSUER, "jti-1", until)  # another issuer's jti
        clock.advance(timedelta(minutes=6))
        assert backend.remember_jti(ISSUER, "jti-1", clock.now() + timedelta(minutes=5))  # expired: new

    def test_parallel_replays_of_one_jti_have_one_winner(self, backend: Any, clock: MockClock) -> None:
        until = clock.now() + timedelta(minutes=5)
        won = race(RACERS, lambda _i: backend.remember_jti(ISSUER, "jti-raced", until))
        assert won.count(True) == 1

    def test_a_rolled_back_unit_leaves_the_token_unused(self, backend: Any, clock: MockClock) -> None:
        until = clock.now() + timedelta(minutes=5)
        unit = backend.begin_unit()
        assert backend.use_once("email_otp", "digest", expires_at=until)
        unit.rollback()
        assert backend.use_once("email_otp", "digest", expires_at=until)
