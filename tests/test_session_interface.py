"""AuthFlowSessionInterface: cookies, signing-key rotation, fixation, binding, expiry, failures."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask, flash, get_flashed_messages, session
from flask.testing import FlaskClient
from itsdangerous import Signer, want_bytes
from werkzeug.http import parse_date
from werkzeug.test import TestResponse

from flask_authflow._clock import MockClock
from flask_authflow._core.crypto import derive_key
from flask_authflow._core.session import (
    AuthSession,
    AuthState,
    SessionRecord,
    begin_flow,
    new_guest_record,
    pass_factor,
    start_login,
)
from flask_authflow.errors import ConfigurationError, StoreUnavailable
from flask_authflow.sessions._interface import (
    FINGERPRINT_PURPOSE,
    MAX_COOKIE_LENGTH,
    AuthFlowSessionInterface,
    RequestSession,
)
from flask_authflow.sessions._stores import MemorySessionStore

KEY = b"K" * 32
OLD_KEY = b"O" * 32
OTHER_KEY = b"X" * 32
UA = "Mozilla/5.0 (X11; Linux x86_64) TestBrowser/1.0"
COOKIE = "authflow_session"


class SpyStore(MemorySessionStore):
    """A memory store that counts writes and can be switched off."""

    def __init__(self, clock: MockClock) -> None:
        super().__init__(clock=clock)
        self.saves = 0
        self.touches = 0
        self.deletes: list[str] = []
        self.down = False
        self.down_on_save = False

    def load(self, sid: str) -> SessionRecord | None:
        if self.down:
            raise StoreUnavailable()
        return super().load(sid)

    def save(
        self,
        record: SessionRecord,
        expires_at: datetime,
        *,
        replaces: Sequence[str] = (),
        existing: bool = False,
    ) -> bool:
        if self.down or self.down_on_save:
            raise StoreUnavailable()
        self.saves += 1
        self.deletes.extend(replaces)  # deleted in the same atomic step as the save
        return super().save(record, expires_at, replaces=replaces, existing=existing)

    def touch(self, record: SessionRecord, expires_at: datetime) -> bool:
        if self.down or self.down_on_save:
            raise StoreUnavailable()
        self.touches += 1
        return super().touch(record, expires_at)

    def delete(self, sid: str) -> None:
        if self.down or self.down_on_save:
            raise StoreUnavailable()
        self.deletes.append(sid)
        super().delete(sid)


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def store(clock: MockClock) -> SpyStore:
    return SpyStore(clock)


def current() -> AuthSession:
    """``flask.session``, typed."""
    value = session._get_current_object()  # type: ignore[attr-defined]
    assert isinstance(value, AuthSession)
    return value


def make_app(interface: AuthFlowSessionInterface, clock: MockClock) -> Flask:
    app = Flask(__name__)
    app.session_interface = interface

    @app.errorhandler(StoreUnavailable)
    def unavailable(exc: StoreUnavailable) -> tuple[dict[str, str], int]:
        return exc.to_dict(), exc.status

    @app.get("/")
    def whoami() -> dict[str, Any]:
        assert isinstance(session, AuthSession)
        return {
            "state": session.state.value,
            "user": session.user_id,
            "mismatch": session.binding_mismatch,
            "new": session.new,
            "custom": dict(session),
        }

    @app.get("/plain")
    def plain() -> str:
        return "no session here"

    @app.post("/login")
    def login() -> str:
        user = "alice"
        current().transition(
            lambda r: start_login(r, tenant="acme", user_id=user, factors=["password"], now=clock.now())
        )
        current().transition(lambda r: pass_factor(r, "password", now=clock.now()))
        return "ok"

    @app.post("/login/start")
    def login_start() -> str:
        current().transition(
            lambda r: start_login(
                r, tenant="acme", user_id="alice", factors=["password", "totp"], now=clock.now()
            )
        )
        return "ok"

    @app.post("/login/factor/<factor>")
    def login_factor(factor: str) -> str:
        current().transition(lambda r: pass_factor(r, factor, now=clock.now()))
        return "ok"

    @app.post("/logout")
    def logout() -> str:
        session.clear()
        return "ok"

    @app.post("/set/<key>/<value>")
    def set_value(key: str, value: str) -> str:
        session[key] = value
        return "ok"

    @app.post("/pop/<key>")
    def pop_value(key: str) -> str:
        session.pop(key, None)
        return "ok"

    @app.post("/cart")
    def cart() -> str:
        session["cart"] = []
        return "ok"

    @app.post("/grow")
    def grow() -> str:
        session["cart"].append("x" * (70 * 1024))  # nested: bypasses the assignment check
        session.modified = True
        return "ok"

    @app.post("/login-and-grow")
    def login_and_grow() -> str:
        login()
        session["cart"].append("x" * (70 * 1024))
        return "ok"

    @app.post("/flow")
    def flow() -> str:
        current().transition(lambda r: begin_flow(r, {"state": "s", "nonce": "n"}))
        return "ok"

    @app.post("/flash")
    def flash_message() -> str:
        flash("hello", "info")
        return "ok"

    @app.get("/flashes")
    def flashes() -> list[Any]:
        return [list(item) for item in get_flashed_messages(with_categories=True)]

    return app


@pytest.fixture
def interface(store: SpyStore, clock: MockClock) -> AuthFlowSessionInterface:
    return AuthFlowSessionInterface(store, KEY, clock=clock)


@pytest.fixture
def app(interface: AuthFlowSessionInterface, clock: MockClock) -> Flask:
    return make_app(interface, clock)


def client_for(app: Flask, ua: str | None = UA) -> FlaskClient:
    client = app.test_client()
    if ua is not None:
        client.environ_base["HTTP_USER_AGENT"] = ua
    return client


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return client_for(app)


def cookie_value(client: FlaskClient) -> str:
    cookie = client.get_cookie(COOKIE)
    assert cookie is not None
    return cookie.value


def sid_of(value: str) -> str:
    return value.rpartition(".")[0]


def set_cookies(response: TestResponse) -> list[str]:
    return response.headers.getlist("Set-Cookie")


def deletes_the_cookie(header: str) -> bool:
    """``header`` (a Set-Cookie) empties the session cookie and has the browser drop it now:
    ``Max-Age=0`` or an ``Expires`` in the past (which of them Werkzeug writes, and how it
    spells the date, is its own)."""
    name_value, *attributes = (part.strip() for part in header.split(";"))
    attrs = {part.partition("=")[0].lower(): part.partition("=")[2] for part in attributes}
    expires = parse_date(attrs.get("expires"))
    gone = attrs.get("max-age") == "0" or (expires is not None and expires < datetime.now(UTC))
    return name_value == f"{COOKIE}=" and gone


def state(client: FlaskClient, **kwargs: Any) -> dict[str, Any]:
    response = client.get("/", **kwargs)
    assert response.status_code == 200
    body = response.get_json()
    assert isinstance(body, dict)
    return body


def raw_get(app: Flask, cookie: str, ua: str | None = UA) -> TestResponse:
    """A request carrying exactly this Cookie header (no client cookie jar)."""
    client = app.test_client(use_cookies=False)
    headers = {"Cookie": f"{COOKIE}={cookie}"}
    if ua is not None:
        headers["User-Agent"] = ua
    return client.get("/", headers=headers)


def logged_in(app: Flask) -> FlaskClient:
    client = client_for(app)
    assert client.post("/login").status_code == 200
    assert state(client)["state"] == "authenticated"
    return client


# --- cookie attributes ----------------------------------------------------------------------------


def test_session_is_an_auth_session(app: Flask) -> None:
    with app.test_request_context("/"):
        assert isinstance(session._get_current_object(), RequestSession)  # type: ignore[attr-defined]


def test_login_cookie_attributes(client: FlaskClient, clock: MockClock) -> None:
    response = client.post("/login")
    (header,) = set_cookies(response)
    parts = [p.strip() for p in header.split(";")]
    name, _, value = parts[0].partition("=")
    assert name == COOKIE
    assert len(value) == 43 + 1 + 43
    attrs = {p.split("=")[0].lower(): p.partition("=")[2] for p in parts[1:]}
    assert "httponly" in attrs
    assert "secure" in attrs
    assert attrs["samesite"] == "Lax"
    assert attrs["path"] == "/"
    assert "domain" not in attrs
    assert parse_date(attrs["expires"]) == clock.now() + timedelta(hours=1)  # idle timeout first
    assert not deletes_the_cookie(header)


def test_cookie_expires_at_the_absolute_ttl_when_it_comes_first(store: SpyStore, clock: MockClock) -> None:
    interface = AuthFlowSessionInterface(store, KEY, clock=clock, ttl=timedelta(minutes=30))
    response = client_for(make_app(interface, clock)).post("/login")
    assert (
        f"Expires={(clock.now() + timedelta(minutes=30)).strftime('%a, %d %b %Y %H:%M:%S GMT')}"
        in (set_cookies(response)[0])
    )


def test_cookie_options(store: SpyStore, clock: MockClock) -> None:
    interface = (
        AuthFlowSessionInterface(
            store,
            KEY,
            clock=clock,
            cookie_name="sid",
            samesite="Strict",
            cookie_domain="example.org",
            cookie_path="/app",
        )
    ).with_secure(False)
    response = client_for(make_app(interface, clock)).post("/login")
    (header,) = set_cookies(response)
    assert header.startswith("sid=")
    assert "SameSite=Strict" in header
    assert "Domain=example.org" in header
    assert "Path=/app" in header
    assert "HttpOnly" in header
    assert "Secure" not in header


def test_samesite_none_needs_secure(store: SpyStore) -> None:
    AuthFlowSessionInterface(store, KEY, samesite="None")
    with pytest.raises(ConfigurationError):
        AuthFlowSessionInterface(store, KEY, samesite="None", secure=False)
    with pytest.raises(ConfigurationError):
        AuthFlowSessionInterface(store, KEY, samesite="none-of-these")


@pytest.mark.parametrize("key", [b"", b"k" * 16, b"k" * 31, "k" * 32])
def test_short_or_non_bytes_signing_key_refused(store: SpyStore, key: Any) -> None:
    with pytest.raises(ConfigurationError):
        AuthFlowSessionInterface(store, key)
    with pytest.raises(ConfigurationError):
        AuthFlowSessionInterface(store, KEY, previous_signing_keys=[key])
    with pytest.raises(ConfigurationError):
        AuthFlowSessionInterface(store, KEY).with_previous_signing_key(key)


def test_longer_signing_key_accepted(store: SpyStore) -> None:
    AuthFlowSessionInterface(store, b"k" * 64)


@pytest.mark.parametrize(
    "options",
    [
        {"ttl": timedelta(0)},
        {"ttl": timedelta(seconds=-1)},
        {"idle_timeout": timedelta(0)},
        {"touch_interval": timedelta(hours=1)},
        {"touch_interval": timedelta(seconds=-1)},
        {"cookie_name": ""},
        {"cookie_name": "bad name;"},
        {"custom_limit": 0},
    ],
)
def test_unsafe_options_refused(store: SpyStore, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        AuthFlowSessionInterface(store, KEY, **options)


def test_builders_return_new_instances(store: SpyStore, clock: MockClock) -> None:
    base = AuthFlowSessionInterface(store, KEY)
    assert base.touch_interval == timedelta(minutes=6)
    changed = (
        base.with_ttl(timedelta(hours=2))
        .with_idle_timeout(timedelta(minutes=20))
        .with_secure(False)
        .with_previous_signing_key(OLD_KEY)
        .with_clock(clock)
    )
    assert changed is not base
    assert (changed.ttl, changed.idle_timeout, changed.secure) == (
        timedelta(hours=2),
        timedelta(minutes=20),
        False,
    )
    assert changed.touch_interval == timedelta(minutes=2)  # the default follows the idle timeout
    assert (base.ttl, base.idle_timeout, base.secure) == (timedelta(hours=12), timedelta(hours=1), True)
    assert changed.store is store


def test_repr_has_no_key(interface: AuthFlowSessionInterface) -> None:
    text = repr(interface.with_previous_signing_key(OLD_KEY))
    for key in (KEY, OLD_KEY):
        assert repr(key) not in text and key.hex() not in text and key.decode() not in text
    assert "previous_keys=1" in text


# --- when nothing changes, nothing is written -----------------------------------------------------


def test_guest_without_data_sets_no_cookie_and_stores_nothing(client: FlaskClient, store: SpyStore) -> None:
    response = client.get("/")
    assert response.get_json()["state"] == "guest"
    assert set_cookies(response) == []
    assert store.saves == 0 and store.count() == 0


def test_unmodified_session_sets_no_cookie_and_writes_nothing(app: Flask, store: SpyStore) -> None:
    client = logged_in(app)
    saves = store.saves
    response = client.get("/")
    assert response.get_json()["state"] == "authenticated"
    assert set_cookies(response) == []
    assert store.saves == saves


def test_vary_cookie_only_when_the_session_is_used(app: Flask) -> None:
    client = logged_in(app)
    assert "Cookie" in client.get("/").vary
    assert "Cookie" not in client.get("/plain").vary
    assert "Cookie" in client_for(app).get("/").vary  # a guest's view varies too


def test_modified_session_writes_and_sets_cookie(client: FlaskClient, store: SpyStore) -> None:
    response = client.post("/set/lang/fr")
    assert len(set_cookies(response)) == 1
    assert store.saves == 1
    assert state(client)["custom"] == {"lang": "fr"}
    assert state(client)["new"] is False


def test_flashed_messages_round_trip(client: FlaskClient, store: SpyStore) -> None:
    client.post("/flash")
    assert client.get("/flashes").get_json() == [["info", "hello"]]
    # Consuming the last message leaves an empty guest: row and cookie go away.
    assert client.get_cookie(COOKIE) is None
    assert store.count() == 0
    assert client.get("/flashes").get_json() == []


def test_guest_emptied_of_data_is_deleted(client: FlaskClient, store: SpyStore) -> None:
    client.post("/set/k/v")
    sid = sid_of(cookie_value(client))
    response = client.post("/pop/k")
    (header,) = set_cookies(response)
    assert deletes_the_cookie(header), header
    assert sid in store.deletes
    assert store.count() == 0


def test_guest_with_a_flow_is_stored(client: FlaskClient, store: SpyStore) -> None:
    client.post("/flow")
    assert store.count() == 1
    record = store.load(sid_of(cookie_value(client)))
    assert record is not None and record.flow == {"state": "s", "nonce": "n"}


# --- tampered cookies -----------------------------------------------------------------------------


def _flip(text: str, index: int) -> str:
    char = text[index]
    return text[:index] + ("A" if char != "A" else "B") + text[index + 1 :]


def _signed(key: bytes, value: str, **options: Any) -> str:
    signer = Signer(
        key,
        **{"salt": b"authflow.session", "key_derivation": "hmac", "digest_method": hashlib.sha256, **options},
    )
    return signer.sign(value).decode()


TAMPERED: dict[str, Callable[[str], str]] = {
    "flipped-signature-char": lambda v: _flip(v, -5),
    "flipped-last-signature-char": lambda v: _flip(v, -1),
    "flipped-sid-char": lambda v: _flip(v, 3),
    "truncated": lambda v: v[:-1],
    "signature-only-half": lambda v: v[: len(v) - 20],
    "sid-without-signature": lambda v: sid_of(v),
    "sid-with-empty-signature": lambda v: sid_of(v) + ".",
    "empty": lambda v: "",
    "only-dot": lambda v: ".",
    "garbage": lambda v: "garbage!!",
    "extra-dot-segment": lambda v: v + ".AAAA",
    "prefix-dot-segment": lambda v: "x." + v,
    "non-ascii": lambda v: sid_of(v)[:-1] + "é." + v.rpartition(".")[2],
    "non-ascii-signature": lambda v: sid_of(v) + "." + "é" * 43,
    "ten-kb": lambda v: v + "A" * 10 * 1024,
    "ten-kb-valid-signature": lambda v: _signed(KEY, "A" * 10 * 1024),
    "valid-signature-unknown-sid": lambda v: _signed(KEY, "U" * 43),
    "valid-signature-odd-sid": lambda v: _signed(KEY, "../etc/passwd"),
    "wrong-salt": lambda v: _signed(KEY, sid_of(v), salt=b"itsdangerous.Signer"),
    "wrong-key-derivation": lambda v: _signed(KEY, sid_of(v), key_derivation="django-concat"),
    "wrong-digest": lambda v: _signed(KEY, sid_of(v), digest_method=hashlib.sha1),
    "signed-by-removed-previous-key": lambda v: _signed(OLD_KEY, sid_of(v)),
    "signed-by-unknown-key": lambda v: _signed(OTHER_KEY, sid_of(v)),
    "base64-garbage-signature": lambda v: sid_of(v) + ".!!!!",
}


def test_the_untampered_cookie_is_accepted(app: Flask) -> None:
    value = cookie_value(logged_in(app))
    assert raw_get(app, value).get_json()["state"] == "authenticated"


@pytest.mark.parametrize("name", sorted(TAMPERED))
def test_tampered_cookie_gives_a_guest(app: Flask, store: SpyStore, name: str) -> None:
    value = cookie_value(logged_in(app))
    bad = TAMPERED[name](value)
    assert bad != value
    saves = store.saves
    response = raw_get(app, bad)
    assert response.status_code == 200
    body = response.get_json()
    assert body["state"] == "guest"
    assert body["user"] is None
    assert body["new"] is True
    assert set_cookies(response) == []  # an unread cookie is left alone; nothing written
    assert store.saves == saves
    # the real session is untouched
    assert raw_get(app, value).get_json()["state"] == "authenticated"


def test_tampered_cookie_on_a_modifying_request_gets_a_fresh_session(app: Flask) -> None:
    value = cookie_value(logged_in(app))
    client = app.test_client(use_cookies=False)
    response = client.post("/set/k/v", headers={"Cookie": f"{COOKIE}={_flip(value, -5)}", "User-Agent": UA})
    (header,) = set_cookies(response)
    new_value = header.split(";")[0].partition("=")[2]
    assert sid_of(new_value) != sid_of(value)
    assert raw_get(app, new_value).get_json() == {
        "state": "guest",
        "user": None,
        "mismatch": False,
        "new": False,
        "custom": {"k": "v"},
    }


def _guest_answer(response: TestResponse) -> bool:
    return response.get_json() == {
        "state": "guest",
        "user": None,
        "mismatch": False,
        "new": True,
        "custom": {},
    }


@pytest.mark.parametrize("name", ["flipped-signature-char", "signed-by-unknown-key", "flipped-sid-char"])
def test_a_forged_cookie_is_refused_on_every_request(app: Flask, store: SpyStore, name: str) -> None:
    genuine = cookie_value(logged_in(app))
    assert raw_get(app, genuine).get_json()["state"] == "authenticated"
    forged = TAMPERED[name](genuine)
    saves = store.saves
    for _ in range(3):
        response = raw_get(app, forged)
        assert _guest_answer(response) and set_cookies(response) == []
        assert raw_get(app, genuine).get_json()["state"] == "authenticated"
    assert store.saves == saves


def test_oversized_and_non_ascii_cookies_are_refused_unverified(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    genuine = cookie_value(logged_in(app))
    verified: list[bytes] = []
    real = Signer.get_signature

    def counting(self: Signer, value: str | bytes) -> bytes:
        verified.append(want_bytes(value))
        return real(self, value)

    refused = [
        genuine + "A" * (MAX_COOKIE_LENGTH - len(genuine) + 1),  # one character too long
        _signed(KEY, "A" * MAX_COOKIE_LENGTH),  # a valid signature, too long
        sid_of(genuine)[:-1] + "é." + genuine.rpartition(".")[2],
        sid_of(genuine) + "." + "é" * 43,
    ]
    monkeypatch.setattr(Signer, "get_signature", counting)  # after the test's own signing
    for cookie in refused:
        assert _guest_answer(raw_get(app, cookie))
    assert verified == []  # refused unread: no HMAC
    assert raw_get(app, genuine).get_json()["state"] == "authenticated"
    assert verified == [sid_of(genuine).encode()]


@pytest.mark.parametrize(
    "header",
    [
        "other=1; {name}={value}; more=2",
        "{name}={value};other=1",
        '{name}="{value}"',  # quoted: Werkzeug unquotes it
        "{name}={value}; {name}=second",  # duplicates: the first, as Werkzeug answers
        "x{name}=junk; {name}={value}",  # another cookie whose name contains ours
    ],
)
def test_the_cookie_is_the_one_werkzeug_parses(app: Flask, header: str) -> None:
    value = cookie_value(logged_in(app))
    client = app.test_client(use_cookies=False)
    response = client.get("/", headers={"Cookie": header.format(name=COOKIE, value=value), "User-Agent": UA})
    assert response.get_json()["state"] == "authenticated"


@pytest.mark.parametrize("header", ["x{name}={value}", "{name}2={value}", "other={name}", "{name}="])
def test_a_cookie_that_is_not_ours_is_not_read(app: Flask, header: str) -> None:
    value = cookie_value(logged_in(app))
    client = app.test_client(use_cookies=False)
    response = client.get("/", headers={"Cookie": header.format(name=COOKIE, value=value), "User-Agent": UA})
    assert response.get_json()["state"] == "guest"


@pytest.mark.parametrize("ua", [UA, "", "Agent/1.0 (é; ☃)", "lone \udcff surrogate", "A" * 4096])
def test_a_fingerprint_is_the_hmac_of_the_user_agent(interface: AuthFlowSessionInterface, ua: str) -> None:
    fingerprint_key = derive_key(KEY, FINGERPRINT_PURPOSE)
    expected = hmac.digest(fingerprint_key, ua.encode("utf-8", "surrogatepass"), "sha256").hex()
    assert interface.fingerprint(ua) == expected
    rotated = AuthFlowSessionInterface(MemorySessionStore(), OLD_KEY, previous_signing_keys=[KEY])
    assert rotated.fingerprint(ua) != expected  # per signing key


def test_a_long_user_agent_binds_the_session(store: SpyStore, clock: MockClock) -> None:
    app = make_app(AuthFlowSessionInterface(store, KEY, clock=clock), clock)
    long_ua = "L" * 4096
    client = client_for(app, long_ua)
    assert client.post("/login").status_code == 200
    value = cookie_value(client)
    for _ in range(2):
        assert raw_get(app, value, ua=long_ua).get_json()["state"] == "authenticated"
        mismatch = raw_get(app, value, ua=long_ua[:-1] + "M").get_json()
        assert mismatch["state"] == "guest" and mismatch["mismatch"] is True


def test_a_session_deleted_elsewhere_is_a_guest_at_the_next_request(app: Flask, store: SpyStore) -> None:
    value = cookie_value(logged_in(app))
    assert raw_get(app, value).get_json()["state"] == "authenticated"
    store.delete(sid_of(value))  # a logout on another device
    for _ in range(2):
        answer = raw_get(app, value).get_json()
        assert answer["state"] == "guest" and answer["user"] is None and answer["new"] is True
    assert store.load(sid_of(value)) is None  # never written back


# --- signing-key rotation -------------------------------------------------------------------------


def test_previous_key_verifies_and_response_resigns(store: SpyStore, clock: MockClock) -> None:
    old_app = make_app(AuthFlowSessionInterface(store, OLD_KEY, clock=clock), clock)
    old_value = cookie_value(logged_in(old_app))

    rotated = AuthFlowSessionInterface(store, KEY, clock=clock).with_previous_signing_key(OLD_KEY)
    new_app = make_app(rotated, clock)
    response = raw_get(new_app, old_value)
    assert response.get_json()["state"] == "authenticated"
    (header,) = set_cookies(response)
    new_value = header.split(";")[0].partition("=")[2]
    assert sid_of(new_value) == sid_of(old_value)  # same session, new signature
    assert new_value == _signed(KEY, sid_of(old_value))
    assert "HttpOnly" in header and "Secure" in header

    # The re-signed cookie works without the previous key, and is not re-signed again.
    current_only = make_app(AuthFlowSessionInterface(store, KEY, clock=clock), clock)
    response = raw_get(current_only, new_value)
    assert response.get_json()["state"] == "authenticated"
    assert set_cookies(response) == []
    # The binding survived the rotation: another User-Agent is still refused.
    assert raw_get(current_only, new_value, ua="Other/1.0").get_json()["state"] == "guest"
    # ...and the old cookie dies once the previous key is removed.
    assert raw_get(current_only, old_value).get_json()["state"] == "guest"


def test_the_old_cookie_of_a_session_already_rebound_still_works(store: SpyStore, clock: MockClock) -> None:
    """Requests sent in parallel right after a signing-key rotation all carry the old
    cookie: the first re-binds the record under the current key's fingerprint, and the
    others are the same browser, not a stolen cookie."""
    old_value = cookie_value(
        logged_in(make_app(AuthFlowSessionInterface(store, OLD_KEY, clock=clock), clock))
    )
    rotated = make_app(
        AuthFlowSessionInterface(store, KEY, clock=clock, previous_signing_keys=[OLD_KEY]), clock
    )
    first = raw_get(rotated, old_value)  # re-binds and re-signs
    assert first.get_json()["state"] == "authenticated"
    assert set_cookies(first) != []
    saves = store.saves
    late = raw_get(rotated, old_value)  # in flight with the old cookie
    assert late.get_json() == {**late.get_json(), "state": "authenticated", "mismatch": False}
    (header,) = set_cookies(late)  # re-signed for this browser too
    assert header.split(";")[0].partition("=")[2] == _signed(KEY, sid_of(old_value))
    assert store.saves == saves  # already bound under the current key: nothing to write
    # Another User-Agent is refused with the old cookie, before and after the re-binding.
    refused = raw_get(rotated, old_value, ua="Other/1.0").get_json()
    assert refused["state"] == "guest" and refused["mismatch"] is True


def test_previous_key_with_other_user_agent_is_refused(store: SpyStore, clock: MockClock) -> None:
    old_value = cookie_value(
        logged_in(make_app(AuthFlowSessionInterface(store, OLD_KEY, clock=clock), clock))
    )
    rotated = make_app(
        AuthFlowSessionInterface(store, KEY, clock=clock, previous_signing_keys=[OLD_KEY]), clock
    )
    response = raw_get(rotated, old_value, ua="Other/1.0")
    assert response.get_json()["state"] == "guest"
    assert response.get_json()["mismatch"] is True
    assert set_cookies(response) == []


def test_changed_signing_key_ends_every_session(store: SpyStore, clock: MockClock) -> None:
    value = cookie_value(logged_in(make_app(AuthFlowSessionInterface(store, OLD_KEY, clock=clock), clock)))
    other = make_app(AuthFlowSessionInterface(store, KEY, clock=clock), clock)
    assert raw_get(other, value).get_json()["state"] == "guest"


# --- fixation, logout, replay ---------------------------------------------------------------------


def test_login_rotates_the_id_and_kills_the_pre_login_cookie(
    client: FlaskClient, app: Flask, store: SpyStore
) -> None:
    client.post("/set/lang/fr")  # a stored guest session: the cookie an attacker could plant
    pre_login = cookie_value(client)
    client.post("/login")
    post_login = cookie_value(client)
    assert sid_of(pre_login) != sid_of(post_login)
    assert sid_of(pre_login) in store.deletes
    assert store.load(sid_of(pre_login)) is None
    assert state(client)["state"] == "authenticated"
    assert state(client)["custom"] == {"lang": "fr"}
    replay = raw_get(app, pre_login).get_json()
    assert replay["state"] == "guest" and replay["custom"] == {}


def test_planted_cookie_does_not_follow_the_victim_into_login(app: Flask) -> None:
    attacker = client_for(app)
    attacker.post("/set/x/y")
    planted = cookie_value(attacker)
    victim = app.test_client(use_cookies=False)
    response = victim.post("/login", headers={"Cookie": f"{COOKIE}={planted}", "User-Agent": UA})
    (header,) = set_cookies(response)
    victim_value = header.split(";")[0].partition("=")[2]
    assert sid_of(victim_value) != sid_of(planted)
    assert raw_get(app, planted).get_json()["state"] == "guest"
    assert raw_get(app, victim_value).get_json()["state"] == "authenticated"


def test_every_factor_rotates_the_id(client: FlaskClient, app: Flask) -> None:
    seen: list[str] = []
    for path in ("/login/start", "/login/factor/password", "/login/factor/totp"):
        assert client.post(path).status_code == 200
        seen.append(cookie_value(client))
        if path != "/login/factor/totp":
            assert state(client)["state"] == "authenticating"
    assert len({sid_of(v) for v in seen}) == 3
    assert state(client)["state"] == "authenticated"
    for old in seen[:-1]:
        assert raw_get(app, old).get_json()["state"] == "guest"


def test_logout_clears_the_cookie_and_the_old_cookie_is_dead(app: Flask, store: SpyStore) -> None:
    client = logged_in(app)
    before = cookie_value(client)
    response = client.post("/logout")
    (header,) = set_cookies(response)
    assert deletes_the_cookie(header), header
    assert "HttpOnly" in header and "Path=/" in header
    assert store.load(sid_of(before)) is None
    assert store.count() == 0
    assert state(client)["state"] == "guest"
    assert raw_get(app, before).get_json()["state"] == "guest"


def test_revoked_session_is_guest(app: Flask, store: SpyStore) -> None:
    value = cookie_value(logged_in(app))
    assert store.delete_user_sessions("acme", "alice") == 1
    assert raw_get(app, value).get_json()["state"] == "guest"


# --- User-Agent binding ---------------------------------------------------------------------------


def test_changed_user_agent_is_a_new_guest(app: Flask, store: SpyStore) -> None:
    value = cookie_value(logged_in(app))
    response = raw_get(app, value, ua="Mozilla/5.0 Attacker")
    body = response.get_json()
    assert body["state"] == "guest" and body["mismatch"] is True and body["new"] is True
    assert set_cookies(response) == []
    # the stored session is left for its legitimate user
    assert raw_get(app, value).get_json() == {
        "state": "authenticated",
        "user": "alice",
        "mismatch": False,
        "new": False,
        "custom": {},
    }


def test_mismatch_on_a_modifying_request_gets_a_new_id(app: Flask) -> None:
    value = cookie_value(logged_in(app))
    client = app.test_client(use_cookies=False)
    response = client.post("/set/k/v", headers={"Cookie": f"{COOKIE}={value}", "User-Agent": "Other/1.0"})
    (header,) = set_cookies(response)
    assert sid_of(header.split(";")[0].partition("=")[2]) != sid_of(value)
    assert raw_get(app, value).get_json()["state"] == "authenticated"


def test_missing_user_agent_after_binding_is_a_mismatch(app: Flask) -> None:
    value = cookie_value(logged_in(app))
    body = raw_get(app, value, ua=None).get_json()
    assert body["state"] == "guest" and body["mismatch"] is True
    assert raw_get(app, value, ua="").get_json()["state"] == "guest"


def test_binding_to_an_absent_user_agent(app: Flask) -> None:
    client = client_for(app, ua=None)
    client.post("/login")
    value = cookie_value(client)
    assert raw_get(app, value, ua=None).get_json()["state"] == "authenticated"
    assert raw_get(app, value, ua=UA).get_json()["state"] == "guest"


def test_fingerprint_is_bound_at_login_not_before(app: Flask) -> None:
    # A guest session (no fingerprint yet) may change User-Agent; the login binds the new one.
    client = client_for(app, ua="First/1.0")
    client.post("/set/k/v")
    client.environ_base["HTTP_USER_AGENT"] = "Second/2.0"
    assert state(client)["custom"] == {"k": "v"}
    client.post("/login")
    value = cookie_value(client)
    assert raw_get(app, value, ua="Second/2.0").get_json()["state"] == "authenticated"
    assert raw_get(app, value, ua="First/1.0").get_json()["state"] == "guest"


def test_unbound_non_guest_record_is_refused(
    app: Flask, store: SpyStore, clock: MockClock, interface: AuthFlowSessionInterface
) -> None:
    now = clock.now()
    record = start_login(new_guest_record(now), tenant="acme", user_id="alice", factors=["password"], now=now)
    record = pass_factor(record, "password", now=now)
    assert record.fingerprint is None
    store.save(record, now + timedelta(hours=1))
    body = raw_get(app, interface.sign_sid(record.sid)).get_json()
    assert body["state"] == "guest" and body["mismatch"] is True


def test_fingerprint_helper_binds_records_made_outside_a_request(
    app: Flask, store: SpyStore, clock: MockClock, interface: AuthFlowSessionInterface
) -> None:
    now = clock.now()
    record = start_login(new_guest_record(now), tenant="acme", user_id="alice", factors=["password"], now=now)
    record = replace(pass_factor(record, "password", now=now), fingerprint=interface.fingerprint(UA))
    store.save(record, now + timedelta(hours=1))
    assert raw_get(app, interface.sign_sid(record.sid)).get_json()["state"] == "authenticated"
    assert interface.fingerprint(UA) != interface.fingerprint("Other")
    assert interface.fingerprint(None) == interface.fingerprint("")
    assert UA not in interface.fingerprint(UA)


# --- expiry ---------------------------------------------------------------------------------------


def test_idle_timeout(app: Flask, clock: MockClock) -> None:
    client = logged_in(app)
    clock.advance(timedelta(minutes=59, seconds=59))
    value = cookie_value(client)
    clock.advance(timedelta(seconds=1))
    assert raw_get(app, value).get_json()["state"] == "guest"


def test_activity_extends_the_idle_timeout(app: Flask, clock: MockClock, store: SpyStore) -> None:
    client = logged_in(app)
    for _ in range(4):  # four hours of activity, every 50 minutes
        clock.advance(timedelta(minutes=50))
        response = client.get("/")
        assert response.get_json()["state"] == "authenticated"
        (header,) = set_cookies(response)  # last-seen refreshed: new expiry on the cookie
        assert f"Expires={(clock.now() + timedelta(hours=1)).strftime('%a, %d %b %Y %H:%M:%S GMT')}" in header
    clock.advance(timedelta(hours=1))
    assert state(client)["state"] == "guest"


def test_absolute_ttl_even_when_active(store: SpyStore, clock: MockClock) -> None:
    interface = AuthFlowSessionInterface(store, KEY, clock=clock).with_ttl(timedelta(hours=2))
    app = make_app(interface, clock)
    client = logged_in(app)
    value = cookie_value(client)
    for _ in range(3):
        clock.advance(timedelta(minutes=30))
        assert state(client)["state"] == "authenticated"
    clock.advance(timedelta(minutes=29, seconds=59))
    assert raw_get(app, value).get_json()["state"] == "authenticated"
    clock.advance(timedelta(seconds=1))
    assert raw_get(app, value).get_json()["state"] == "guest"
    assert state(client)["state"] == "guest"


def test_absolute_ttl_checked_even_if_the_store_keeps_the_record(store: SpyStore, clock: MockClock) -> None:
    app = make_app(AuthFlowSessionInterface(store, KEY, clock=clock), clock)
    value = cookie_value(logged_in(app))
    # The same store, a stricter lifetime (e.g. after a config change): the record is over.
    short = make_app(AuthFlowSessionInterface(store, KEY, clock=clock, ttl=timedelta(minutes=5)), clock)
    clock.advance(timedelta(minutes=5))
    assert raw_get(short, value).get_json()["state"] == "guest"
    assert raw_get(app, value).get_json()["state"] == "authenticated"


def test_touch_interval_limits_writes(clock: MockClock, store: SpyStore) -> None:
    # No jitter: the session comes due exactly six minutes after its last write.
    app = make_app(AuthFlowSessionInterface(store, KEY, clock=clock, touch_jitter=timedelta(0)), clock)
    client = logged_in(app)
    saves = store.saves
    for _ in range(5):
        clock.advance(timedelta(minutes=1))
        assert set_cookies(client.get("/")) == []
    assert (store.saves, store.touches) == (saves, 0)
    clock.advance(timedelta(minutes=1))  # six minutes since the last write: one refresh
    assert len(set_cookies(client.get("/"))) == 1
    assert (store.saves, store.touches) == (saves, 1)  # a touch, not a save of the record
    assert set_cookies(client.get("/")) == []
    assert (store.saves, store.touches) == (saves, 1)


# --- store failures -------------------------------------------------------------------------------


def test_store_down_on_open_serves_a_guest(app: Flask, store: SpyStore) -> None:
    client = logged_in(app)
    value = cookie_value(client)
    store.down = True
    response = client.get("/")
    assert response.status_code == 200
    assert response.get_json()["state"] == "guest"
    response = client.post("/set/k/v")  # a change cannot be saved: dropped, cookie kept
    assert response.status_code == 200
    assert set_cookies(response) == []
    response = client.post("/logout")
    assert response.status_code == 200
    assert set_cookies(response) == []
    store.down = False
    assert cookie_value(client) == value
    assert state(client)["state"] == "authenticated"  # the outage did not log the user out


def test_store_down_on_save_of_a_change_fails_closed(app: Flask, store: SpyStore) -> None:
    client = client_for(app)
    calls: list[str] = []
    original_save = store.save

    def save(
        record: SessionRecord, expires_at: datetime, *, replaces: Sequence[str] = (), existing: bool = False
    ) -> bool:
        calls.append(record.sid)
        if len(calls) == 1:
            raise StoreUnavailable()
        # the store is back for any later attempt
        return original_save(record, expires_at, replaces=replaces, existing=existing)

    store.save = save  # type: ignore[method-assign]
    response = client.post("/login")
    # With the bare interface (no AuthFlow, so no early save from after_request) Flask
    # turns an exception raised while saving into a 500; AuthFlow answers 503 instead
    # (tests/test_extension.py).
    assert response.status_code == 500
    assert set_cookies(response) == []
    assert len(calls) == 1  # Flask's second save, for the error response, wrote nothing
    assert state(client)["state"] == "guest"


def test_store_down_on_a_refresh_is_not_an_error(app: Flask, store: SpyStore, clock: MockClock) -> None:
    client = logged_in(app)
    clock.advance(timedelta(minutes=10))
    store.down_on_save = True
    response = client.get("/")
    assert response.status_code == 200
    assert response.get_json()["state"] == "authenticated"
    assert set_cookies(response) == []


# --- custom data limit at save time ----------------------------------------------------------------


def test_oversized_nested_change_falls_back_to_the_stored_data(client: FlaskClient, store: SpyStore) -> None:
    client.post("/cart")
    sid = sid_of(cookie_value(client))
    response = client.post("/grow")
    # nothing is dropped silently: the request answers 413
    assert response.status_code == 413
    assert b"custom session data is" in response.data
    assert state(client)["custom"] == {"cart": []}
    record = store.load(sid)
    assert record is not None and record.custom == {"cart": []}


def test_oversized_change_with_a_login_keeps_the_login_and_drops_the_data(client: FlaskClient) -> None:
    client.post("/cart")
    response = client.post("/login-and-grow")
    assert response.status_code == 413  # the data is refused, said so ...
    body = state(client)  # ... and the login is kept
    assert body["state"] == "authenticated"
    assert body["custom"] == {}


def test_state_enum_in_views(app: Flask) -> None:
    client = logged_in(app)
    with app.test_request_context(
        "/", headers={"Cookie": f"{COOKIE}={cookie_value(client)}", "User-Agent": UA}
    ):
        assert session.state is AuthState.AUTHENTICATED  # type: ignore[attr-defined]
        assert session.is_authenticated  # type: ignore[attr-defined]


def test_unbound_guest_session_is_resigned_without_a_write(store: SpyStore, clock: MockClock) -> None:
    old_client = client_for(make_app(AuthFlowSessionInterface(store, OLD_KEY, clock=clock), clock))
    old_client.post("/set/k/v")
    old_value = cookie_value(old_client)
    saves = store.saves
    rotated = make_app(
        AuthFlowSessionInterface(store, KEY, clock=clock, previous_signing_keys=[OLD_KEY]), clock
    )
    response = raw_get(rotated, old_value)
    assert response.get_json()["custom"] == {"k": "v"}
    (header,) = set_cookies(response)
    assert header.split(";")[0] == f"{COOKIE}={_signed(KEY, sid_of(old_value))}"
    assert store.saves == saves  # nothing in the record changed: no write
