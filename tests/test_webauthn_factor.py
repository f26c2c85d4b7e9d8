"""The WebAuthn factor through the real login service, answered by a software authenticator.

Every service-level test runs on the in-memory backend and on SQLite: enrollment of several
keys, login with password then key, each refusal with the response that triggers it,
passkey logins (per tenant, user verification, lockout) and one assertion raced by two
requests.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.factors import (
    Accepted,
    EnrollContext,
    Enrollment,
    Factor,
    FactorContext,
    PasskeyFactor,
    Rejected,
)
from flask_authflow._core.ports import FactorConfig
from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorRequired,
    InvalidCredential,
    Locked,
)
from flask_authflow.errors import (
    ConfigurationError,
    EnrollmentError,
    InvalidInput,
    PermissionDenied,
)
from flask_authflow.login._service import AuthnRequest, AuthnService
from flask_authflow.mfa._webauthn import (
    MAX_CREDENTIAL_SIZE,
    WebAuthnFactor,
    WebAuthnSettings,
    user_handle,
)
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user
from tests.authn_support import CTX, FAST_HASHER, new_session
from tests.webauthn_soft import SoftAuthenticator, SoftCredential, b64url

RP_ID = "example.com"
ORIGIN = "https://example.com"
PASSWORDS = {"alice": "correct horse", "bob": "battery staple", "carol": "tr0ub4dor&3"}
WEBAUTHN = FactorKind.WEBAUTHN


def settings(**changes: Any) -> WebAuthnSettings:
    values: dict[str, Any] = {
        "rp_id": RP_ID,
        "rp_name": "Example",
        "origins": (ORIGIN, "https://login.example.com"),
    }
    values.update(changes)
    return WebAuthnSettings(**values)


def WA(text: str | bytes) -> FactorCredential:
    return FactorCredential(WEBAUTHN, text)


@dataclass
class Env:
    service: AuthnService
    backend: InMemoryBackend | SqlAlchemyBackend
    clock: MockClock

    @property
    def handle(self) -> AuthnRequest:
        return self.service.with_audit_context(CTX)

    def user_id(self, who: str, tenant: str = "acme") -> str:
        user = self.backend.find_user(tenant, who)
        assert user is not None
        return user.user_id

    def keys(self, who: str = "alice", tenant: str = "acme", *, pending: bool = False) -> list[FactorConfig]:
        return self.backend.list_user_factors(
            tenant, self.user_id(who, tenant), kind=WEBAUTHN, include_pending=pending
        )

    def last_row(self, event: str) -> Any:
        return [row for row in self.backend.audit_rows if row.event == event][-1]

    def use_factor(self, factor: WebAuthnFactor) -> None:
        self.service.register_factor(factor)


@pytest.fixture(params=["memory", "sqlite"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    clock = MockClock()
    backend: InMemoryBackend | SqlAlchemyBackend
    if request.param == "memory":
        backend = InMemoryBackend(clock=clock)
    else:
        backend = SqlAlchemyBackend(f"sqlite:///{tmp_path / 'authflow.db'}", clock=clock)
    add_user(backend, "acme", "alice", PASSWORDS["alice"])
    add_user(backend, "acme", "bob", PASSWORDS["bob"])
    add_user(backend, "globex", "carol", PASSWORDS["carol"])
    service = AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend)
    service.register_factor(WebAuthnFactor(settings()))
    yield Env(service, backend, clock)
    if isinstance(backend, SqlAlchemyBackend):
        backend.close()


def password_login(env: Env, who: str = "alice", tenant: str = "acme") -> tuple[AuthSession, Any]:
    session = new_session(env.clock)
    assert env.handle.begin_login(who, tenant, session) == FactorRequired(FactorKind.PASSWORD)
    return session, env.handle.verify_factor(FactorCredential.password(PASSWORDS[who]), session)


def signed_in(env: Env, who: str = "alice", tenant: str = "acme") -> AuthSession:
    session, outcome = password_login(env, who, tenant)
    assert isinstance(outcome, Authenticated)
    return session


def enroll(
    env: Env,
    session: AuthSession,
    key: SoftAuthenticator,
    params: dict[str, Any] | None = None,
    **register: Any,
) -> tuple[FactorConfig, SoftCredential]:
    start = env.handle.begin_enrollment(session, WEBAUTHN, params)
    text, credential = key.register(start.public["publicKey"], **register)
    config = env.handle.confirm_enrollment(session, WEBAUTHN, start.factor_id, WA(text))
    return config, credential


def with_key(
    env: Env, who: str = "alice", tenant: str = "acme", params: dict[str, Any] | None = None, **register: Any
) -> tuple[SoftAuthenticator, SoftCredential]:
    key = SoftAuthenticator()
    _, credential = enroll(env, signed_in(env, who, tenant), key, params, **register)
    return key, credential


def at_key_step(env: Env, who: str = "alice", tenant: str = "acme") -> tuple[AuthSession, dict[str, Any]]:
    """A login that passed the password and waits for the key: the session and the options."""
    session, outcome = password_login(env, who, tenant)
    assert isinstance(outcome, FactorRequired) and outcome.kinds == (WEBAUTHN,)
    return session, dict(outcome.challenges[WEBAUTHN]["publicKey"])


def copy_of(session: AuthSession) -> AuthSession:
    """The same stored session read by a second request."""
    return AuthSession(session.record, new=False, request_fingerprint="fp")


# --- settings and the protocols ------------------------------------------------------------------


def test_settings_from_config() -> None:
    config = {
        "AUTHFLOW_SIGNING_KEY": "k" * 48,
        "AUTHFLOW_WEBAUTHN_RP_ID": "example.com",
        "AUTHFLOW_WEBAUTHN_ORIGINS": ["https://example.com/", "https://login.example.com"],
        "AUTHFLOW_WEBAUTHN_USER_VERIFICATION": "required",
        "AUTHFLOW_SITE_NAME": "Example Site",
    }
    assert WebAuthnSettings.from_config(config) == WebAuthnSettings(
        rp_id="example.com",
        rp_name="Example Site",
        origins=("https://example.com", "https://login.example.com"),
        user_verification="required",
    )
    unset = {"AUTHFLOW_SIGNING_KEY": "k" * 48}
    with pytest.raises(ConfigurationError, match="AUTHFLOW_WEBAUTHN_RP_ID"):
        WebAuthnSettings.from_config(unset)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rp_id": "https://example.com"}, "bare domain"),
        ({"rp_id": ""}, "bare domain"),
        ({"rp_name": ""}, "rp_name"),
        ({"origins": ()}, "origins"),
        ({"origins": ["https://example.com"]}, "origins"),
        ({"user_verification": "always"}, "user_verification"),
        ({"challenge_ttl": timedelta(0)}, "challenge_ttl"),
        ({"challenge_ttl": timedelta(hours=2)}, "challenge_ttl"),
    ],
)
def test_settings_refuse_bad_values(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        settings(**changes)


def test_factor_implements_the_protocols() -> None:
    factor = WebAuthnFactor(settings())
    assert isinstance(factor, Factor) and isinstance(factor, Enrollment) and isinstance(factor, PasskeyFactor)
    assert factor.kind is WEBAUTHN and factor.replaces_kind is False


def test_user_handle_is_stable_opaque_and_per_tenant() -> None:
    handle = user_handle("acme", "u1")
    assert len(handle) == 32 and handle == user_handle("acme", "u1")
    assert b"u1" not in handle
    assert handle != user_handle("globex", "u1") != user_handle("acme", "u2")
    assert user_handle("ac", "me\x00u1") != user_handle("acme", "u1")  # fields cannot run together


# --- enrollment ----------------------------------------------------------------------------------


def test_enrollment_stores_the_credential(env: Env) -> None:
    session = signed_in(env)
    start = env.handle.begin_enrollment(session, WEBAUTHN, {"label": "Blue key"})
    options = start.public["publicKey"]
    assert options["rp"] == {"name": "Example", "id": RP_ID}
    assert options["user"] == {
        "id": b64url(user_handle("acme", env.user_id("alice"))),
        "name": "alice",
        "displayName": "alice",
    }
    assert options["attestation"] == "none" and options["excludeCredentials"] == []
    assert options["authenticatorSelection"]["residentKey"] == "discouraged"
    assert options["authenticatorSelection"]["userVerification"] == "preferred"
    assert {p["alg"] for p in options["pubKeyCredParams"]} >= {-7}
    assert len(options["challenge"]) == 43  # 32 random bytes
    json.dumps(start.public)  # plain JSON, as the client receives it
    pending = env.keys(pending=True)
    assert [(k.factor_id, k.confirmed, k.lookup) for k in pending] == [(start.factor_id, False, None)]
    assert env.keys() == []

    key = SoftAuthenticator(transports=("usb", "nfc"))
    text, credential = key.register(options, sign_count=7)
    config = env.handle.confirm_enrollment(session, WEBAUTHN, start.factor_id, WA(text))

    assert config.confirmed and config.factor_id == start.factor_id
    assert config.lookup == credential.id and config.counter == 7
    assert config.data["label"] == "Blue key" and config.data["passkey"] is False
    assert config.data["transports"] == ["usb", "nfc"]
    assert config.data["aaguid"] == "f1d0f1d0-f1d0-f1d0-f1d0-f1d0f1d0f1d0"
    assert isinstance(config.data["public_key"], str) and config.data["public_key"]
    assert [k.factor_id for k in env.keys()] == [start.factor_id]
    assert [k.factor_id for k in env.handle.user_factors(session) if k.kind is WEBAUTHN] == [start.factor_id]
    assert env.last_row("factor_enrolled").status == "success"
    assert (session.record.flow or {}).get("enroll:webauthn") is None  # the challenge is gone


def test_a_second_key_is_added_and_excluded(env: Env) -> None:
    session = signed_in(env)
    first, first_credential = enroll(env, session, SoftAuthenticator(), {"label": "one"})
    start = env.handle.begin_enrollment(session, WEBAUTHN, {"label": "two"})
    excluded = start.public["publicKey"]["excludeCredentials"]
    assert [c["id"] for c in excluded] == [first_credential.id]
    assert excluded[0]["transports"] == ["usb"]
    text, second_credential = SoftAuthenticator().register(start.public["publicKey"])
    second = env.handle.confirm_enrollment(session, WEBAUTHN, start.factor_id, WA(text))
    assert [(k.factor_id, k.data["label"]) for k in env.keys()] == [
        (first.factor_id, "one"),
        (second.factor_id, "two"),
    ]
    # Both keys are offered at login, and either passes.
    for credential in (first_credential, second_credential):
        login, options = at_key_step(env)
        assert {c["id"] for c in options["allowCredentials"]} == {first_credential.id, second_credential.id}
        holder = SoftAuthenticator(credentials={credential.credential_id: credential})
        assert isinstance(env.handle.verify_factor(WA(holder.assert_(options)), login), Authenticated)


def test_a_credential_registered_twice_is_refused(env: Env) -> None:
    session = signed_in(env)
    key = SoftAuthenticator()
    _, credential = enroll(env, session, key)
    with pytest.raises(EnrollmentError):
        enroll(env, session, key, credential_id=credential.credential_id)
    assert env.last_row("factor_enroll").reason == "webauthn_duplicate"
    assert [k.lookup for k in env.keys(pending=True)] == [credential.id]
    # The same credential id for another user of the tenant: refused as well.
    with pytest.raises(EnrollmentError):
        enroll(env, signed_in(env, "bob"), SoftAuthenticator(), credential_id=credential.credential_id)
    assert env.last_row("factor_enroll").reason == "webauthn_duplicate"
    assert env.keys("bob", pending=True) == []


@pytest.mark.parametrize(
    ("register", "reason"),
    [
        ({"origin": "https://evil.example.net"}, "webauthn_origin"),
        ({"origin": "http://example.com"}, "webauthn_origin"),
        ({"rp_id": "evil.example.net"}, "webauthn_rp_id"),
        ({"challenge": b64url(os.urandom(32))}, "webauthn_challenge"),
        ({"client_type": "webauthn.get"}, "webauthn_client_data_type"),
        ({"up": False}, "webauthn_user_presence"),
        ({"raw_id": os.urandom(32)}, "webauthn_invalid"),
    ],
)
def test_a_wrong_registration_is_refused(env: Env, register: dict[str, Any], reason: str) -> None:
    session = signed_in(env)
    with pytest.raises(EnrollmentError):
        enroll(env, session, SoftAuthenticator(), **register)
    assert env.last_row("factor_enroll").reason == reason
    assert env.keys() == []
    assert all(not k.confirmed and k.lookup is None for k in env.keys(pending=True))


def test_registration_without_user_verification(env: Env) -> None:
    # A passkey must verify the user; a second-factor key need not (unless the settings say so).
    session = signed_in(env)
    with pytest.raises(EnrollmentError):
        enroll(env, session, SoftAuthenticator(), {"passkey": True}, uv=False)
    assert env.last_row("factor_enroll").reason == "webauthn_user_verification"
    config, _ = enroll(env, session, SoftAuthenticator(), uv=False)
    assert config.confirmed and config.data["user_verified"] is False
    env.use_factor(WebAuthnFactor(settings(user_verification="required")))
    with pytest.raises(EnrollmentError):
        enroll(env, session, SoftAuthenticator(), uv=False)
    assert env.last_row("factor_enroll").reason == "webauthn_user_verification"
    assert [k.factor_id for k in env.keys()] == [config.factor_id]


def test_the_enrollment_challenge_is_single_use(env: Env) -> None:
    session = signed_in(env)
    start = env.handle.begin_enrollment(session, WEBAUTHN, None)
    key = SoftAuthenticator()
    wrong, _ = key.register(start.public["publicKey"], origin="https://evil.example.net")
    with pytest.raises(EnrollmentError):
        env.handle.confirm_enrollment(session, WEBAUTHN, start.factor_id, WA(wrong))
    right, _ = key.register(start.public["publicKey"])
    with pytest.raises(EnrollmentError):
        env.handle.confirm_enrollment(session, WEBAUTHN, start.factor_id, WA(right))
    assert env.last_row("factor_enroll").reason == "no_challenge"
    assert env.keys() == []


def test_the_enrollment_challenge_expires(env: Env) -> None:
    session = signed_in(env)
    start = env.handle.begin_enrollment(session, WEBAUTHN, None)
    text, _ = SoftAuthenticator().register(start.public["publicKey"])
    env.clock.advance(timedelta(minutes=5, seconds=1))
    with pytest.raises(EnrollmentError):
        env.handle.confirm_enrollment(session, WEBAUTHN, start.factor_id, WA(text))
    assert env.last_row("factor_enroll").reason == "expired"
    assert env.keys() == []


def test_an_abandoned_enrollment_cannot_be_confirmed(env: Env) -> None:
    session = signed_in(env)
    first = env.handle.begin_enrollment(session, WEBAUTHN, None)
    second = env.handle.begin_enrollment(session, WEBAUTHN, None)
    # Beginning again drops the unfinished enrollment: its row and its challenge.
    assert [k.factor_id for k in env.keys(pending=True)] == [second.factor_id]
    text, _ = SoftAuthenticator().register(first.public["publicKey"])
    with pytest.raises(EnrollmentError):
        env.handle.confirm_enrollment(session, WEBAUTHN, first.factor_id, WA(text))
    assert env.last_row("factor_enroll").reason == "no_pending_factor"
    # An answer to the abandoned challenge, for the current enrollment: refused too.
    third = env.handle.begin_enrollment(session, WEBAUTHN, None)
    with pytest.raises(EnrollmentError):
        env.handle.confirm_enrollment(session, WEBAUTHN, third.factor_id, WA(text))
    assert env.last_row("factor_enroll").reason == "webauthn_challenge"
    assert env.keys() == []
    fourth = env.handle.begin_enrollment(session, WEBAUTHN, None)
    text, _ = SoftAuthenticator().register(fourth.public["publicKey"])
    assert env.handle.confirm_enrollment(session, WEBAUTHN, fourth.factor_id, WA(text)).confirmed
    assert [k.factor_id for k in env.keys(pending=True)] == [fourth.factor_id]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"label": "x" * 65}, "label"),
        ({"label": "  "}, "label"),
        ({"label": 7}, "label"),
        ({"label": "tab\there"}, "control"),
        ({"passkey": "yes"}, "passkey"),
        ({"colour": "blue"}, "unknown"),
    ],
)
def test_enrollment_params_are_checked(env: Env, params: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        env.handle.begin_enrollment(signed_in(env), WEBAUTHN, params)
    assert env.keys(pending=True) == []


def test_a_disabled_key_no_longer_logs_in(env: Env) -> None:
    session = signed_in(env)
    config, credential = enroll(env, session, SoftAuthenticator())
    login, options = at_key_step(env)
    assert env.handle.disable_factor(session, config.factor_id)
    assert env.keys() == []
    holder = SoftAuthenticator(credentials={credential.credential_id: credential})
    assert env.handle.verify_factor(WA(holder.assert_(options)), login) == InvalidCredential()
    assert env.last_row("factor_verify").reason == "not_enrolled"


# --- login: password, then the key -------------------------------------------------------------


def test_login_with_password_then_security_key(env: Env) -> None:
    key, credential = with_key(env, sign_count=0)
    session, outcome = password_login(env)
    assert isinstance(outcome, FactorRequired)
    assert outcome.kind is WEBAUTHN and WEBAUTHN in outcome.kinds
    options = outcome.challenges[WEBAUTHN]["publicKey"]
    assert options["rpId"] == RP_ID and options["userVerification"] == "preferred"
    assert options["allowCredentials"] == [{"id": credential.id, "type": "public-key", "transports": ["usb"]}]
    assert session.state is AuthState.AUTHENTICATING

    result = env.handle.verify_factor(WA(key.assert_(options)), session)

    assert result == Authenticated(env.user_id("alice"), "acme")
    assert session.record.factors_passed == ("password", "webauthn")
    (stored,) = env.keys()
    assert stored.counter == 1 and stored.last_used_at == env.clock.now()
    assert env.last_row("factor_verify").status == "success"


def test_an_authenticator_without_a_counter_passes_every_login(env: Env) -> None:
    key, credential = with_key(env, counter_step=0)
    for _ in range(2):
        session, options = at_key_step(env)
        assert isinstance(env.handle.verify_factor(WA(key.assert_(options)), session), Authenticated)
    assert credential.sign_count == 0 and env.keys()[0].counter == 0


def _assert_refused(env: Env, session: AuthSession, text: str, reason: str) -> None:
    before = env.keys()
    assert env.handle.verify_factor(WA(text), session) == InvalidCredential()
    row = env.last_row("factor_verify")
    assert (row.status, row.reason) == ("failure", reason)
    assert session.state is AuthState.AUTHENTICATING  # the login waits for another try
    assert not (session.record.flow or {}).get("factor:webauthn")  # the challenge is used up
    assert [k.counter for k in env.keys()] == [k.counter for k in before]


BadAssertion = Callable[[SoftAuthenticator, dict[str, Any], Env], str]

BAD_ASSERTIONS: list[tuple[str, BadAssertion, str]] = [
    ("wrong origin", lambda k, o, e: k.assert_(o, origin="https://evil.example.net"), "webauthn_origin"),
    (
        "origin with a port",
        lambda k, o, e: k.assert_(o, origin="https://example.com:8443"),
        "webauthn_origin",
    ),
    ("wrong rp id", lambda k, o, e: k.assert_(o, rp_id="evil.example.net"), "webauthn_rp_id"),
    ("parent rp id", lambda k, o, e: k.assert_(o, rp_id="com"), "webauthn_rp_id"),
    ("create type", lambda k, o, e: k.assert_(o, client_type="webauthn.create"), "webauthn_client_data_type"),
    ("no user presence", lambda k, o, e: k.assert_(o, up=False), "webauthn_user_presence"),
    ("bad signature", lambda k, o, e: k.assert_(o, tamper_signature=True), "webauthn_signature"),
    (
        "another user's handle",
        lambda k, o, e: k.assert_(o, user_handle=user_handle("acme", e.user_id("bob"))),
        "webauthn_user_handle",
    ),
    (
        "made-up challenge",
        lambda k, o, e: k.assert_(o, challenge=b64url(os.urandom(32))),
        "webauthn_challenge",
    ),
]


@pytest.mark.parametrize(
    ("make", "reason"), [(m, r) for _, m, r in BAD_ASSERTIONS], ids=[n for n, *_ in BAD_ASSERTIONS]
)
def test_a_wrong_assertion_is_refused(env: Env, make: BadAssertion, reason: str) -> None:
    key, _ = with_key(env)
    session, options = at_key_step(env)
    _assert_refused(env, session, make(key, options, env), reason)


def test_a_replayed_assertion_is_refused(env: Env) -> None:
    key, _ = with_key(env)
    session, options = at_key_step(env)
    second_request = copy_of(session)  # the same stored session, read again
    assertion = key.assert_(options)
    assert isinstance(env.handle.verify_factor(WA(assertion), session), Authenticated)
    assert env.handle.verify_factor(WA(assertion), second_request) == InvalidCredential()
    assert env.last_row("factor_verify").reason == "webauthn_sign_count"
    assert second_request.state is AuthState.AUTHENTICATING


def test_an_assertion_of_an_earlier_login_is_refused(env: Env) -> None:
    key, _ = with_key(env, counter_step=0)  # no counter: only the challenge stops the replay
    session, options = at_key_step(env)
    assertion = key.assert_(options)
    assert isinstance(env.handle.verify_factor(WA(assertion), session), Authenticated)
    later, _ = at_key_step(env)
    _assert_refused(env, later, assertion, "webauthn_challenge")


def test_the_challenge_is_single_use(env: Env) -> None:
    key, _ = with_key(env, counter_step=0)
    session, options = at_key_step(env)
    _assert_refused(env, session, key.assert_(options, origin="https://evil.example.net"), "webauthn_origin")
    # The right answer to the spent challenge: refused as well.
    _assert_refused(env, session, key.assert_(options), "no_challenge")
    # A new challenge for the same login, and its answer passes.
    again = env.handle.challenge(WEBAUTHN, session)
    fresh = again.challenges[WEBAUTHN]["publicKey"]
    assert fresh["challenge"] != options["challenge"]
    assert isinstance(env.handle.verify_factor(WA(key.assert_(fresh)), session), Authenticated)


def test_an_assertion_over_another_sessions_challenge_is_refused(env: Env) -> None:
    key, _ = with_key(env)
    mine, _ = at_key_step(env)
    _, theirs = at_key_step(env)
    _assert_refused(env, mine, key.assert_(theirs), "webauthn_challenge")


def test_another_users_credential_is_refused(env: Env) -> None:
    with_key(env, "alice")
    bobs_key, _ = with_key(env, "bob")
    session, options = at_key_step(env, "alice")
    bobs = next(iter(bobs_key.credentials.values()))
    _assert_refused(env, session, bobs_key.assert_(options, bobs), "not_enrolled")


@pytest.mark.parametrize("count", [5, 3, 0], ids=["equal", "lower", "zero"])
def test_a_sign_count_that_does_not_grow_is_refused(env: Env, count: int) -> None:
    key, _ = with_key(env, sign_count=4)
    session, options = at_key_step(env)
    assert isinstance(env.handle.verify_factor(WA(key.assert_(options)), session), Authenticated)
    assert env.keys()[0].counter == 5
    session, options = at_key_step(env)
    _assert_refused(env, session, key.assert_(options, sign_count=count), "webauthn_sign_count")
    assert env.keys()[0].counter == 5


def test_user_verification_when_the_settings_require_it(env: Env) -> None:
    key, _ = with_key(env)
    session, options = at_key_step(env)
    assert isinstance(env.handle.verify_factor(WA(key.assert_(options, uv=False)), session), Authenticated)
    env.use_factor(WebAuthnFactor(settings(user_verification="required")))
    session, options = at_key_step(env)
    assert options["userVerification"] == "required"
    _assert_refused(env, session, key.assert_(options, uv=False), "webauthn_user_verification")
    again = env.handle.challenge(WEBAUTHN, session).challenges[WEBAUTHN]["publicKey"]
    assert isinstance(env.handle.verify_factor(WA(key.assert_(again, uv=True)), session), Authenticated)


def test_an_expired_challenge_is_refused(env: Env) -> None:
    key, _ = with_key(env)
    session, options = at_key_step(env)
    assertion = key.assert_(options)
    env.clock.advance(timedelta(minutes=5, seconds=1))
    _assert_refused(env, session, assertion, "expired")


def _assertion_dict(env: Env) -> tuple[AuthSession, dict[str, Any]]:
    """A login at the key step and a valid answer to its challenge, as a dict."""
    key, _ = with_key(env)
    session, options = at_key_step(env)
    value: dict[str, Any] = json.loads(key.assert_(options))
    return session, value


MALFORMED: list[tuple[str, Callable[[dict[str, Any]], str | bytes]]] = [
    ("not json", lambda a: "{not json"),
    ("not utf-8", lambda a: b"\xff\xfe{}"),
    ("an array", lambda a: json.dumps([a])),
    ("no rawId", lambda a: json.dumps({k: v for k, v in a.items() if k != "rawId"})),
    ("id not a string", lambda a: json.dumps({**a, "id": 7})),
    ("response not an object", lambda a: json.dumps({**a, "response": "x"})),
    ("wrong type", lambda a: json.dumps({**a, "type": "password"})),
    ("too large", lambda a: json.dumps({**a, "padding": "x" * MAX_CREDENTIAL_SIZE})),
    ("deeply nested", lambda a: "[" * 5000 + "]" * 5000),
]


@pytest.mark.parametrize("make", [m for _, m in MALFORMED], ids=[n for n, _ in MALFORMED])
def test_malformed_input_is_invalid_input(env: Env, make: Callable[[dict[str, Any]], str | bytes]) -> None:
    session, assertion = _assertion_dict(env)
    with pytest.raises(InvalidInput):
        env.handle.verify_factor(WA(make(assertion)), session)
    assert env.last_row("factor_verify").status == "error"
    assert session.state is AuthState.AUTHENTICATING


def test_garbage_inside_a_well_formed_credential_is_refused_not_raised(env: Env) -> None:
    session, assertion = _assertion_dict(env)
    broken = {**assertion, "response": {**assertion["response"], "authenticatorData": "AAAA"}}
    assert env.handle.verify_factor(WA(json.dumps(broken)), session) == InvalidCredential()
    assert env.last_row("factor_verify").reason == "webauthn_invalid"


def test_wrong_assertions_lock_the_account(env: Env) -> None:
    key, _ = with_key(env)
    session, _ = at_key_step(env)
    outcomes = []
    for _ in range(5):
        options = env.handle.challenge(WEBAUTHN, session).challenges[WEBAUTHN]["publicKey"]
        outcomes.append(env.handle.verify_factor(WA(key.assert_(options, tamper_signature=True)), session))
    assert outcomes[:4] == [InvalidCredential()] * 4 and isinstance(outcomes[4], Locked)
    assert env.last_row("factor_verify").reason == "webauthn_signature"
    assert isinstance(env.handle.begin_login("alice", "acme", new_session(env.clock)), Locked)


# --- passkeys -----------------------------------------------------------------------------------


@pytest.fixture
def passkeys(env: Env) -> Env:
    env.service.passkey_login_allowed = lambda tenant: tenant == "acme"
    return env


def passkey_login(env: Env, key: SoftAuthenticator, tenant: str = "acme", **assertion: Any) -> Any:
    session = new_session(env.clock)
    options = env.handle.begin_passkey_login(tenant, session)["publicKey"]
    outcome = env.handle.finish_passkey_login(WA(key.assert_(options, **assertion)), session)
    return outcome, session


def test_passkey_login(passkeys: Env) -> None:
    env = passkeys
    key, credential = with_key(env, params={"passkey": True})
    assert env.keys()[0].data["passkey"] is True
    session = new_session(env.clock)
    options = env.handle.begin_passkey_login("acme", session)["publicKey"]
    assert options["allowCredentials"] == [] and options["userVerification"] == "required"
    assert options["rpId"] == RP_ID

    outcome = env.handle.finish_passkey_login(WA(key.assert_(options)), session)

    assert outcome == Authenticated(env.user_id("alice"), "acme")
    assert session.is_authenticated and session.record.auth_method == "passkey"
    assert env.last_row("login").status == "success"
    assert env.keys()[0].counter == credential.sign_count == 1


def test_passkey_logins_are_throttled_like_password_logins(passkeys: Env) -> None:
    from flask_authflow._throttle import Throttle
    from flask_authflow._throttle.settings import parse_limits
    from flask_authflow.errors import Throttled

    key, _ = with_key(passkeys, params={"passkey": True})
    passkeys.service.throttle = Throttle(parse_limits("test", {"login.address": "1/minute"}))
    outcome, _ = passkey_login(passkeys, key)
    assert isinstance(outcome, Authenticated)
    with pytest.raises(Throttled):
        passkey_login(passkeys, key)
    assert passkeys.last_row("passkey_login").status == "throttled"


def test_enrollment_options_of_a_passkey(passkeys: Env) -> None:
    start = passkeys.handle.begin_enrollment(signed_in(passkeys), WEBAUTHN, {"passkey": True})
    options = start.public["publicKey"]
    assert options["authenticatorSelection"] == {
        "residentKey": "required",
        "requireResidentKey": True,
        "userVerification": "required",
    }
    assert options["extensions"] == {"credProps": True}


@pytest.mark.parametrize(
    ("register", "passkey"),
    [
        ({}, False),  # a second-factor key: it cannot log in alone
        ({"discoverable": True}, True),  # credProps.rk: the browser says it is discoverable
        ({"discoverable": True, "cred_props": False}, False),
        ({"backup_eligible": True, "discoverable": True, "cred_props": False}, True),  # a synced passkey
    ],
)
def test_which_keys_may_log_in_alone(passkeys: Env, register: dict[str, Any], passkey: bool) -> None:
    key, credential = with_key(passkeys, **register)
    assert passkeys.keys()[0].data["passkey"] is passkey
    credential.discoverable = True  # the authenticator answers with it (and its user handle)
    outcome, session = passkey_login(passkeys, key)
    assert isinstance(outcome, Authenticated) is passkey
    if not passkey:
        assert passkeys.last_row("passkey_login").reason == "unknown_credential"
        assert session.is_guest


def test_a_passkey_login_needs_user_verification(passkeys: Env) -> None:
    key, _ = with_key(passkeys, params={"passkey": True})
    outcome, session = passkey_login(passkeys, key, uv=False)
    assert outcome == InvalidCredential() and session.is_guest
    assert passkeys.last_row("passkey_login").reason == "webauthn_user_verification"


@pytest.mark.parametrize("handle", ["missing", "bob"])
def test_a_passkey_login_needs_its_users_handle(passkeys: Env, handle: str) -> None:
    key, _ = with_key(passkeys, params={"passkey": True})
    given: bytes | None = None if handle == "missing" else user_handle("acme", passkeys.user_id("bob"))
    outcome, _ = passkey_login(passkeys, key, user_handle=given)
    assert outcome == InvalidCredential()
    assert passkeys.last_row("passkey_login").reason == "unknown_credential"


def test_passkey_login_is_per_tenant(passkeys: Env) -> None:
    with_key(passkeys, params={"passkey": True})
    with pytest.raises(PermissionDenied):
        passkeys.handle.begin_passkey_login("globex", new_session(passkeys.clock))
    passkeys.service.passkey_login_allowed = lambda tenant: False
    with pytest.raises(PermissionDenied):
        passkeys.handle.begin_passkey_login("acme", new_session(passkeys.clock))


def test_a_passkey_of_another_tenant_is_unknown(passkeys: Env) -> None:
    passkeys.service.passkey_login_allowed = lambda tenant: True
    key, _ = with_key(passkeys, params={"passkey": True})
    outcome, _ = passkey_login(passkeys, key, tenant="globex")
    assert outcome == InvalidCredential()
    assert passkeys.last_row("passkey_login").reason == "unknown_credential"


def test_a_disabled_user_cannot_log_in_with_a_passkey(passkeys: Env) -> None:
    key, _ = with_key(passkeys, params={"passkey": True})
    passkeys.backend.set_disabled("acme", "alice")
    outcome, session = passkey_login(passkeys, key)
    assert outcome == InvalidCredential() and session.is_guest
    assert passkeys.last_row("passkey_login").reason == "disabled"


def test_a_passkey_challenge_is_single_use(passkeys: Env) -> None:
    key, _ = with_key(passkeys, params={"passkey": True}, counter_step=0)
    session = new_session(passkeys.clock)
    options = passkeys.handle.begin_passkey_login("acme", session)["publicKey"]
    assertion = key.assert_(options)
    assert isinstance(passkeys.handle.finish_passkey_login(WA(assertion), session), Authenticated)
    # The session forgot the challenge: the same assertion on it again finds none.
    passkeys.handle.logout(session)
    assert passkeys.handle.finish_passkey_login(WA(assertion), session) == InvalidCredential()
    assert passkeys.last_row("passkey_login").reason == "no_challenge"
    # A challenge of another login is not this one's.
    other = new_session(passkeys.clock)
    passkeys.handle.begin_passkey_login("acme", other)
    assert passkeys.handle.finish_passkey_login(WA(assertion), other) == InvalidCredential()
    assert passkeys.last_row("passkey_login").reason == "webauthn_challenge"


def test_wrong_passkey_assertions_lock_the_account(passkeys: Env) -> None:
    key, _ = with_key(passkeys, params={"passkey": True})
    for _ in range(5):
        outcome, _ = passkey_login(passkeys, key, tamper_signature=True)
        assert outcome == InvalidCredential()
    assert passkeys.last_row("passkey_login").reason == "webauthn_signature"
    outcome, session = passkey_login(passkeys, key)  # even the right passkey
    assert isinstance(outcome, Locked) and session.is_guest
    assert isinstance(passkeys.handle.begin_login("alice", "acme", new_session(passkeys.clock)), Locked)


# --- one assertion, two requests ------------------------------------------------------------------


def test_one_assertion_raced_by_two_requests_passes_once(env: Env) -> None:
    key, _ = with_key(env)
    session, options = at_key_step(env)
    copies = [session, copy_of(session)]
    assertion = key.assert_(options)  # sign count 1 over a stored 0
    # Every store runs a cheap factor's check in the unit of work that holds the attempt's
    # reservation, so the second request waits for the first to commit, then reads counter
    # 1: refused for its signature count.
    outcomes: list[Any] = [None, None]

    def run(index: int) -> None:
        outcomes[index] = env.handle.verify_factor(WA(assertion), copies[index])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(type(o).__name__ for o in outcomes) == ["Authenticated", "InvalidCredential"]
    assert env.keys()[0].counter == 1
    reasons = [
        r.reason for r in env.backend.audit_rows if r.event == "factor_verify" and r.status == "failure"
    ]
    assert reasons == ["webauthn_sign_count"]


# --- the factor alone ----------------------------------------------------------------------------


def test_verify_without_a_challenge_and_with_an_unreadable_expiry() -> None:
    factor = WebAuthnFactor(settings())
    store = InMemoryBackend()
    user = store.create_user("acme", "dave")
    clock = MockClock()

    def ctx(flow: dict[str, Any]) -> FactorContext:
        return FactorContext(
            tenant="acme", user_id=user.user_id, now=clock.now(), store=store, factors=(), flow=flow,
            transaction="t",
        )  # fmt: skip

    text = json.dumps({"id": "AA", "rawId": "AA", "type": "public-key", "response": {}})
    empty = ctx({})
    assert factor.verify(empty, WA(text)) == Rejected("no_challenge") and empty.flow_update == {}
    unreadable = ctx({"challenge": "AAAA", "expires": "tomorrow"})
    assert factor.verify(unreadable, WA(text)) == Rejected("expired") and unreadable.flow_update == {}
    naive = ctx({"challenge": "AAAA", "expires": "2999-01-01T00:00:00"})
    assert factor.verify(naive, WA(text)) == Rejected("expired")
    fine = ctx({"challenge": "AAAA", "expires": (clock.now() + timedelta(minutes=1)).isoformat()})
    assert factor.verify(fine, WA(text)) == Rejected("webauthn_invalid")


def test_confirm_uses_up_the_challenge_whatever_the_answer() -> None:
    factor = WebAuthnFactor(settings())
    clock = MockClock()
    store = InMemoryBackend(clock=clock)
    user = store.create_user("acme", "dave")

    def ctx(flow: dict[str, Any]) -> EnrollContext:
        return EnrollContext(
            tenant="acme", user_id=user.user_id, account_name="dave", issuer_name="Example",
            now=clock.now(), store=store, flow=flow,
        )  # fmt: skip

    begun = ctx({})
    start = factor.begin(begun, {"label": "k"})
    assert begun.flow_update is not None and begun.flow_update["factor_id"] == start.factor_id
    key = SoftAuthenticator()
    wrong, _ = key.register(start.public["publicKey"], origin="https://evil.example.net")
    refused = ctx(dict(begun.flow_update))
    assert factor.confirm(refused, start.factor_id, WA(wrong)) == Rejected("webauthn_origin")
    assert refused.flow_update == {}
    right, credential = key.register(start.public["publicKey"])
    accepted = ctx(dict(begun.flow_update))
    assert factor.confirm(accepted, start.factor_id, WA(right)) == Accepted(start.factor_id)
    assert accepted.flow_update == {}
    (pending,) = store.list_user_factors("acme", user.user_id, kind=WEBAUTHN, include_pending=True)
    assert (pending.confirmed, pending.lookup) == (False, credential.id)  # the service confirms it


def test_verify_for_a_passkey_login_refuses_a_second_factor_key(env: Env) -> None:
    # find_passkey already filters such keys; verify refuses them on its own as well.
    key, credential = with_key(env)
    factor = WebAuthnFactor(settings())
    (config,) = env.keys()

    def ctx(flow: dict[str, Any]) -> FactorContext:
        return FactorContext(
            tenant="acme", user_id=config.user_id, now=env.clock.now(), store=env.backend,
            factors=(config,), flow=flow, transaction="", purpose="passkey",
        )  # fmt: skip

    begun = ctx({})
    options = factor.passkey_challenge(begun)["publicKey"]
    assert begun.flow_update is not None
    credential.discoverable = True
    assertion = WA(key.assert_(options))
    assert factor.find_passkey(env.backend, "acme", assertion) is None
    assert factor.verify(ctx(dict(begun.flow_update)), assertion) == Rejected("not_enrolled")
