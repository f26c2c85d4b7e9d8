"""The signed-in user's sessions: list them, end one, end all the others ("log out
everywhere").

The same calls as the account page (:mod:`flask_authflow._web.views.blueprint`): sessions
are named by the SHA-256 of their id (a raw id or token is never shown); ending the
current one is the audited logout; ending the others also ends the user's API tokens,
pending mailed links and lock.
"""

from __future__ import annotations

from typing import Any

from flask_authflow._web import services
from flask_authflow._web.headless.registration import ENDED
from flask_authflow._web.headless.routes import Answer, Call, Refusal, Reply, Routes
from flask_authflow._web.headless.schema import Array, Boolean, Nullable, Object, String
from flask_authflow._web.state import current_auth_session
from flask_authflow._web.views import account_page, blueprint
from flask_authflow._web.views.common import MESSAGES, stored_sid

__all__ = ["routes"]

routes = Routes("sessions")

SESSION_HASH = String(
    64, min_length=64, pattern="[0-9a-f]{64}", description="The SHA-256 of the session's id."
)

SESSION_ROW = Object(
    {
        "hash": String(64),
        "device": String(512, description="The browser or app it signed in from, as people read it."),
        "last_seen_at": String(64),
        "created_at": String(64),
        "authenticated_at": Nullable(String(64)),
        "auth_method": Nullable(String(256)),
        "current": Boolean(description="The session of this request."),
    },
    required=("hash", "device", "last_seen_at", "created_at", "authenticated_at", "auth_method", "current"),
    name="SessionRow",
)
SESSIONS = Object({"sessions": Array(SESSION_ROW, 10_000)}, required=("sessions",), name="Sessions")
ENDED_ONE = Object(
    {"status": String(16, choices=("logged_out", "revoked"))},
    required=("status",),
    name="SessionEnded",
    description="``logged_out``: it was this session (an app drops its token).",
)
ENDED_OTHERS = Object(
    {"status": String(32, choices=("others_revoked",)), **ENDED},
    required=("status", *ENDED),
    name="OtherSessionsEnded",
)


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


@routes.get(
    "/account/sessions",
    "listSessions",
    "The user's live sessions",
    answers={200: Answer("This session first, then the most recently seen", SESSIONS)},
    signed_in=True,
)
def list_sessions(call: Call) -> Reply:
    session = current_auth_session()
    current = stored_sid(session)
    records = services.sessions().list(str(session.user_id), tenant=str(session.tenant))  # most recent first
    records.sort(key=lambda r: r.sid != current)  # stable: this one first, the rest as they were
    rows = []
    for record in records:
        row = account_page.session_row(record, current)
        rows.append({**row, **{k: _iso(row[k]) for k in ("last_seen_at", "created_at", "authenticated_at")}})
    return Reply({"sessions": rows})


@routes.delete(
    "/account/sessions/{session_hash}",
    "revokeSession",
    "End one of the user's sessions",
    params={"session_hash": SESSION_HASH},
    answers={200: Answer("Ended", ENDED_ONE)},
    errors={404: ("not_found",)},
    signed_in=True,
)
def end_session(call: Call) -> Reply:
    """Another user's session, or one that already ended, is 404 (nothing is touched)."""
    ended = blueprint.end_user_session(call.params["session_hash"])
    if ended is None:
        raise Refusal("not_found", MESSAGES["no_session"], 404)
    return Reply({"status": ended})


@routes.post(
    "/account/sessions/revoke-others",
    "revokeOtherSessions",
    "Log out everywhere else",
    answers={200: Answer("Every other session, API token and pending link ended", ENDED_OTHERS)},
    signed_in=True,
)
def end_other_sessions(call: Call) -> Reply:
    session = current_auth_session()
    ended = services.sessions().revoke_all(
        str(session.user_id), tenant=str(session.tenant), keep_sid=stored_sid(session)
    )
    return Reply({"status": "others_revoked", **ended.to_dict()})
