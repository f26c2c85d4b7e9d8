"""A real OpenID provider for the interop tests: panva's ``oidc-provider`` run by ``tests/interop/op.mjs``.

``oidc_op`` (session-scoped) starts ``node op.mjs`` on a free 127.0.0.1 port with one client
(``reference-app`` signs ID tokens with RS256, ``reference-app-es256`` with ES256,
``reference-app-ps256`` with PS256; ``reference-app-post`` uses client_secret_post and
``reference-app-special`` has :data:`SPECIAL_SECRET`), and a small
HTTP receiver on 127.0.0.1 that records the back-channel logout tokens the provider POSTs.
:func:`start_oidc_provider` starts another one with your own redirect and logout URIs (for an
app served on a real port). :func:`drive_login` and :func:`drive_logout` act as the browser with
plain ``requests``: they go through the provider's development login, consent and logout pages
and return the final redirect to the relying party without following it.

Under ``CI=true`` a missing ``node`` or npm package fails the tests (:func:`tests.parts.missing_part`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qsl, urljoin, urlsplit

import pytest
import requests
from flask import Flask, request
from werkzeug.serving import BaseWSGIServer, make_server

from tests.parts import free_port, missing_part, require_marker, wait_for_port

INTEROP = Path(__file__).parent / "interop"
OP_SCRIPT = INTEROP / "op.mjs"
CLIENT_ID = "reference-app"
ES256_CLIENT_ID = "reference-app-es256"
CLIENT_SECRET = "reference-app-secret-0123456789abcdef"
#: The secret of ``reference-app-special``: what client_secret_basic must form-urlencode.
SPECIAL_SECRET = "sp+ec%ial&sec=ret 0123456789abcdef"
MAX_STEPS = 12


def oidc_provider_ready() -> str | None:
    """Why the real provider cannot run here, or ``None`` when it can."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (INTEROP / "node_modules" / "oidc-provider" / "package.json").exists():
        return "npm package oidc-provider missing (run: cd tests/interop && npm ci)"
    if not (INTEROP / "node_modules" / "jose" / "package.json").exists():
        return "npm package jose missing (run: cd tests/interop && npm ci)"
    return None


@dataclass
class BackchannelReceiver:
    """An HTTP endpoint on 127.0.0.1 that records the logout tokens POSTed to it."""

    url: str
    server: BaseWSGIServer
    thread: threading.Thread
    tokens: list[str] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 5.0) -> list[str]:
        """The tokens received once there are at least ``count`` (or what came before ``timeout``)."""
        with self._cond:
            self._cond.wait_for(lambda: len(self.tokens) >= count, timeout=timeout)
            return list(self.tokens)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def start_backchannel_receiver() -> BackchannelReceiver:
    app = Flask("backchannel-receiver")
    holder: list[BackchannelReceiver] = []

    @app.post("/auth/backchannel-logout/op")
    def receive() -> tuple[str, int, dict[str, str]]:
        receiver = holder[0]
        token = request.form.get("logout_token", "")
        with receiver._cond:
            receiver.tokens.append(token)
            receiver._cond.notify_all()
        return "", 200, {"Cache-Control": "no-store"}

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    receiver = BackchannelReceiver(
        f"http://127.0.0.1:{server.port}/auth/backchannel-logout/op", server, thread
    )
    holder.append(receiver)
    thread.start()
    return receiver


@dataclass
class ServedApp:
    """A WSGI app served on 127.0.0.1 by a real HTTP server in a thread (for the provider to reach)."""

    url: str
    server: BaseWSGIServer
    thread: threading.Thread

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_app(app: Flask) -> ServedApp:
    """Serve ``app`` on a free 127.0.0.1 port; start the provider afterwards with the app's URLs."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return ServedApp(f"http://127.0.0.1:{server.port}", server, thread)


@dataclass
class OidcProviderProcess:
    """A running ``op.mjs``: its issuer, the client it knows and how to rotate its keys."""

    issuer: str
    port: int
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    redirect_uris: tuple[str, ...]
    post_logout_redirect_uris: tuple[str, ...]
    backchannel_logout_uri: str | None
    client_id: str = CLIENT_ID
    es256_client_id: str = ES256_CLIENT_ID
    client_secret: str = CLIENT_SECRET
    receiver: BackchannelReceiver | None = None

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    @property
    def redirect_uri(self) -> str:
        return self.redirect_uris[0]

    @property
    def post_logout_redirect_uri(self) -> str:
        return self.post_logout_redirect_uris[0]

    def discovery(self) -> dict[str, Any]:
        doc: dict[str, Any] = requests.get(self.discovery_url, timeout=5).json()
        return doc

    def rotate_keys(self, *, keep_old: bool = True) -> list[str]:
        """New RS256 and ES256 signing keys at the provider; returns the new signing kids."""
        resp = requests.post(
            f"{self.issuer}/__admin/rotate", params={"keep_old": "1" if keep_old else "0"}, timeout=10
        )
        resp.raise_for_status()
        signing: list[str] = resp.json()["signing"]
        return signing

    def output(self) -> str:
        """What the provider wrote to stderr so far (its warnings and errors)."""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.log.close()


def start_oidc_provider(
    redirect_uris: list[str],
    post_logout_redirect_uris: list[str],
    backchannel_logout_uri: str | None = None,
    *,
    port: int | None = None,
    keep_ssrf_guard: bool = False,
) -> OidcProviderProcess:
    """Start ``node op.mjs`` on 127.0.0.1 (a free port unless given) and wait until it listens."""
    require_marker("interop", "oidc-provider (Node)")
    reason = oidc_provider_ready()
    if reason is not None:
        missing_part(reason)
    chosen = port if port is not None else free_port()
    env = dict(os.environ)
    env.update(
        {
            "OP_CLIENT_ID": CLIENT_ID,
            "OP_CLIENT_SECRET": CLIENT_SECRET,
            "OP_SPECIAL_SECRET": SPECIAL_SECRET,
            "OP_REDIRECT_URIS": ",".join(redirect_uris),
            "OP_POST_LOGOUT_REDIRECT_URIS": ",".join(post_logout_redirect_uris),
            "OP_BACKCHANNEL_LOGOUT_URI": backchannel_logout_uri or "",
            "NODE_ENV": "test",
            "OP_KEEP_SSRF_GUARD": "1" if keep_ssrf_guard else "0",
        }
    )
    log = tempfile.TemporaryFile()  # a file, not a pipe: a full pipe would block node
    node = shutil.which("node")
    assert node is not None
    process = subprocess.Popen(
        [node, str(OP_SCRIPT), str(chosen)],
        cwd=INTEROP,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        wait_for_port(chosen, timeout=20)
    except TimeoutError:
        process.kill()
        process.wait(timeout=5)
        log.seek(0)
        err = log.read().decode(errors="replace")
        log.close()
        pytest.fail(f"oidc-provider did not start: {err[-2000:]}", pytrace=False)
    return OidcProviderProcess(
        issuer=f"http://127.0.0.1:{chosen}",
        port=chosen,
        process=process,
        log=log,
        redirect_uris=tuple(redirect_uris),
        post_logout_redirect_uris=tuple(post_logout_redirect_uris),
        backchannel_logout_uri=backchannel_logout_uri,
    )


@pytest.fixture
def oidc_op(request: pytest.FixtureRequest) -> OidcProviderProcess:
    """The worker's ``oidc-provider``, for a test marked ``interop`` (any other fails)."""
    require_marker("interop", "the oidc_op fixture")
    op: OidcProviderProcess = request.getfixturevalue("oidc_op_process")
    return op


@pytest.fixture(scope="session")
def oidc_op_process() -> Iterator[OidcProviderProcess]:
    """``oidc-provider`` on 127.0.0.1 with a back-channel receiver; the RP callback needs no listener."""
    reason = oidc_provider_ready()
    if reason is not None:
        missing_part(reason)
    receiver = start_backchannel_receiver()
    rp = f"http://127.0.0.1:{free_port()}"
    op = start_oidc_provider([f"{rp}/auth/callback/op"], [f"{rp}/signed-out"], receiver.url)
    op.receiver = receiver
    try:
        yield op
    finally:
        op.stop()
        receiver.stop()


# -- the browser ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HtmlForm:
    action: str
    method: str
    form_id: str | None
    fields: dict[str, str]
    inputs: tuple[str, ...]


class _FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []
        self.buttons: list[dict[str, str]] = []
        self._current: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {k: v or "" for k, v in attrs}
        if tag == "form":
            self._current = {"attrs": attr, "fields": {}, "inputs": []}
            self.forms.append(self._current)
        elif tag == "input" and self._current is not None:
            name = attr.get("name")
            if name:
                self._current["inputs"].append(name)
                if attr.get("type") == "hidden" or "value" in attr:
                    self._current["fields"][name] = attr.get("value", "")
        elif tag == "button" and attr.get("name"):
            self.buttons.append(attr)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


def parse_forms(html: str, base_url: str) -> list[HtmlForm]:
    """The forms of a page, with absolute actions; buttons with a ``form=`` attribute join their form."""
    parser = _FormParser()
    parser.feed(html)
    forms = []
    for raw in parser.forms:
        attrs = raw["attrs"]
        fields = dict(raw["fields"])
        form_id = attrs.get("id")
        for button in parser.buttons:
            if form_id and button.get("form") == form_id and button.get("value"):
                fields.setdefault(button["name"], button["value"])
        forms.append(
            HtmlForm(
                action=urljoin(base_url, attrs.get("action") or base_url),
                method=(attrs.get("method") or "get").lower(),
                form_id=form_id,
                fields=fields,
                inputs=tuple(raw["inputs"]),
            )
        )
    return forms


@dataclass(frozen=True)
class FinalRedirect:
    """The redirect that leaves the provider for the relying party (not followed)."""

    url: str
    params: dict[str, str]

    @property
    def code(self) -> str:
        return self.params["code"]

    @property
    def state(self) -> str | None:
        return self.params.get("state")

    @property
    def iss(self) -> str | None:
        return self.params.get("iss")


def _same_origin(url: str, origin: str) -> bool:
    a, b = urlsplit(url), urlsplit(origin)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc)


def _browse(start_url: str, issuer: str, session: requests.Session, fill: dict[str, str]) -> FinalRedirect:
    """Follow the provider's pages, submitting each form, until a redirect leaves ``issuer``."""
    response = session.get(start_url, allow_redirects=False, timeout=10)
    for _ in range(MAX_STEPS):
        if response.is_redirect:
            target = urljoin(response.url, response.headers["Location"])
            if not _same_origin(target, issuer):
                return FinalRedirect(target, dict(parse_qsl(urlsplit(target).query, keep_blank_values=True)))
            response = session.get(target, allow_redirects=False, timeout=10)
            continue
        if response.status_code != 200:
            raise AssertionError(f"provider answered {response.status_code}: {response.text[:500]}")
        forms = [f for f in parse_forms(response.text, response.url) if f.method == "post"]
        if not forms:
            raise AssertionError(f"no form to submit on {response.url}: {response.text[:500]}")
        form = forms[0]
        data = dict(form.fields)
        for name in form.inputs:
            if name in fill:
                data[name] = fill[name]
        response = session.post(form.action, data=data, allow_redirects=False, timeout=10)
    raise AssertionError(f"no redirect back to the relying party after {MAX_STEPS} steps")


def drive_login(
    authorize_url: str, login: str, session: requests.Session | None = None, *, issuer: str | None = None
) -> FinalRedirect:
    """Act as the browser: authorize, dev login (``login``, any password), consent; return the callback."""
    op_origin = issuer if issuer is not None else authorize_url
    browser = session if session is not None else requests.Session()
    return _browse(authorize_url, op_origin, browser, {"login": login, "password": "any-password"})


def drive_logout(
    end_session_url: str, session: requests.Session, *, issuer: str | None = None
) -> FinalRedirect:
    """Act as the browser on the provider's logout confirmation ("Yes, sign me out"); return the redirect."""
    op_origin = issuer if issuer is not None else end_session_url
    return _browse(end_session_url, op_origin, session, {})


def wait_until(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())
