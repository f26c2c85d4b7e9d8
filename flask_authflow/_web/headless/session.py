"""The session's state (``GET /session``) and logout (``POST /logout``)."""

from __future__ import annotations

from typing import Any

from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow._web.csrf import csrf_token
from flask_authflow._web.headless.clients import BROWSER, KINDS
from flask_authflow._web.headless.routes import Answer, Call, Reply, Routes
from flask_authflow._web.headless.schema import Array, Nullable, Object, String
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views.common import identifier_of, pending_step_up, signed_in
from flask_authflow._web.views.logout import end_session
from flask_authflow.login import _required_enrollment as required_enrollment

__all__ = ["KIND_LIST", "SESSION", "held_kinds", "routes", "session_state"]

routes = Routes("session")

#: A list of factor kinds (``["totp", "webauthn"]``).
KIND_LIST = Array(String(64), 32)

USER = Object(
    {
        "id": String(256, description="The user's id in its tenant."),
        "identifier": Nullable(String(1024), description="What the user signs in with."),
        "tenant": String(256),
    },
    required=("id", "identifier", "tenant"),
    name="User",
)

SESSION = Object(
    {
        "state": String(32, choices=tuple(state.value for state in AuthState)),
        "client": String(16, choices=KINDS, description="The client kind this request declared."),
        "user": Nullable(USER, description="The signed-in user (``null`` until the login completes)."),
        "authenticated_at": Nullable(String(64), description="When the login completed (ISO 8601)."),
        "next_step": Array(String(64), 32, description="The factor kinds the pending login step takes."),
        "pending_step_up": KIND_LIST,
        "required_enrollment": Array(
            String(64),
            32,
            description="In ``pending_workflow`` held until a second factor is set up (enforced second "
            "factors, or one an import could not carry): the kinds to set up; empty otherwise.",
        ),
        "csrf_token": Nullable(
            String(256), description="A browser's token for ``X-CSRF-Token`` (``null`` for an app)."
        ),
    },
    required=(
        "state",
        "client",
        "user",
        "authenticated_at",
        "next_step",
        "pending_step_up",
        "required_enrollment",
        "csrf_token",
    ),
    name="Session",
    description="Where the session is in the login state machine.",
)


def held_kinds(session: AuthSession) -> tuple[str, ...]:
    """The kinds a session held in the required enrollment may set up (empty: not held)."""
    return required_enrollment.pending_kinds(session.record, get_state().clock.now())


def session_state(kind: str, session: AuthSession | None = None) -> dict[str, Any]:
    """The :data:`SESSION` body of the current session, for a client of ``kind``."""
    session = session if session is not None else current_auth_session()
    user = None
    if signed_in():
        tenant, user_id = str(session.tenant), str(session.user_id)
        user = {"id": user_id, "identifier": identifier_of(session), "tenant": tenant}
    at = session.authenticated_at if user is not None else None
    return {
        "state": session.state.value,
        "client": kind,
        "user": user,
        "authenticated_at": at.isoformat() if at is not None else None,
        "next_step": list(session.record.next_step) if session.is_authenticating else [],
        "pending_step_up": list(pending_step_up(session)),
        "required_enrollment": list(held_kinds(session)),
        "csrf_token": csrf_token() if kind == BROWSER else None,
    }


@routes.get("/session", "getSession", "The session's state", answers={200: Answer("The session", SESSION)})
def get_session(call: Call) -> Reply:
    """The session's state; a browser client also gets its CSRF token here."""
    return Reply(session_state(call.kind))


LOGGED_OUT = Object(
    {
        "status": String(16, choices=("logged_out",)),
        "location": Nullable(String(4096), description="The provider's end-session URL, to visit."),
    },
    required=("status", "location"),
    name="LoggedOut",
)


@routes.post(
    "/logout", "endSession", "End the session", answers={200: Answer("The session ended", LOGGED_OUT)}
)
def logout(call: Call) -> Reply:
    """End the session (audited; a guest's logout is a no-op). A federated session's
    provider end-session URL comes back as ``location``; an app drops its token."""
    return Reply({"status": "logged_out", "location": end_session()})
