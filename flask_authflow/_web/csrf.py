"""CSRF protection of the ready views' forms.

Every form of the ``authflow_views`` blueprint carries a hidden ``csrf_token`` field.
Two modes, chosen per request:

* **Built in** (the default): a random token kept in the session's custom data under
  ``SESSION_KEY``, compared with ``hmac.compare_digest``. It is bound to the
  session (another browser's token is worthless), rotated when a login completes and
  when the password changes (a token seen before either is worthless after it), and
  dropped by a logout (which empties the session).
* **Flask-WTF**: when the app has an enabled ``flask_wtf.csrf.CSRFProtect``
  (``app.extensions["csrf"]`` with ``WTF_CSRF_ENABLED`` true), its token is rendered
  instead (``generate_csrf()``, field ``WTF_CSRF_FIELD_NAME``) and its check applies:
  ``CSRFProtect`` validates every POST before the view runs, and a view whose request it
  did not validate (exempted, or ``WTF_CSRF_CHECK_DEFAULT = False``) calls
  ``CSRFProtect.protect()`` itself, so the views are never left unprotected. Its
  rejection (``CSRFError``, a 400) is answered by the app's error handlers. The token is
  rotated at login too.

Every template of the app can call ``csrf_token()`` (and read ``csrf_field_name``) for its
own forms: the context processor :func:`template_helpers`. A script sends the token in the
``X-CSRF-Token`` header (or the ``csrf_token`` member of a JSON body); ``GET .../csrf`` of
the ready views answers it as JSON.

Flask-WTF is optional: it is imported only when an app registered it.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from flask import current_app, g, request

from flask_authflow._web.json_body import json_body
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow.errors import InvalidInput

__all__ = [
    "CSRF_HEADER",
    "FIELD_NAME",
    "SESSION_KEY",
    "csrf_field_name",
    "csrf_token",
    "csrf_valid",
    "rotate_csrf_token",
    "template_helpers",
]

#: Key of the built-in token in the session's custom data.
SESSION_KEY = "_authflow_csrf"
#: Name of the hidden form field of the built-in token.
FIELD_NAME = "csrf_token"
#: The header a script sends the token in (JSON bodies, ``fetch`` of a form); Flask-WTF
#: reads the same header by default.
CSRF_HEADER = "X-CSRF-Token"


def flask_wtf_protect() -> Any | None:
    """The app's enabled Flask-WTF ``CSRFProtect``, or ``None`` (the built-in token applies)."""
    extension = current_app.extensions.get("csrf")
    if extension is None or not current_app.config.get("WTF_CSRF_ENABLED", True):
        return None
    try:
        from flask_wtf.csrf import CSRFProtect  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - something else registered itself as "csrf"
        return None
    return extension if isinstance(extension, CSRFProtect) else None


def csrf_field_name() -> str:
    """Name of the hidden field that carries the token (``csrf_token`` unless Flask-WTF's
    ``WTF_CSRF_FIELD_NAME`` says otherwise)."""
    if flask_wtf_protect() is not None:
        return str(current_app.config.get("WTF_CSRF_FIELD_NAME", FIELD_NAME))
    return FIELD_NAME


def csrf_token() -> str:
    """The token to put in the current request's forms (created on first use)."""
    if flask_wtf_protect() is not None:
        from flask_wtf.csrf import generate_csrf

        return str(generate_csrf())
    session = current_auth_session()
    token = session.get(SESSION_KEY)
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        session[SESSION_KEY] = token
    return token


def csrf_valid() -> bool:
    """Whether the current POST carries the session's token.

    With Flask-WTF, its ``protect()`` decides (and raises its ``CSRFError`` on a bad
    token); this returns true once it has passed.
    """
    protect = flask_wtf_protect()
    if protect is not None:
        if not g.get("csrf_valid"):
            protect.protect()  # raises CSRFError (400) when the token is missing or wrong
        return True
    expected = current_auth_session().get(SESSION_KEY)
    supplied = request.form.get(FIELD_NAME) or request.headers.get(CSRF_HEADER) or _json_field()
    if not isinstance(expected, str) or not expected or not supplied:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), supplied.encode("utf-8", "surrogatepass"))


def _json_field() -> str | None:
    """The ``csrf_token`` member of a JSON body (an object), if any; none for a body that
    :func:`~flask_authflow._web.json_body.json_body` refuses (too deep, too large)."""
    try:
        body = json_body()
    except InvalidInput:
        return None
    value = body.get(FIELD_NAME) if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def template_helpers() -> dict[str, Any]:
    """What every template of the app gets (a context processor ``init_app`` installs):
    ``csrf_token()``, the token for the app's own forms (the logout button ...), and
    ``csrf_field_name``, the field to put it in (with Flask-WTF, its token and field); and
    ``authflow_layout``, the template the ready pages extend (``AUTHFLOW_VIEWS_LAYOUT``)."""
    return {
        "csrf_token": csrf_token,
        "csrf_field_name": csrf_field_name(),
        "authflow_layout": get_state().config.web.views_layout,
    }


def rotate_csrf_token() -> None:
    """Forget the current token: the next form gets a new one (after login, password change)."""
    session = current_auth_session()
    session.pop(SESSION_KEY, None)
    if flask_wtf_protect() is not None:
        field = str(current_app.config.get("WTF_CSRF_FIELD_NAME", FIELD_NAME))
        session.pop(field, None)
        g.pop(field, None)
