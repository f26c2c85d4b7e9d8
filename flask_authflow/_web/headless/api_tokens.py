"""The signed-in user's personal API tokens (``Authorization: Bearer afp_...`` for
scripts): list them, create one (its value is in that answer and nowhere else, ever),
revoke one. The same service as the account page's tokens; creating one is a new
credential, so it needs a recent sign-in (401 ``step_up_required``: ``/step-up`` first).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask_authflow._core.ports import ApiTokenRecord
from flask_authflow._i18n import N_
from flask_authflow._web import services
from flask_authflow._web.api_auth import token_service
from flask_authflow._web.headless.routes import Answer, Call, Refusal, Reply, Routes
from flask_authflow._web.headless.schema import Array, Integer, Nullable, Object, String
from flask_authflow._web.state import current_auth_session
from flask_authflow._web.views.api_tokens import login_too_old
from flask_authflow.errors import StepUpNeeded

__all__ = ["routes"]

routes = Routes("api-tokens")

NAME = String(64, min_length=1, description="Unique among the user's tokens.")
SCOPE = String(64, min_length=1, pattern="[a-z0-9:._-]+")

TOKEN = Object(
    {
        "name": String(64),
        "scopes": Array(String(64), 32),
        "created_at": String(64),
        "expires_at": Nullable(String(64)),
        "last_used_at": Nullable(String(64)),
    },
    required=("name", "scopes", "created_at", "expires_at", "last_used_at"),
    name="ApiToken",
    description="A token as stored: never its value.",
)
TOKENS = Object(
    {
        "api_tokens": Array(TOKEN, 1024),
        "scopes": Array(String(64), 256, description="The scopes this site offers."),
    },
    required=("api_tokens", "scopes"),
    name="ApiTokens",
)
CREATE_BODY = Object(
    {
        "name": NAME,
        "scopes": Array(SCOPE, 32),
        "expires_in_days": Integer(
            1, 99_999, description="Default: the site's (``AUTHFLOW_API_TOKEN_DEFAULT_EXPIRY``)."
        ),
    },
    required=("name",),
    name="NewApiToken",
)
CREATED = Object(
    {"token": String(256, description="The token: shown this once, stored only hashed."), "api_token": TOKEN},
    required=("token", "api_token"),
    name="ApiTokenCreated",
)
REVOKE_BODY = Object({"name": NAME}, required=("name",), name="ApiTokenRevocation")
REVOKED = Object(
    {"status": String(32, choices=("api_token_revoked",))}, required=("status",), name="ApiTokenRevoked"
)


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _row(record: ApiTokenRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "scopes": list(record.scopes),
        "created_at": record.created_at.isoformat(),
        "expires_at": _iso(record.expires_at),
        "last_used_at": _iso(record.last_used_at),
    }


@routes.get(
    "/account/api-tokens",
    "listApiTokens",
    "The user's API tokens",
    answers={200: Answer("By name, never their values", TOKENS)},
    signed_in=True,
)
def list_tokens(call: Call) -> Reply:
    session = current_auth_session()
    records = services.tokens().list(str(session.user_id), tenant=str(session.tenant))
    return Reply({"api_tokens": [_row(r) for r in records], "scopes": list(token_service().settings.scopes)})


@routes.post(
    "/account/api-tokens",
    "createApiToken",
    "Create an API token",
    body=CREATE_BODY,
    answers={201: Answer("Created: keep the token now, it is never shown again", CREATED)},
    errors={401: ("step_up_required",), 404: ("user_not_found",), 409: ("token_name_taken",)},
    signed_in=True,
)
def create_token(call: Call) -> Reply:
    if login_too_old():
        raise StepUpNeeded(N_("Confirm it is you first."))
    session = current_auth_session()
    options: dict[str, Any] = {"tenant": str(session.tenant)}
    days = call.body.get("expires_in_days")
    if days is not None:
        options["expires_in"] = timedelta(days=days)
    created = services.tokens().create(
        str(session.user_id), call.body["name"], call.body.get("scopes", []), **options
    )
    return Reply({"token": created.value, "api_token": _row(created.record)}, 201)


@routes.post(
    "/account/api-tokens/revoke",
    "revokeApiToken",
    "Revoke an API token",
    body=REVOKE_BODY,
    answers={200: Answer("No request is authenticated with it any more", REVOKED)},
    errors={404: ("not_found",)},
    signed_in=True,
)
def revoke_token(call: Call) -> Reply:
    session = current_auth_session()
    revoked = services.tokens().revoke(str(session.user_id), call.body["name"], tenant=str(session.tenant))
    if not revoked:
        raise Refusal("not_found", N_("You have no API token of that name."), 404)
    return Reply({"status": "api_token_revoked"})
