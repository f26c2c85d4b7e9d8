"""A single-page app on flask-authflow's headless API: plain HTML and ``fetch``, no build step.

Start it (SQLite in ``examples/spa/instance/``), create a user and give it an
authenticator app, then open http://127.0.0.1:5000/::

    flask --app examples/spa/app.py authflow create-user alice --password-stdin
    flask --app examples/spa/app.py authflow enroll-totp alice     # prints the otpauth:// URI
    flask --app examples/spa/app.py run

The page (``static/index.html`` and ``static/app.js``) signs in through
``/auth/api/v1`` as a ``browser`` client: the session cookie (HttpOnly, never seen by the
script) and the CSRF token of ``GET /auth/api/v1/session`` in ``X-CSRF-Token``. It calls
this app's own JSON route ``GET /api/notes`` (``login_required``) and signs out with
``POST /auth/api/v1/logout``. ``mobile_client.py`` beside it does the same as an ``app``
client, with a session token and no cookie.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Any

from flask import Flask, Response, jsonify, send_from_directory

from flask_authflow import AuthFlow, current_user, login_required

authflow = AuthFlow()

HERE = Path(__file__).resolve().parent
#: The page loads only this site's own script and styles: no inline script, no other origin.
CONTENT_SECURITY_POLICY = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
DEV_KEY_FILE = "dev-signing-key"


def _development_key(app: Flask) -> str:
    """A signing key kept in the instance folder (mode 0600), for trying the example."""
    path = Path(app.instance_path) / DEV_KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(48))
        print(f" * flask-authflow: created a development signing key in {path}", file=sys.stderr)
    return path.read_text().strip()


def index() -> Response:
    response = send_from_directory(HERE / "static", "index.html")
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["Cache-Control"] = "no-store"
    return response


@login_required
def notes() -> Response:
    """The app's own protected JSON: the signed-in user's notes."""
    response = jsonify(
        {"user": current_user.identifier, "notes": [f"Welcome back, {current_user.identifier}."]}
    )
    response.headers["Cache-Control"] = "no-store"
    return response


def create_app(test_config: dict[str, Any] | None = None, *, instance_path: str | None = None) -> Flask:
    """The single-page app; ``test_config`` overrides the ``FLASK_``-prefixed environment."""
    app = Flask(
        __name__,
        static_folder=str(HERE / "static"),
        static_url_path="/static",
        instance_path=instance_path or str(HERE / "instance"),
    )
    app.config.from_prefixed_env()
    app.config.update(test_config or {})
    if app.config.get("AUTHFLOW_SIGNING_KEY") is None:  # development: loopback and plain HTTP only
        app.config["AUTHFLOW_SIGNING_KEY"] = _development_key(app)
        app.config.setdefault("AUTHFLOW_COOKIE_SECURE", False)
        app.config.setdefault("AUTHFLOW_ALLOW_INSECURE_LOOPBACK", True)
    Path(app.instance_path).mkdir(parents=True, exist_ok=True)
    app.config.setdefault("AUTHFLOW_DATABASE_URL", f"sqlite:///{Path(app.instance_path) / 'spa.db'}")
    app.config.setdefault("AUTHFLOW_HEADLESS", True)  # the JSON API at /auth/api/v1, no HTML pages
    authflow.init_app(app)
    app.add_url_rule("/", "index", index)
    app.add_url_rule("/api/notes", "notes", notes)
    return app
