"""The issuer example: flask-authflow's local token issuer behind access-controlled routes.

Start it (SQLite + a file key store in ``examples/issuer/instance/``)::

    flask --app examples/issuer/app.py run --port 5001

Routes:

* ``GET /.well-known/openid-configuration`` and ``GET /jwks.json``: the issuer blueprint
  (public, cacheable);
* ``POST /login`` JSON ``{"username", "password"}`` and ``POST /logout``: a session,
  as in the reference app;
* ``POST /issue`` JSON ``{"audience": str, "ttl": int seconds (optional)}``: mints a
  token whose subject is the caller's user id. Only for an authenticated session; the
  audience must be on ``ISSUER_AUDIENCES``; the lifetime is at most
  ``ISSUER_MAX_TTL`` seconds (and never over ``AUTHFLOW_ISSUER_MAX_LIFETIME``);
* ``POST /admin/rotate`` JSON ``{"algorithm": "ES256"|"RS256" (optional)}``: rotates
  the signing key. Only for a user of the default tenant named in ``ISSUER_OPERATORS`` whose login is at
  most 5 minutes old (``fresh_login_required``), so a stolen long-lived session cannot
  rotate keys;
* ``GET /``: an HTML page with the issuer's current key id and endpoints.

Every route answers typed JSON errors (``{"error", "message"}``), never a 500.

Tests that move time pass ``create_app(..., clock=MockClock())``: the clock belongs to
the ``AuthFlow`` object, so such an app gets its own ``AuthFlow(clock=clock)`` instead
of the module-level one.
"""

from __future__ import annotations

import os
import secrets
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, abort, jsonify, render_template, request

from flask_authflow import (
    Authenticated,
    AuthFlow,
    AuthFlowError,
    current_session,
    fresh_login_required,
    get_state,
    login_required,
)
from flask_authflow.errors import InvalidInput
from flask_authflow.issuer import LocalIdpSigningKey, MintClaims

if TYPE_CHECKING:  # tests pass a MockClock; the app runs on the system clock
    from flask_authflow.testing import MockClock

authflow = AuthFlow()


class Forbidden(AuthFlowError):
    """Only an issuer operator may do this."""

    code = "forbidden"
    status = 403


def _development_key(app: Flask) -> str:
    path = Path(app.instance_path) / "dev-signing-key"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(48))
        print(f" * flask-authflow: created a development signing key in {path}", file=sys.stderr)
    return path.read_text().strip()


def _json_body() -> dict[str, Any]:
    try:
        body = request.get_json(silent=True)
    except RecursionError:  # nested deeper than the JSON parser goes
        body = None
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    return body


def create_app(
    test_config: dict[str, Any] | None = None,
    *,
    instance_path: str | None = None,
    clock: MockClock | None = None,
) -> Flask:
    """Build the issuer example; ``test_config`` overrides the environment.

    ``clock`` (a ``MockClock`` in tests) is used by sessions, freshness checks and the
    issuer; without it the module-level ``authflow`` (wall clock) is used.
    """
    app = Flask(
        __name__,
        instance_relative_config=True,
        # beside this file, however the app is imported (flask --app path, or as a module)
        instance_path=instance_path or str(Path(__file__).resolve().parent / "instance"),
    )
    app.config.from_prefixed_env()
    if test_config:
        app.config.update(test_config)
    # Only a key that is absent switches to the development key: an empty
    # FLASK_AUTHFLOW_SIGNING_KEY is a mistake, and init_app refuses it with a message.
    if app.config.get("AUTHFLOW_SIGNING_KEY") is None:
        app.config["AUTHFLOW_SIGNING_KEY"] = _development_key(app)
        app.config.setdefault("AUTHFLOW_COOKIE_SECURE", False)
        app.config.setdefault("AUTHFLOW_ALLOW_INSECURE_LOOPBACK", True)
    app.config.setdefault("AUTHFLOW_ISSUER", "http://127.0.0.1:5001")
    app.config.setdefault("AUTHFLOW_ISSUER_KEY_STORE", f"file:{Path(app.instance_path) / 'issuer-keys'}")
    app.config.setdefault("ISSUER_AUDIENCES", ["https://api.example"])
    app.config.setdefault("ISSUER_OPERATORS", [])
    app.config.setdefault("ISSUER_MAX_TTL", 900)
    if app.config.get("MAX_CONTENT_LENGTH") is None:  # Flask presets None, so setdefault would not do it
        app.config["MAX_CONTENT_LENGTH"] = 64 * 1024  # request bodies are small: refuse huge ones (413)
    extension = authflow if clock is None else AuthFlow(clock=clock)
    extension.init_app(app)

    @app.errorhandler(AuthFlowError)
    def json_error(error: AuthFlowError) -> tuple[Response, int]:
        # A JSON API: typed JSON errors whatever the client's Accept header says.
        response = jsonify(error.to_dict())
        response.headers["Cache-Control"] = "no-store"
        return response, error.status

    @app.before_request
    def refuse_oversized_bodies() -> None:
        # Werkzeug enforces MAX_CONTENT_LENGTH only when a view reads the body; refuse a
        # declared oversized body before anything else runs (a view that never reads it,
        # or answers 401 first, must not be a way to make the server accept 50 MB).
        limit = app.config["MAX_CONTENT_LENGTH"]
        if request.content_length is not None and request.content_length > limit:
            abort(413)

    @app.get("/")
    def index() -> str:
        issuer = get_state().issuer
        return render_template("issuer.html", issuer=issuer, audiences=app.config["ISSUER_AUDIENCES"])

    @app.post("/login")
    def login() -> tuple[Response, int]:
        body = _json_body()
        username, password = body.get("username"), body.get("password")
        if not isinstance(username, str) or not isinstance(password, str):
            raise InvalidInput("username and password are required strings")
        outcome = extension.login.password(username, password)
        if isinstance(outcome, Authenticated):
            return jsonify(status="authenticated"), 200
        return jsonify(error="invalid_credentials", message="invalid credentials"), 401

    @app.post("/logout")
    def logout() -> Response:
        extension.login.logout()
        return jsonify(status="logged_out")

    @app.post("/issue")
    @login_required
    def issue() -> Response:
        body = _json_body()
        audience = body.get("audience")
        ttl = body.get("ttl", 300)
        if not isinstance(audience, str) or audience not in app.config["ISSUER_AUDIENCES"]:
            raise InvalidInput(f"audience must be one of {', '.join(app.config['ISSUER_AUDIENCES'])}")
        if (
            not isinstance(ttl, int)
            or isinstance(ttl, bool)
            or not 1 <= ttl <= int(app.config["ISSUER_MAX_TTL"])
        ):
            raise InvalidInput(f"ttl must be an integer from 1 to {app.config['ISSUER_MAX_TTL']} seconds")
        issuer = get_state().issuer
        exp = issuer.clock.now() + timedelta(seconds=ttl)
        claims = MintClaims(str(current_session.user_id), exp).with_audience(audience)
        token = issuer.mint(claims.with_custom_claim("tenant", current_session.tenant))
        return jsonify(token=token, kid=issuer.current_kid, expires_in=ttl)

    @app.post("/admin/rotate")
    @fresh_login_required(timedelta(minutes=5))
    def rotate() -> Response:
        state = get_state()
        user = state.backend.get_user(str(current_session.tenant), str(current_session.user_id))
        # Operators are named users of the default tenant: a same-named user in another
        # tenant is somebody else.
        operator_tenant = state.config.default_tenant
        if (
            user is None
            or user.tenant != operator_tenant
            or user.identifier not in app.config["ISSUER_OPERATORS"]
        ):
            raise Forbidden()
        # The body is optional, but one that is there must be a JSON object: a
        # malformed request must not rotate with defaults it did not ask for.
        body = _json_body()  # JSON only: a form post from another page cannot rotate keys
        algorithm = body.get("algorithm", "ES256")
        if algorithm not in ("ES256", "RS256"):
            raise InvalidInput("algorithm must be ES256 or RS256")
        key = (
            LocalIdpSigningKey.generate_es256()
            if algorithm == "ES256"
            else LocalIdpSigningKey.generate_rs256()
        )
        state.issuer.rotate_signing_key(key)
        return jsonify(kid=key.kid, algorithm=algorithm, jwks_keys=len(state.issuer.jwks()["keys"]))

    return app
