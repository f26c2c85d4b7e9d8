"""The headless API's two kinds of client, declared per request.

``Authflow-Client: browser`` (or no header): the session cookie, and on every request that
changes something the session's CSRF token in ``X-CSRF-Token`` (``GET .../session``
answers it). ``Authflow-Client: app``: the session travels as ``Authorization: Session
<token>``; no cookie is read or set. The token **is** the session id, signed as the cookie
is, kept in the same store: it is handed out in the ``Authflow-Session-Token`` response
header whenever the cookie would have been set (after each rotation: login, each factor,
step-up), and that header comes empty when the session ended (logout, expiry): drop it.

An app session is bound to ``"app" + User-Agent`` and a browser session to the User-Agent
alone (the session interface's fingerprint binding), so an app token put in a cookie jar,
or a browser cookie sent as an app token, meets a binding mismatch and is a new guest:
never accepted. A request that declares one kind and carries the other's credential is
refused (400 ``client_kind_mismatch``) on the API's routes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from flask import Request, Response, request
from werkzeug.exceptions import BadRequest

from flask_authflow._i18n import N_
from flask_authflow._responses import CLIENT_HEADER
from flask_authflow._web.csrf import CSRF_HEADER, csrf_valid
from flask_authflow._web.state import get_state
from flask_authflow.errors import InvalidInput

__all__ = [
    "APP",
    "BROWSER",
    "CLIENT_HEADER",
    "CSRF_HEADER",
    "KINDS",
    "TOKEN_HEADER",
    "TOKEN_SCHEME",
    "AppToken",
    "ClientKindMismatch",
    "CsrfRefused",
    "app_carrier",
    "client_kind",
    "presented_token",
]

BROWSER = "browser"
APP = "app"
KINDS = (BROWSER, APP)
#: ``Authorization: Session <token>``: how an app presents its session token.
TOKEN_SCHEME = "Session"  # noqa: S105 - a scheme name, not a secret
#: The response header that hands an app its (new) token; empty: the session ended.
TOKEN_HEADER = "Authflow-Session-Token"  # noqa: S105 - a header name
#: A signed session id is 87 characters; a longer Authorization value is not read.
MAX_TOKEN_LENGTH = 256
#: Mixed into an app session's User-Agent binding (see the module docstring).
APP_BINDING = "authflow-app\x00"


class ClientKindMismatch(InvalidInput):
    """The request's client kind and its credentials disagree."""

    code = "client_kind_mismatch"


class CsrfRefused(InvalidInput):
    """The CSRF token is missing or wrong (a browser client sends it in ``X-CSRF-Token``)."""

    code = "csrf"

    def __init__(self) -> None:
        super().__init__(N_("This form has expired or did not come from this site. Please try again."))


@dataclass
class AppToken:
    """The :class:`~flask_authflow.sessions._interface.SessionCarrier` of an app request."""

    presented: str | None
    binding: str = APP_BINDING

    def issue(self, response: Response, value: str, expires_at: datetime) -> None:
        response.headers[TOKEN_HEADER] = value
        response.vary.add("Authorization")

    def withdraw(self, response: Response) -> None:
        response.headers[TOKEN_HEADER] = ""


def presented_token(req: Request) -> str | None:
    """The token of ``Authorization: Session <token>`` (``""`` when empty or too long), or
    ``None`` without one."""
    header = req.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != TOKEN_SCHEME.lower():
        return None
    return value.strip() if len(header) <= MAX_TOKEN_LENGTH else ""


def app_carrier(req: Request) -> AppToken | None:
    """The session interface's ``carrier_for``: an :class:`AppToken` for a request that
    declares ``Authflow-Client: app`` (on any route of the app, so that a mobile client
    calls the app's own views with its token), else ``None`` (the cookie)."""
    if req.headers.get(CLIENT_HEADER, "").strip().lower() != APP:
        return None
    return AppToken(presented=presented_token(req) or None)


def client_kind(allowed: tuple[str, ...] = KINDS) -> str:
    """The current request's client kind, checked: declared once, consistent with its
    credentials, allowed on the route, and (a browser changing something) with its CSRF
    token.

    :raises ClientKindMismatch: an unknown kind, a kind the route does not serve, an app
        request with a session cookie or a browser request with a session token.
    :raises CsrfRefused: a browser request other than GET without the session's token.
    """
    declared = request.headers.getlist(CLIENT_HEADER)
    kind = declared[0].strip().lower() if declared else BROWSER
    if len(declared) > 1 or kind not in KINDS:
        raise ClientKindMismatch(N_("Authflow-Client must be 'browser' or 'app'."))
    if kind not in allowed:
        raise ClientKindMismatch(N_("This route does not serve that kind of client."))
    cookie = get_state().session_interface.cookie_name
    if kind == APP and cookie in request.cookies:
        raise ClientKindMismatch(N_("An app request must not send the session cookie."))
    if kind == BROWSER and presented_token(request) is not None:
        raise ClientKindMismatch(N_("A browser request must not send a session token."))
    if kind == BROWSER and request.method not in ("GET", "HEAD", "OPTIONS") and not _csrf_passes():
        raise CsrfRefused()
    return kind


def _csrf_passes() -> bool:
    """The session's CSRF token came with the request (Flask-WTF's refusal, a
    ``BadRequest``, is a refusal here too: answered as this API's JSON)."""
    try:
        return csrf_valid()
    except BadRequest:
        return False
