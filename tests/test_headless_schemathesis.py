"""Schemathesis over the headless API of the reference app: every operation of the
generated OpenAPI document, called by an ``app`` client with its session token, by a
``browser`` client with its cookie and CSRF token, and by a guest, with bodies, paths and
headers generated from the document (valid ones and invalid ones).

Each answer is checked: no 5xx, a status the operation declares, a body and content type
its schema accepts. The run is in-process (WSGI, Schemathesis's Python API), bounded by a
number of examples per operation, and counts its requests (at least 2,000).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import schemathesis  # in the test lock: a missing Schemathesis fails, never skips
from flask import Flask
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from examples.reference.app import authflow, create_app
from flask_authflow._web.state import get_state

pytestmark = [
    pytest.mark.authflow_stores("app"),  # the reference app's own SQLite file and clock
    pytest.mark.slow,  # about 20 s of one core: in the whole suite, not in the fast loop
]

BASE = "/auth/api/v1"
#: Examples per operation and generation mode (valid data, then invalid data); each example
#: is sent three times (app, browser, guest).
EXAMPLES = {"positive": 12, "negative": 8}
MINIMUM_REQUESTS = 2000
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance, content_type_conformance]


def setup_address(count: int) -> dict[str, str]:
    """Each sign-in of the run's clients comes from a network of its own (loopback is a
    trusted proxy): neither the generated requests nor the run's own sign-ins throttle them."""
    return {"X-Forwarded-For": f"10.{count // 250}.{count % 250}.7"}


#: Sessions are bound to the User-Agent they signed in with: every request sends this one.
USER_AGENT = {"User-Agent": "authflow-schemathesis/1.0"}
USERS = {"app": ("appuser", "appuser-passphrase-one-2"), "browser": ("webuser", "webuser-passphrase-one-2")}


COOKIE = "authflow_session"
SIGN_INS = itertools.count()
#: kind -> the user id of its user (a generated change of username keeps the id).
USER_IDS: dict[str, str] = {}


def restore(app: Flask, kind: str) -> None:
    """Give the kind's user its username and password back: the generated requests include
    valid changes of both (a fresh sign-in allows them)."""
    username, password = USERS[kind]
    with app.app_context():
        get_state(app).backend.set_identifier("default", USER_IDS[kind], username)
        authflow.accounts.set_password(username, password)


@dataclass
class Client:
    """One signed-in client: its kind's headers and credential, kept across rotations."""

    app: Flask
    kind: str
    token: str | None = None
    cookie: str | None = None
    csrf: str | None = None
    sign_ins: int = 0

    def headers(self) -> dict[str, str]:
        if self.kind == "app":
            return {**USER_AGENT, "Authflow-Client": "app", "Authorization": f"Session {self.token}"}
        return {**USER_AGENT, "Authflow-Client": "browser", "X-CSRF-Token": self.csrf or ""}

    def cookies(self) -> dict[str, str]:
        return {COOKIE: self.cookie} if self.kind == "browser" and self.cookie else {}

    def _test_client(self) -> Any:
        client = self.app.test_client(use_cookies=self.kind == "browser")
        if self.kind == "browser" and self.cookie:
            client.set_cookie(COOKIE, self.cookie)
        return client

    def sign_in(self) -> None:
        username, password = USERS[self.kind]
        self.token = self.cookie = None
        client = self._test_client()
        headers = {**USER_AGENT, "Authflow-Client": self.kind, **setup_address(next(SIGN_INS))}
        state = client.get(f"{BASE}/session", headers=headers)
        if self.kind == "browser":
            headers["X-CSRF-Token"] = state.json["csrf_token"]
        answer = client.post(
            f"{BASE}/login/password", json={"username": username, "password": password}, headers=headers
        )
        if answer.status_code == 401:  # a generated request renamed the user or changed the password
            restore(self.app, self.kind)
            answer = client.post(
                f"{BASE}/login/password", json={"username": username, "password": password}, headers=headers
            )
        assert answer.status_code == 200 and answer.json["status"] == "authenticated", answer.json
        if self.kind == "app":
            self.token = answer.headers["Authflow-Session-Token"]
        else:
            cookie = client.get_cookie(COOKIE)
            assert cookie is not None
            self.cookie = cookie.value
        self.csrf = answer.json["session"]["csrf_token"]
        self.sign_ins += 1

    def follow(self, response: Any) -> None:
        """Keep the credential an answer handed out; sign in again when the session ended."""
        changed = False
        if self.kind == "app" and response.headers.get("authflow-session-token") is not None:
            self.token = response.headers["authflow-session-token"][0] or None
            changed = True
        for line in response.headers.get("set-cookie", []):
            name, _, rest = line.partition("=")
            if name == COOKIE:
                self.cookie, changed = rest.split(";", 1)[0] or None, True
        if changed or response.status_code in (400, 401):
            self.refresh()

    def refresh(self) -> None:
        """The session's state and CSRF token; a new sign-in when it is not signed in."""
        if (self.token if self.kind == "app" else self.cookie) is None:
            self.sign_in()
            return
        state = self._test_client().get(f"{BASE}/session", headers=self.headers())
        if state.status_code != 200 or state.json["state"] != "authenticated":
            self.sign_in()
            return
        self.csrf = state.json["csrf_token"]


@dataclass
class Tally:
    """What the run sent and what came back."""

    requests: int = 0
    operations: set[str] = field(default_factory=set)
    statuses: dict[int, int] = field(default_factory=dict)
    successes: dict[str, int] = field(default_factory=lambda: {"app": 0, "browser": 0, "guest": 0})

    def count(self, kind: str, status: int) -> None:
        self.requests += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.successes[kind] += 200 <= status < 300


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    folder: Path = tmp_path_factory.mktemp("schemathesis")
    app = create_app(
        {
            "TESTING": True,  # fast Argon2 parameters; an unexpected exception fails the run
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{folder / 'ref.db'}",
            "AUTHFLOW_HEADLESS": True,
            "AUTHFLOW_REGISTRATION": True,
            "AUTHFLOW_EXTERNAL_URL": "http://localhost",
            "AUTHFLOW_MAIL_OUTBOX": str(folder / "outbox"),
            "AUTHFLOW_WEBAUTHN_RP_ID": "localhost",
            "AUTHFLOW_WEBAUTHN_ORIGINS": ["http://localhost"],
            "AUTHFLOW_ARGON2_TIME_COST": 1,
            "AUTHFLOW_ARGON2_MEMORY_COST": 8,
            "AUTHFLOW_ARGON2_PARALLELISM": 1,
        },
        instance_path=str(folder / "instance"),
    )
    with app.app_context():
        for kind, (username, password) in USERS.items():
            USER_IDS[kind] = authflow.accounts.create(username, password).user_id
    yield app


def _run_operation(operation: Any, mode: Any, examples: int, call: Callable[[Any], None]) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        call(case)

    run()


def test_every_operation_for_both_kinds_of_client_and_a_guest(site: Flask) -> None:
    schema = schemathesis.openapi.from_wsgi(f"{BASE}/openapi.json", site)
    clients = [Client(site, "app"), Client(site, "browser")]
    for client in clients:
        client.sign_in()
    tally = Tally()

    def call(case: Any) -> None:
        guest = {**USER_AGENT, "Authflow-Client": "app" if tally.requests % 2 else "browser"}
        for client in (*clients, None):
            headers = {**(case.headers or {}), **(client.headers() if client else guest)}
            response = case.call(headers=headers, cookies=client.cookies() if client else None)
            tally.count(client.kind if client else "guest", response.status_code)
            case.validate_response(response, checks=CHECKS, headers=headers)
            if client is not None:
                client.follow(response)

    for result in schema.get_all_operations():
        operation = result.ok()
        tally.operations.add(operation.label)
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            _run_operation(operation, mode, EXAMPLES[mode.value], call)

    document = site.test_client().get(f"{BASE}/openapi.json").json
    declared = {f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item}
    assert tally.operations == declared
    assert tally.requests >= MINIMUM_REQUESTS, tally
    # The signed-in clients stayed signed in (or signed in again) and were answered, not
    # only refused: each of them had a 2xx answer from most operations.
    for kind in ("app", "browser"):
        assert tally.successes[kind] >= len(declared), (kind, tally)
