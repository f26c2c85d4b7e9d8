"""A scripted "mobile" client of flask-authflow's headless API: an ``app`` client, with a
session token in a header and **no cookie jar**.

What a native app does: it declares ``Authflow-Client: app``, keeps the token of the last
``Authflow-Session-Token`` answer header (a new one after each sign-in step: the session
id rotates as a browser's cookie would; an empty one when the session ended) and sends it
as ``Authorization: Session <token>``. It never needs a CSRF token (nothing a browser
sends on its own carries the token). Try it against ``app.py`` beside it::

    python examples/spa/mobile_client.py http://127.0.0.1:5000 alice

(it asks for the password and the code from the authenticator app).
"""

from __future__ import annotations

import getpass
import http.cookiejar
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

API = "/auth/api/v1"
CLIENT = {"Authflow-Client": "app"}
TOKEN_HEADER = "Authflow-Session-Token"


class NoCookies(http.cookiejar.DefaultCookiePolicy):
    """A cookie policy that accepts and returns no cookie at all."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


class Refused(Exception):
    """The API refused a request: its status and ``{"error", "message"}`` body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {body.get('error')}: {body.get('message')}")
        self.status = status
        self.body = body


@dataclass
class MobileClient:
    """One app install: its base URL, its session token, and what it saw (for the curious)."""

    base: str
    user_agent: str = "authflow-mobile-example/1.0"
    token: str | None = None
    #: every token the server handed out, in order (each rotation adds one; "" = ended)
    tokens: list[str] = field(default_factory=list)
    #: every ``Set-Cookie`` the server sent (an app client must never get one)
    cookies_offered: list[str] = field(default_factory=list)
    http: requests.Session = field(default_factory=requests.Session)

    def __post_init__(self) -> None:
        self.http.cookies.set_policy(NoCookies())
        self.http.headers.update({**CLIENT, "User-Agent": self.user_agent, "Accept": "application/json"})

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Session {self.token}"} if self.token else {}
        response = self.http.request(method, self.base + path, json=body, headers=headers, timeout=10)
        self.cookies_offered += response.raw.headers.getlist("Set-Cookie")
        if TOKEN_HEADER in response.headers:
            new = response.headers[TOKEN_HEADER]
            self.tokens.append(new)
            self.token = new or None
        answer: dict[str, Any] = response.json()
        if response.status_code >= 400:
            raise Refused(response.status_code, answer)
        return answer

    def login(self, username: str, password: str, code: Callable[[], str]) -> dict[str, Any]:
        """The password, then (when the account asks for it) a TOTP code from ``code()``."""
        step = self.call("POST", f"{API}/login/password", {"username": username, "password": password})
        if step["status"] == "factor_required":
            step = self.call("POST", f"{API}/login/factor", {"kind": "totp", "code": code()})
        if step["status"] != "authenticated":
            raise Refused(200, step)
        return step

    def session(self) -> dict[str, Any]:
        return self.call("GET", f"{API}/session")

    def notes(self) -> dict[str, Any]:
        """The app's own protected route, with the same token."""
        return self.call("GET", "/api/notes")

    def logout(self) -> None:
        self.call("POST", f"{API}/logout")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {argv[0]} BASE_URL USERNAME", file=sys.stderr)
        return 2
    client = MobileClient(argv[1].rstrip("/"))
    client.login(argv[2], getpass.getpass("Password: "), lambda: input("Code from your app: ").strip())
    print("signed in as", client.session()["user"]["identifier"])
    print("notes:", client.notes()["notes"])
    client.logout()
    print("signed out; state:", client.session()["state"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
