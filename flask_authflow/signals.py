"""Blinker signals sent by flask-authflow, like Flask's own signals.

Connect with ``token_minted.connect(receiver)``; receivers get the sender and
keyword arguments. Signals never carry secrets (no tokens, passwords or keys).

* ``login_succeeded``, ``login_failed``, ``factor_verified``, ``session_revoked``:
  sent by the login and session parts.
* ``roles_changed``: sent after a role is given to or taken from a user, a role is
  deleted, or a permission is granted to or revoked from a role (see
  :class:`~flask_authflow.authz.Roles`), with ``tenant``, ``user_id`` (``None`` unless one
  user changed), ``role``, ``permission`` (``None`` unless a grant changed) and ``action``
  (the audit event: ``role_added``, ``role_removed``, ``role_deleted``,
  ``permission_granted``, ``permission_revoked``).
* ``workflow_started``, ``workflow_completed``, ``workflow_aborted``: sent by the
  workflow steps, with ``kind``, ``tenant`` and ``user_id``.
* ``identity_linked``, ``identity_unlinked``: sent when a signed-in user links or unlinks
  a provider, with ``tenant``, ``user_id``, ``provider`` and ``issuer``.
* ``user_registered``, ``email_confirmed``, ``password_reset``, ``email_changed``: sent
  by the account flows (sign-up, e-mail verification, password reset, change of e-mail),
  with ``tenant`` and ``user_id``.
* ``user_created``, ``user_deleted``: sent after an account (and, with the application's
  hooks, its row) was created or deleted, with ``user`` (the
  :class:`~flask_authflow._core.ports.UserRecord`); ``user_created`` also with ``source``
  (``cli``, ``admin``, ``signup``, ``federation``, ``test``).
* ``key_rotated``: sent by a :class:`~flask_authflow.issuer.LocalIdp` after a
  rotation, with ``previous_kid`` and ``new_kid``.
* ``token_minted``: sent by a :class:`~flask_authflow.issuer.LocalIdp` after each
  mint, with ``kid``, ``algorithm`` and ``claims`` (the payload, not the token).
* ``security_event_received``: sent after a Shared Signals event (a SET from a configured
  transmitter) was handled and committed, with ``transmitter``, ``event`` (the event type
  URI), ``action`` (what was done: ``sessions=1 disabled ...``, ``marked=2``,
  ``unknown_subject``, ``ignored``), ``tenant`` and ``user_id`` (``None`` for an unknown
  subject), ``jti`` and ``payload`` (the event's members, for the application's own handling).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from blinker import NamedSignal, Namespace

__all__ = [
    "email_changed",
    "email_confirmed",
    "factor_verified",
    "identity_linked",
    "identity_unlinked",
    "key_rotated",
    "login_failed",
    "login_succeeded",
    "password_reset",
    "roles_changed",
    "security_event_received",
    "session_revoked",
    "token_minted",
    "user_created",
    "user_deleted",
    "user_registered",
    "workflow_aborted",
    "workflow_completed",
    "workflow_started",
]

authflow_signals = Namespace()

login_succeeded = authflow_signals.signal("login-succeeded")
login_failed = authflow_signals.signal("login-failed")
factor_verified = authflow_signals.signal("factor-verified")
session_revoked = authflow_signals.signal("session-revoked")
key_rotated = authflow_signals.signal("key-rotated")
token_minted = authflow_signals.signal("token-minted")
roles_changed = authflow_signals.signal("roles-changed")
workflow_started = authflow_signals.signal("workflow-started")
workflow_completed = authflow_signals.signal("workflow-completed")
workflow_aborted = authflow_signals.signal("workflow-aborted")
identity_linked = authflow_signals.signal("identity-linked")
identity_unlinked = authflow_signals.signal("identity-unlinked")
user_registered = authflow_signals.signal("user-registered")
email_confirmed = authflow_signals.signal("email-confirmed")
password_reset = authflow_signals.signal("password-reset")
email_changed = authflow_signals.signal("email-changed")
user_created = authflow_signals.signal("user-created")
user_deleted = authflow_signals.signal("user-deleted")
security_event_received = authflow_signals.signal("security-event-received")


# --- sent once the flow's one commit is done (the library's plumbing, not public) -----------

_Held = list[tuple[NamedSignal, object, dict[str, Any]]]
_HELD: ContextVar[_Held | None] = ContextVar("authflow_held_signals", default=None)


def send_after_commit(signal: NamedSignal, sender: object, **kwargs: Any) -> None:
    """Send ``signal`` now, or, inside :func:`held_until_commit`, once that block's commit
    is done (never, if it is not)."""
    held = _HELD.get()
    if held is None:
        signal.send(sender, **kwargs)
    else:
        held.append((signal, sender, kwargs))


@contextmanager
def held_until_commit() -> Iterator[Callable[[], None]]:
    """Hold the signals sent with :func:`send_after_commit` in the block; the yielded
    function sends them (call it once the block's writes are committed, after the block:
    an enclosing block holds them in turn). Without the call they are dropped."""
    held: _Held = []
    token = _HELD.set(held)

    def release() -> None:
        sends = list(held)
        held.clear()
        for signal, sender, kwargs in sends:
            send_after_commit(signal, sender, **kwargs)

    try:
        yield release
    finally:
        _HELD.reset(token)
