"""``login_succeeded`` and ``user_created`` are sent once the flow's one commit is done.

A flow that owns a larger commit (the federated callback's ``one_commit``) holds the
signals its login steps send (:func:`flask_authflow.signals.held_until_commit`): a
receiver never hears of a sign-in that is then rolled back, and one that reads the store
sees the committed rows. Without such a block they are sent after the step's own commit.
"""

from __future__ import annotations

from typing import Any

from flask_authflow import signals
from flask_authflow._clock import MockClock
from flask_authflow._core.session import AuthSession, new_guest_record
from flask_authflow._outcomes import Authenticated
from flask_authflow.audit._context import AuditContext
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user

CTX = AuditContext(client_ip="203.0.113.9", ip_source="peer", user_agent="ua", request_id="r")


def _sign_in(service: AuthnService, user_id: str, clock: MockClock) -> Any:
    session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
    return service.with_audit_context(CTX).establish(session, "acme", user_id, method="oidc:test")


def _service() -> tuple[AuthnService, str, MockClock]:
    clock = MockClock()
    backend = InMemoryBackend(clock=clock)
    user = add_user(backend, "acme", "alice", "correct horse battery staple")
    return AuthnService(backend, backend, clock=clock, account_tokens=backend), user.user_id, clock


def test_a_held_sign_in_is_announced_only_when_its_commit_is_released() -> None:
    service, user_id, clock = _service()
    heard: list[str] = []

    def receiver(sender: object, **kwargs: Any) -> None:
        heard.append(kwargs["user_id"])

    with signals.login_succeeded.connected_to(receiver):
        with signals.held_until_commit() as release:
            assert isinstance(_sign_in(service, user_id, clock), Authenticated)
            assert heard == []  # the enclosing commit is not done yet
        assert heard == []
        release()  # the commit is done
        assert heard == [user_id]


def test_a_held_sign_in_whose_commit_fails_is_never_announced() -> None:
    service, user_id, clock = _service()
    heard: list[str] = []

    def receiver(sender: object, **kwargs: Any) -> None:
        heard.append(kwargs["user_id"])

    with signals.login_succeeded.connected_to(receiver):
        with signals.held_until_commit():
            assert isinstance(_sign_in(service, user_id, clock), Authenticated)
        # the block ended without its release (the commit failed): nothing is sent
        assert isinstance(_sign_in(service, user_id, clock), Authenticated)  # not held
    assert heard == [user_id]


def test_nested_blocks_hand_their_signals_to_the_enclosing_one() -> None:
    service, user_id, clock = _service()
    heard: list[str] = []

    def receiver(sender: object, **kwargs: Any) -> None:
        heard.append(kwargs["user_id"])

    with signals.login_succeeded.connected_to(receiver):
        with signals.held_until_commit() as outer:
            with signals.held_until_commit() as inner:
                _sign_in(service, user_id, clock)
            inner()  # the inner flow joined the outer commit: still held
            assert heard == []
        outer()
    assert heard == [user_id]
