"""The reference app of flask-authflow: the reference wiring of the routes below, plus HTML pages.

Start it (SQLite in ``examples/reference/instance/``)::

    flask --app examples/reference/app.py run

Configure it from the environment with the ``FLASK_`` prefix, e.g.
``FLASK_AUTHFLOW_SIGNING_KEY``, ``FLASK_AUTHFLOW_DATABASE_URL``. Started with no
signing key at all, it creates a development key in its instance folder (mode 0600),
says so, and serves plain-HTTP cookies to loopback clients only (whose own address, such
as ``http://127.0.0.1:5000``, mailed links then start with). With a signing key, set
``FLASK_AUTHFLOW_EXTERNAL_URL`` to the address users reach the app at: mailed links start
there, never with the request's ``Host``, and ``init_app`` refuses password reset and
sign-up without it.

Routes (JSON / plain text):

* ``GET /`` 200 HTML, links to the pages below; ``GET /dashboard`` 200 when authenticated,
  else 401; ``GET /admin`` 200 for a user with the role ``admin`` (``flask authflow roles
  create admin``, then ``flask authflow users add-role alice admin``), 403 otherwise (JSON
  ``{"error": "permission_denied", ...}`` for API clients);
* ``POST /login`` JSON ``{"username", "password"[, "tenant"]}``: 200 when
  authenticated or a next factor is named; 401 invalid credentials / step-up / error;
  403 locked (the text names the lock end); 429 with ``Retry-After`` when the client's
  address (from ``X-Forwarded-For`` when the peer is one of ``AUTHFLOW_TRUSTED_PROXIES``,
  loopback by default) is throttled;
  when a factor is next, a second line and the ``Authflow-Factor-Kinds`` header list every
  kind that passes the step (``totp, recovery_code``);
* ``POST /login/factor`` JSON ``{"kind": "totp", "code": "123456"}`` or ``{"kind":
  "webauthn", "credential": {...}}`` (the browser's ``PublicKeyCredential`` as JSON): 200
  ``{"status": "authenticated"}`` or ``{"status": "factor_required", "kinds": [...],
  "challenges": {...}}``; 401 ``{"error": "invalid_credential"}`` (the login waits for
  another try); 403 ``{"error": "locked", "until": ...}``; 400 ``{"error": ..., "message":
  ...}`` for a malformed body or code;
* ``POST /login/factor/send`` JSON ``{"kind": "email_otp"}``: (re)send the code of the
  pending step; 200 as above;
* ``POST /signup`` JSON ``{"username", "email", "password"}``: 202 ``{"status":
  "verification_sent"}`` (the same for an address that has an account: its owner gets a
  notice); ``POST /signup/verify`` ``{"token"}`` (or ``{"username", "code"}``): 200;
  ``POST /password/forgot`` ``{"username"}`` or ``{"email"}``: 202 whether or not an
  account matches; ``POST /password/reset`` ``{"token", "password"}``: 200, or 401
  ``second_factor_required`` (pass ``POST /login/factor``, then send it again). Each
  answers 400 for a malformed body, 401/410 for a bad or used token, never 500. Mails go
  to ``AUTHFLOW_SMTP_*`` or, without it, into ``instance/outbox`` (``AUTHFLOW_MAIL_OUTBOX``);
* ``GET /api/me``: the signed-in user as JSON (``user_id``, ``tenant``, ``identifier``, ``via``
  ``"session"`` or ``"token"``, the token's ``scopes``), for a session or a personal API token
  (``Authorization: Bearer afp_...``, created on ``/account`` or with ``flask authflow tokens
  create``); else 401 with ``WWW-Authenticate: Bearer``;
* ``POST /logout``; ``GET /metrics`` (Prometheus text) for a client on this machine (no
  proxy in between) or with ``Authorization: Bearer <METRICS_TOKEN>`` (``FLASK_METRICS_TOKEN``,
  compared in constant time); else 401 when a token is configured, 404 when none is.

Every HTML response carries ``X-Frame-Options: DENY``, ``Content-Security-Policy:
frame-ancestors 'none'`` and ``Cache-Control: no-store`` (:func:`protect_pages`).

HTML pages: flask-authflow's ready views (``GET /login``, the factor steps, ``/step-up``,
``/account`` with password change and the session list, ``/account/factors`` to add an
authenticator app, security keys or recovery codes), registered after the JSON routes; a
form POST to ``/login``, ``/login/factor``, ``/login/factor/send`` or ``/logout`` is handed
to them. With OpenID providers in
``AUTHFLOW_OAUTH_PROVIDERS`` the sign-in page offers a "Sign in with ..." button for each
(``/auth/login/<provider>``), and ``/auth/...`` serves the callback, back-channel and
RP-initiated logout. With Flask-Babel installed (the ``[babel]`` extra; ``./scripts/serve-reference``
installs it) the pages are in German or French when the browser's ``Accept-Language`` asks for them.
"""

from __future__ import annotations

import hmac
import importlib.util
import ipaddress
import json
import logging
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask, Response, abort, current_app, jsonify, render_template_string, request

from flask_authflow import (
    Authenticated,
    AuthFlow,
    AuthFlowError,
    FactorKind,
    FactorRequired,
    InvalidCredential,
    Locked,
    StepUpRequired,
    current_api_token,
    current_session,
    current_user,
    get_state,
    login_required,
    roles_required,
    rotate_csrf_token,
)

authflow = AuthFlow()

DEV_KEY_FILE = "dev-signing-key"

log = logging.getLogger("examples.reference")


def _development_key(app: Flask) -> str:
    """Read or create the development signing key in the instance folder (0600)."""
    path = Path(app.instance_path) / DEV_KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(48))
        print(f" * flask-authflow: created a development signing key in {path}", file=sys.stderr)
    else:
        print(f" * flask-authflow: using the development signing key in {path}", file=sys.stderr)
    print(
        " * flask-authflow: development mode: cookies without Secure, loopback clients only. "
        "Set FLASK_AUTHFLOW_SIGNING_KEY for anything else.",
        file=sys.stderr,
    )
    return path.read_text().strip()


def _text(body: str, status: int = 200) -> Response:
    return Response(body + "\n", status=status, mimetype="text/plain")


def _unavailable(error: AuthFlowError) -> Response:
    """A 5xx error as a generic 503 (the real message is logged, never shown)."""
    log.error("%s (%s) answered 503", error.code, error.message)
    response = _text("the service could not complete the request; try again later", 503)
    response.headers["Cache-Control"] = "no-store"
    if error.retry_after is not None:
        response.headers["Retry-After"] = str(error.retry_after)
    return response


def _retry_later(error: AuthFlowError) -> Response:
    """A throttled request: 429 with ``Retry-After`` (the seconds until the limit has room)."""
    response = _text(f"too many requests: {error.message}", 429)
    response.headers["Cache-Control"] = "no-store"
    response.headers["Retry-After"] = str(error.retry_after or 1)
    return response


def _outcome_text(outcome: Any) -> tuple[str, int]:
    """The reference mapping of login outcomes to text and status (401, 403 for a lock)."""
    match outcome:
        case Authenticated():
            return "authenticated", 200
        case FactorRequired(kind=kind):
            return f"next factor required: {kind.value}", 200
        case Locked(until=until):
            return f"account locked until {until.isoformat()}", 403
        case StepUpRequired():
            return "step-up required", 401
        case InvalidCredential():
            return "invalid credentials", 401
    return "login error", 401


#: Longest one-time code the JSON factor route passes on (a real one has 6 to 11 characters).
MAX_CODE_LENGTH = 64


def _json(body: dict[str, Any], status: int = 200) -> Response:
    response = jsonify(body)
    response.status_code = status
    response.headers["Cache-Control"] = "no-store"
    return response


def _json_error(code: str, message: str, status: int = 400, **extra: Any) -> Response:
    return _json({"error": code, "message": message, **extra}, status)


def _error_json(error: AuthFlowError) -> Response:
    """A typed error as JSON: its own 4xx, a 5xx as 503 without its message (never a 500)."""
    if 400 <= error.status < 500:
        response = _json_error(error.code, error.message, error.status)
        if error.retry_after is not None:  # throttled (429): when to try again
            response.headers["Retry-After"] = str(error.retry_after)
        return response
    response = _json_error(error.code, "the service could not complete the request; try again later", 503)
    if error.retry_after is not None:
        response.headers["Retry-After"] = str(error.retry_after)
    return response


def _required_json(outcome: FactorRequired) -> Response:
    return _json(
        {
            "status": "factor_required",
            "kinds": [kind.value for kind in outcome.kinds],
            "challenges": {kind.value: dict(public) for kind, public in outcome.challenges.items()},
        }
    )


def _factor_json(outcome: Any) -> Response:
    """A factor step's outcome as the JSON the reference wiring answers."""
    match outcome:
        case Authenticated():
            rotate_csrf_token()  # a form token seen before the login is worthless after it
            return _json({"status": "authenticated"})
        case FactorRequired():
            return _required_json(outcome)
        case Locked(until=until):
            return _json_error(
                "locked", f"account locked until {until.isoformat()}", 403, until=until.isoformat()
            )
    return _json_error("invalid_credential", "the credential was not accepted", 401)


def _guarded(call: Callable[[], Response]) -> Response:
    try:
        return call()
    except AuthFlowError as error:  # malformed input (400), no login waiting, a store down (503)
        return _error_json(error)


def _json_body() -> dict[str, Any] | None:
    try:
        body = request.get_json(silent=True)
    except RecursionError:  # nested deeper than the JSON parser goes: not a request of ours
        body = None
    return body if isinstance(body, dict) else None


def _factor_kind(body: dict[str, Any]) -> FactorKind | Response:
    kind = body.get("kind")
    if not isinstance(kind, str):
        return _json_error("invalid_input", "kind must be a string naming a factor kind ('totp' ...)")
    if kind not in FactorKind:
        return _json_error("invalid_input", "unknown factor kind")
    return FactorKind(kind)


#: The shortest ``METRICS_TOKEN`` accepted (a guessable token would open ``/metrics`` to anyone).
MIN_METRICS_TOKEN_LENGTH = 16

#: Headers by which a proxy says it relays another client: such a request is not local.
FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")


def protect_pages(response: Response) -> Response:
    """Every HTML response (the ready views' pages, also when this app's own ``POST /login``
    and ``POST /login/factor`` hand a form to them, and Flask's error pages): never inside
    another site's frame, never stored by a cache (they hold CSRF tokens and the user's data)."""
    if response.mimetype == "text/html":
        response.headers.setdefault("X-Frame-Options", "DENY")
        if "Content-Security-Policy" not in response.headers:
            response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
        if not response.cache_control.no_store:
            response.headers["Cache-Control"] = "no-store"
    return response


def _is_local_client() -> bool:
    """The TCP peer is this machine and no proxy says it relays someone else."""
    if any(name in request.headers for name in FORWARDING_HEADERS):
        return False
    try:
        return ipaddress.ip_address(request.remote_addr or "").is_loopback
    except ValueError:
        return False


def _metrics_refusal() -> Response | None:
    """Why ``/metrics`` is not answered: ``None`` for the right bearer token or a local
    client without one; 401 for a missing or wrong token when one is configured; 404 to
    everyone else (as if there were no such page)."""
    token: str | None = current_app.config.get("METRICS_TOKEN")
    given = request.authorization
    if given is not None and given.type == "bearer" and given.token:
        if token and hmac.compare_digest(given.token.encode("utf-8"), token.encode("utf-8")):
            return None
    elif _is_local_client():
        return None
    if not token:
        response = _text("not found", 404)
    else:
        response = _text("a valid bearer token is required", 401)
        response.headers["WWW-Authenticate"] = 'Bearer realm="metrics"'
    response.headers["Cache-Control"] = "no-store"
    return response


def refuse_oversized_bodies() -> None:
    """Werkzeug enforces MAX_CONTENT_LENGTH only when a view reads the body; refuse a declared
    oversized body before anything else runs (a view that never reads it, or answers 401
    first, must not be a way to make the server accept 50 MB)."""
    declared = request.content_length  # parsed from the headers on every access: once
    if declared is not None and declared > current_app.config["MAX_CONTENT_LENGTH"]:
        abort(413)


#: The home page: links to the app's pages, the sign-out button for a signed-in user.
INDEX_PAGE = """{% extends authflow_layout %}
{% block title %}flask-authflow reference app{% endblock %}
{% block content %}
<h1>flask-authflow reference app</h1>
{% if current_session.is_authenticated %}<p id="whoami">You are signed in.</p>{% endif %}
<ul id="pages">
  <li><a href="{{ url_for('authflow_views.login') }}">Sign in</a></li>
  <li><a href="{{ url_for('authflow_views.account') }}">Your account</a> (password, sessions)</li>
  <li><a href="{{ url_for('authflow_views.factors') }}">Sign-in methods</a>
      (authenticator app, security keys)</li>
  <li><a href="{{ url_for('dashboard') }}">Dashboard</a> (signed in only)</li>
</ul>
{% if current_session.is_authenticated %}
<form method="post" action="{{ url_for('authflow_logout.logout') }}" id="logout-form">
  <input type="hidden" name="{{ csrf_field_name }}" value="{{ csrf_token() }}">
  <button type="submit">Sign out</button>
</form>
{% endif %}
<p class="hint">For scripts: <code>POST /login</code>, <code>POST /login/factor</code> and
<code>POST /logout</code> with JSON bodies; <code>GET /metrics</code> from this machine or with
its bearer token.</p>
{% endblock %}
"""


def index() -> Response:
    return Response(render_template_string(INDEX_PAGE), mimetype="text/html")


@login_required
def dashboard() -> Response:
    return _text(f"dashboard of user {current_session.user_id} in tenant {current_session.tenant}")


@login_required(api=True)
def api_me() -> Response:
    token = current_api_token()
    return _json(
        {
            "user_id": current_user.user_id,
            "tenant": current_user.tenant,
            "identifier": current_user.identifier,
            "via": "token" if token is not None else "session",
            "scopes": list(token.scopes) if token is not None else [],
        }
    )


@roles_required("admin")
def admin() -> Response:
    return _text(f"admin area of tenant {current_session.tenant}")


def _login_answer(outcome: Any) -> Response:
    if isinstance(outcome, Authenticated):
        rotate_csrf_token()  # a form token seen before the login is worthless after it
    text, status = _outcome_text(outcome)
    if isinstance(outcome, FactorRequired) and outcome.kind is not FactorKind.PASSWORD:
        kinds = ", ".join(kind.value for kind in outcome.kinds)
        response = _text(f"{text}\naccepted factors: {kinds}", status)
        response.headers["Authflow-Factor-Kinds"] = kinds
        return response
    return _text(text, status)


def login() -> Any:
    if not request.is_json:  # a browser's form: the ready views' login page handles it
        return current_app.view_functions["authflow_views.login"]()
    body = _json_body()
    if body is None:
        return _text("the body must be a JSON object {username, password}", 400)
    username, password, tenant = body.get("username"), body.get("password"), body.get("tenant")
    if not isinstance(username, str) or not isinstance(password, str):
        return _text("username and password are required strings", 400)
    if tenant is not None and not isinstance(tenant, str):
        return _text("tenant must be a string", 400)
    try:
        outcome = authflow.login.password(username, password, tenant=tenant)
    except AuthFlowError as error:
        if error.status >= 500:  # a store is down: refused (fail closed), not "bad credentials"
            return _unavailable(error)
        if error.status == 429:  # throttled: no credential was checked; try again later
            return _retry_later(error)
        return _text(f"login error: {error.message}", 401)
    return _login_answer(outcome)


def _factor_secret(kind: FactorKind, body: dict[str, Any]) -> str | Response:
    """The credential of a JSON factor step as the service takes it, or the 400 refusal."""
    if kind is FactorKind.WEBAUTHN:
        credential = body.get("credential")
        if not isinstance(credential, dict):
            return _json_error("invalid_input", "credential must be the PublicKeyCredential as a JSON object")
        return json.dumps(credential, separators=(",", ":"))
    code = body.get("code")
    if not isinstance(code, str):
        return _json_error("invalid_input", "code must be a string")
    if len(code) > MAX_CODE_LENGTH:
        return _json_error("invalid_input", f"the code is too long (at most {MAX_CODE_LENGTH} characters)")
    return code


def login_factor() -> Any:
    if not request.is_json:  # a browser's form: the ready views' factor step handles it
        return current_app.view_functions["authflow_views.factor"]()
    body = _json_body()
    if body is None:
        return _json_error(
            "invalid_body", 'the body must be a JSON object {"kind", "code"} or {"kind", "credential"}'
        )
    kind = _factor_kind(body)
    if isinstance(kind, Response):
        return kind
    secret = _factor_secret(kind, body)
    if isinstance(secret, Response):
        return secret
    return _guarded(lambda: _factor_json(authflow.factors.verify(kind, secret)))


def login_factor_send() -> Any:
    if not request.is_json:  # the factor page's "E-mail me a code" button
        return current_app.view_functions["authflow_views.factor_send"]()
    body = _json_body()
    if body is None:
        return _json_error("invalid_body", 'the body must be a JSON object {"kind": "email_otp"}')
    kind = _factor_kind(body)
    if isinstance(kind, Response):
        return kind

    def send() -> Response:
        outcome = authflow.factors.challenge(kind)
        public = outcome.challenges.get(kind)
        problem = public.get("error") if public is not None else None
        if problem is not None:  # the factor declined: too many codes for this login ...
            status = 429 if problem == "too_many_sends" else 400
            return _json_error(str(problem), "no code was sent for this login", status)
        return _required_json(outcome)

    return _guarded(send)


def logout() -> Any:
    # A JSON request cannot be sent cross-site without a CORS preflight; a form is the
    # ready views' logout, which checks its CSRF token.
    if request.is_json:
        authflow.login.logout()
        return _text("logged out")
    return current_app.view_functions["authflow_logout.logout"]()


def metrics() -> Response:
    """The counters in Prometheus' text format, for local clients or the ``METRICS_TOKEN`` bearer."""
    refused = _metrics_refusal()
    if refused is not None:
        return refused
    body = get_state().counters.render_prometheus()
    response = Response(body, mimetype="text/plain; version=0.0.4")
    response.headers["Cache-Control"] = "no-store"
    return response


ROUTES: list[tuple[str, Callable[..., Any], list[str]]] = [
    ("/", index, ["GET"]),
    ("/dashboard", dashboard, ["GET"]),
    ("/api/me", api_me, ["GET"]),
    ("/admin", admin, ["GET"]),
    ("/login", login, ["POST"]),
    ("/login/factor", login_factor, ["POST"]),
    ("/login/factor/send", login_factor_send, ["POST"]),
    ("/logout", logout, ["POST"]),
    ("/metrics", metrics, ["GET"]),
]


def _configure(app: Flask, test_config: dict[str, Any] | None) -> None:
    app.config.from_prefixed_env()
    if test_config:
        app.config.update(test_config)
    # Only a key that is absent switches to the development key: an empty
    # FLASK_AUTHFLOW_SIGNING_KEY is a mistake, and init_app refuses it with a message.
    if app.config.get("AUTHFLOW_SIGNING_KEY") is None:
        app.config["AUTHFLOW_SIGNING_KEY"] = _development_key(app)
        app.config.setdefault("AUTHFLOW_COOKIE_SECURE", False)
        app.config.setdefault("AUTHFLOW_ALLOW_INSECURE_LOOPBACK", True)
    # Sign-up (when the 'accounts' extra, email-validator, is installed) and password reset
    # are on; without an SMTP server the mails go into a folder (instance/outbox, one .eml
    # file per mail) so a person can try the flows.
    app.config.setdefault("AUTHFLOW_REGISTRATION", importlib.util.find_spec("email_validator") is not None)
    app.config.setdefault("AUTHFLOW_PASSWORD_RESET", True)
    if app.config.get("AUTHFLOW_SMTP_HOST") is None:
        app.config.setdefault("AUTHFLOW_MAIL_OUTBOX", str(Path(app.instance_path) / "outbox"))
    if app.config.get("MAX_CONTENT_LENGTH") is None:  # Flask presets None, so setdefault would not do it
        app.config["MAX_CONTENT_LENGTH"] = 64 * 1024  # login bodies are small: refuse huge ones (413)
    token = app.config.get("METRICS_TOKEN")
    if token is not None and (not isinstance(token, str) or len(token) < MIN_METRICS_TOKEN_LENGTH):
        raise ValueError(
            f"METRICS_TOKEN must be a string of at least {MIN_METRICS_TOKEN_LENGTH} characters "
            "(for example: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )


def _translate(app: Flask) -> None:
    """Pages in German and French by the browser's ``Accept-Language`` when Flask-Babel (the
    ``[babel]`` extra) is installed; without it every page is English."""
    if importlib.util.find_spec("flask_babel") is None:
        return
    from flask_babel import Babel

    Babel(app)  # no locale selector: the package's pages follow Accept-Language (docs/i18n.rst)


def create_app(test_config: dict[str, Any] | None = None, *, instance_path: str | None = None) -> Flask:
    """Build the reference app; ``test_config`` overrides the environment."""
    app = Flask(
        __name__,
        instance_relative_config=True,
        # beside this file, however the app is imported (flask --app path, or as a module)
        instance_path=instance_path or str(Path(__file__).resolve().parent / "instance"),
    )
    _configure(app, test_config)
    authflow.init_app(app)
    _translate(app)
    app.before_request(refuse_oversized_bodies)
    app.after_request(protect_pages)
    for rule, view, methods in ROUTES:
        app.add_url_rule(rule, view.__name__, view, methods=methods)
    # The ready views (sign-in, factor steps, step-up, account) after the JSON routes above,
    # so that POST /login and POST /logout with JSON keep the reference wiring's answers.
    authflow.views.register(app)
    return app
