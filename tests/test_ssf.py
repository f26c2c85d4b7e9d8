"""The Shared Signals receiver against a scripted transmitter (the in-process test provider's
keys sign the SETs; its JWKS is the transmitter's): each handled event through the push
endpoint, each refusal with its RFC 8935 error code, a SET pushed ten times at once, a store
that is down, a failed audit write, the subjects of RFC 9493, the configuration refused at
``init_app`` and the poll client against a scripted poll endpoint."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask, jsonify, request
from flask.testing import FlaskClient
from flask_wtf.csrf import CSRFProtect

from flask_authflow import AuthFlow, fresh_login_required, login_required, signals
from flask_authflow._clock import MockClock
from flask_authflow._core.ports import ApiTokenRecord, StoredProviderTokens
from flask_authflow._web.devices import TRUST_KEPT_ON
from flask_authflow._web.ssf_views import receiver_of
from flask_authflow.errors import ConfigurationError, StoreUnavailable
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._ssf import CAEP, RISC, VERIFICATION_EVENT
from flask_authflow.federation._ssf.events import SESSION_ONLY_REASONS
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing import login_test_client
from flask_authflow.testing._provider import TestOpenIDProvider, wsgi_adapter
from flask_authflow.testing._users import add_user
from tests.appfactory import base_app, make_app
from tests.concurrency import run_together

PUSH_TOKEN = "push-secret-" + "x" * 32
AUDIENCE = "https://rp.example/ssf"
PUSH_URL = "/auth/ssf/push/tx"
POLL_BASE = "https://poll.test"
PASSWORD = "a long enough password here"
SET_TYPE = "application/secevent+jwt"


class FlakySessions(MemorySessionStore):
    """A memory session store whose next bulk revocation finds the store down."""

    down = False

    def delete_user_sessions(self, tenant: str, user_id: str) -> int:
        if self.down:
            self.down = False
            raise StoreUnavailable("the session store is down")
        return super().delete_user_sessions(tenant, user_id)


@dataclass
class Receiver:
    app: Flask
    backend: InMemoryBackend
    sessions: FlakySessions
    transmitter: TestOpenIDProvider
    clock: MockClock
    received: list[dict[str, Any]] = field(default_factory=list)

    def claims(self, event: str = f"{CAEP}session-revoked", **over: Any) -> dict[str, Any]:
        claims: dict[str, Any] = {
            "iss": self.transmitter.issuer,
            "aud": AUDIENCE,
            "iat": int(self.clock.now().timestamp()),
            "jti": secrets.token_hex(8),
            "sub_id": {"format": "iss_sub", "iss": self.transmitter.issuer, "sub": "alice-sub"},
            "events": {event: {}},
        }
        claims.update(over)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, event: str = f"{CAEP}session-revoked", *, typ: str = "secevent+jwt", **over: Any) -> str:
        return self.transmitter.sign(self.claims(event, **over), typ=typ)

    def push(self, token: str, *, auth: str | None = PUSH_TOKEN, content_type: str = SET_TYPE) -> Any:
        headers = {"Content-Type": content_type}
        if auth is not None:
            headers["Authorization"] = f"Bearer {auth}"
        return self.app.test_client().post(PUSH_URL, data=token, headers=headers)

    def rows(self, prefix: str = "ssf_") -> list[tuple[str, str, str | None]]:
        return [(r.event, r.status, r.reason) for r in self.backend.audit_rows if r.event.startswith(prefix)]

    def signed_in(self, name: str) -> FlaskClient:
        client = login_test_client(self.app, name, password=PASSWORD)
        assert client.get("/me").status_code == 200
        return client


def _transmitters(provider: TestOpenIDProvider, **over: Any) -> dict[str, Any]:
    entry = {
        "issuer": provider.issuer,
        "jwks_uri": provider.discovery_document()["jwks_uri"],
        "audience": AUDIENCE,
        "algorithms": [provider.algorithm],
        "push_token": PUSH_TOKEN,
    }
    entry.update(over)
    return {"tx": {k: v for k, v in entry.items() if v is not None}}


def make_receiver(
    provider: TestOpenIDProvider, clock: MockClock, hasher: Any, poll_app: Flask | None = None, **over: Any
) -> Receiver:
    backend = InMemoryBackend(clock=clock)
    sessions = FlakySessions(clock=clock)
    adapters = dict(provider.http_adapters())
    if poll_app is not None:
        adapters[POLL_BASE] = wsgi_adapter(poll_app)
    app = make_app(
        authflow=AuthFlow(),
        import_name="ssf_app",
        backend=backend,
        session_store=sessions,
        clock=clock,
        hasher=hasher,
        http_client=RequestsHttpClient(adapters=adapters),
        AUTHFLOW_SSF_TRANSMITTERS=_transmitters(provider, **over),
    )

    @app.get("/me")
    @login_required
    def me() -> str:
        return "me"

    @app.get("/fresh")
    @fresh_login_required
    def fresh() -> str:
        return "fresh"

    for name in ("alice", "bob"):
        user = add_user(backend, "default", name, PASSWORD, hasher=hasher)
        backend.link_identity(provider.issuer, f"{name}-sub", "default", user.user_id)
    return Receiver(app, backend, sessions, provider, clock)


@pytest.fixture
def transmitter(mock_clock: MockClock) -> TestOpenIDProvider:
    """The scripted transmitter: the test provider's keys (ES256: quick to make) and JWKS."""
    return TestOpenIDProvider("https://op.test", clock=mock_clock, algorithm="ES256")


@pytest.fixture
def rx(transmitter: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any) -> Iterator[Receiver]:
    receiver = make_receiver(transmitter, mock_clock, authflow_hasher)

    def record(sender: Any, **fields: Any) -> None:
        receiver.received.append(fields)

    signals.security_event_received.connect(record)
    yield receiver
    signals.security_event_received.disconnect(record)


def _user(rx: Receiver, name: str) -> Any:
    user = rx.backend.find_user("default", name)
    assert user is not None
    return user


# --- the handled events --------------------------------------------------------------------------

ENDING = [f"{CAEP}session-revoked", f"{RISC}sessions-revoked", f"{RISC}account-credential-change-required"]


@pytest.mark.parametrize("event", ENDING)
def test_an_ending_event_ends_the_subjects_sessions_only(rx: Receiver, event: str) -> None:
    alice, bob = rx.signed_in("alice"), rx.signed_in("bob")
    answer = rx.push(rx.token(event))
    assert answer.status_code == 202 and answer.headers["Cache-Control"] == "no-store"
    assert alice.get("/me", headers={"Accept": "application/json"}).status_code == 401
    assert bob.get("/me").status_code == 200
    [(audit_event, status, reason)] = rx.rows()
    assert status == "success" and reason is not None and reason.startswith("sessions=1")
    assert rx.received[0]["user_id"] == _user(rx, "alice").user_id and rx.received[0]["event"] == event
    assert audit_event.startswith("ssf_")


def test_a_session_revocation_keeps_device_trust_as_back_channel_logout_does(rx: Receiver) -> None:
    alice = rx.signed_in("alice")
    user, now = _user(rx, "alice"), rx.clock.now()
    rx.backend.touch_device(
        "default", user.user_id, "laptop-device-0123456789", label="L", place=None, now=now
    )
    assert rx.backend.trust_device(
        "default", user.user_id, "laptop-device-0123456789", now + timedelta(days=30)
    )
    assert rx.push(rx.token(f"{CAEP}session-revoked")).status_code == 202
    assert alice.get("/me", headers={"Accept": "application/json"}).status_code == 401
    device = rx.backend.get_device("default", user.user_id, "laptop-device-0123456789")
    assert device is not None and device.trusted_at(rx.clock.now())
    assert SESSION_ONLY_REASONS <= TRUST_KEPT_ON


def test_credential_change_ends_sessions_and_device_trust(rx: Receiver) -> None:
    alice = rx.signed_in("alice")
    user = _user(rx, "alice")
    now = rx.clock.now()
    rx.backend.touch_device(
        "default", user.user_id, "laptop-device-0123456789", label="Laptop", place=None, now=now
    )
    assert rx.backend.trust_device(
        "default", user.user_id, "laptop-device-0123456789", now + timedelta(days=30)
    )
    assert rx.push(rx.token(f"{CAEP}credential-change")).status_code == 202
    assert alice.get("/me", headers={"Accept": "application/json"}).status_code == 401
    device = rx.backend.get_device("default", user.user_id, "laptop-device-0123456789")
    assert device is not None and not device.trusted_at(rx.clock.now())
    assert rx.rows() == [("ssf_credential_change", "success", "sessions=1 devices=1")]


@pytest.mark.parametrize("event", [f"{RISC}account-disabled", f"{RISC}account-purged"])
def test_account_disabled_or_purged_disables_and_ends_everything(rx: Receiver, event: str) -> None:
    alice = rx.signed_in("alice")
    user, now = _user(rx, "alice"), rx.clock.now()
    rx.backend.add_api_token(ApiTokenRecord("tok1", "default", user.user_id, "ci", "0" * 64, (), now))
    assert rx.push(rx.token(event)).status_code == 202
    assert _user(rx, "alice").disabled and not _user(rx, "bob").disabled
    assert rx.backend.list_api_tokens("default", user.user_id) == []
    [(_, _, reason)] = rx.rows()
    assert reason == "sessions=1 disabled devices=0 provider_tokens=0 api_tokens=1"
    assert alice.get("/me", headers={"Accept": "application/json"}).status_code == 401
    with pytest.raises(RuntimeError):  # the login of a disabled account does not complete
        login_test_client(rx.app, "alice", password=PASSWORD)


@pytest.mark.parametrize("event", [f"{CAEP}token-claims-change", f"{CAEP}assurance-level-change"])
def test_a_claims_or_assurance_change_asks_a_fresh_login(rx: Receiver, event: str) -> None:
    alice, bob = rx.signed_in("alice"), rx.signed_in("bob")
    assert alice.get("/fresh").status_code == 200
    assert rx.push(rx.token(event)).status_code == 202
    assert alice.get("/me").status_code == 200  # still signed in ...
    assert alice.get("/fresh", headers={"Accept": "application/json"}).status_code == 401  # ... not fresh
    assert bob.get("/fresh").status_code == 200
    assert rx.rows()[0][2] == "marked=1"


def test_tokens_revoked_drops_the_stored_provider_tokens(rx: Receiver) -> None:
    user = _user(rx, "alice")
    stored = StoredProviderTokens(
        "default", user.user_id, "test-op", "sealed", "Bearer", (), None, rx.clock.now()
    )
    rx.backend.save_provider_tokens(stored)
    assert rx.push(rx.token(f"{RISC}tokens-revoked")).status_code == 202
    assert rx.backend.provider_tokens_of_user("default", user.user_id) == []
    assert rx.rows() == [("ssf_tokens_revoked", "success", "provider_tokens=1")]


def test_unknown_events_and_subjects_are_acknowledged_audited_and_change_nothing(rx: Receiver) -> None:
    alice = rx.signed_in("alice")
    unknown_event = rx.token(f"{CAEP}device-compliance-change")
    unknown_subject = rx.token(sub_id={"format": "iss_sub", "iss": rx.transmitter.issuer, "sub": "nobody"})
    other_format = rx.token(sub_id={"format": "phone_number", "phone_number": "+12065550100"})
    for token in (unknown_event, unknown_subject, other_format):
        assert rx.push(token).status_code == 202
    assert alice.get("/me").status_code == 200
    assert rx.rows() == [
        ("ssf_unknown_event", "success", "ignored"),
        ("ssf_session_revoked", "success", "sessions=0"),
        ("ssf_session_revoked", "success", "sessions=0"),
    ]
    assert [r["user_id"] for r in rx.received] == [_user(rx, "alice").user_id, None, None]


def test_an_email_subject_matches_only_a_verified_address(rx: Receiver) -> None:
    user = _user(rx, "alice")
    rx.backend.set_email("default", user.user_id, "alice@example.com", verified_at=None)
    alice = rx.signed_in("alice")
    subject = {"format": "email", "email": "Alice@Example.com"}
    assert rx.push(rx.token(sub_id=subject)).status_code == 202
    assert alice.get("/me").status_code == 200  # unverified: not her
    rx.backend.set_email("default", user.user_id, "alice@example.com", verified_at=rx.clock.now())
    assert rx.push(rx.token(sub_id=subject)).status_code == 202
    assert alice.get("/me", headers={"Accept": "application/json"}).status_code == 401


def test_a_complex_subject_with_a_session_ends_that_provider_session(rx: Receiver) -> None:
    alice = rx.signed_in("alice")  # as if signed in through the provider's session op-session-1
    record = next(iter(rx.sessions.list_user_sessions("default", _user(rx, "alice").user_id)))
    rx.sessions.save(
        replace(record, federation={"issuer": rx.transmitter.issuer, "sid": "op-session-1"}),
        rx.clock.now() + timedelta(hours=1),
        existing=True,
    )
    other = rx.signed_in("alice")  # a session that did not come from the provider session
    subject = {"format": "complex", "session": {"format": "opaque", "id": "op-session-1"}}
    assert rx.push(rx.token(sub_id=subject)).status_code == 202
    assert alice.get("/me", headers={"Accept": "application/json"}).status_code == 401
    assert other.get("/me").status_code == 200
    assert rx.rows() == [("ssf_session_revoked", "success", "sessions=1")]


def test_opaque_and_complex_subjects(rx: Receiver) -> None:
    alice, bob = rx.signed_in("alice"), rx.signed_in("bob")
    assert rx.push(rx.token(sub_id={"format": "opaque", "id": "bob-sub"})).status_code == 202
    assert bob.get("/me", headers={"Accept": "application/json"}).status_code == 401
    complex_subject = {"format": "complex", "user": {"format": "opaque", "id": "alice-sub"}}
    assert rx.push(rx.token(sub_id=complex_subject)).status_code == 202
    assert alice.get("/me", headers={"Accept": "application/json"}).status_code == 401


def test_the_verification_event_is_accepted_and_its_state_recorded(rx: Receiver) -> None:
    token = rx.token(VERIFICATION_EVENT, sub_id=None, events={VERIFICATION_EVENT: {"state": "abc-123"}})
    assert rx.push(token).status_code == 202
    assert receiver_of(rx.app).verified["tx"] == "abc-123"
    assert rx.rows() == [("ssf_verification", "success", "state=abc-123")]


# --- refusals --------------------------------------------------------------------------------------


def _two_events(rx: Receiver) -> dict[str, Any]:
    return {"events": {f"{CAEP}session-revoked": {}, f"{RISC}sessions-revoked": {}}}


REFUSALS: dict[str, tuple[Any, str]] = {
    "alg_none": (
        lambda rx: rx.transmitter.sign(rx.claims(), typ="secevent+jwt", tamper={"alg_none"}),
        "invalid_key",
    ),
    "hs256": (
        lambda rx: rx.transmitter.sign(rx.claims(), typ="secevent+jwt", tamper={"hs256_public_key"}),
        "invalid_key",
    ),
    "bad_signature": (
        lambda rx: rx.transmitter.sign(rx.claims(), typ="secevent+jwt", tamper={"bad_signature"}),
        "invalid_key",
    ),
    "unknown_kid": (
        lambda rx: rx.transmitter.sign(rx.claims(), typ="secevent+jwt", tamper={"unknown_kid"}),
        "invalid_key",
    ),
    "wrong_audience": (lambda rx: rx.token(aud="https://other.example"), "invalid_audience"),
    "wrong_issuer": (lambda rx: rx.token(iss="https://evil.test"), "invalid_issuer"),
    "wrong_typ": (lambda rx: rx.token(typ="JWT"), "invalid_request"),
    "two_events": (lambda rx: rx.token(**_two_events(rx)), "invalid_request"),
    "no_events": (lambda rx: rx.token(events={}), "invalid_request"),
    "top_level_sub": (lambda rx: rx.token(sub="alice-sub"), "invalid_request"),
    "no_jti": (lambda rx: rx.token(jti=None), "invalid_request"),
    "no_iat": (lambda rx: rx.token(iat=None), "invalid_request"),
    "iat_in_the_future": (lambda rx: rx.token(iat=int(rx.clock.now().timestamp()) + 3600), "invalid_request"),
    "too_old": (lambda rx: rx.token(iat=int(rx.clock.now().timestamp()) - 3600), "invalid_request"),
    "expired": (lambda rx: rx.token(exp=int(rx.clock.now().timestamp()) - 600), "invalid_request"),
    "subject_without_sub": (lambda rx: rx.token(sub_id={"format": "iss_sub", "iss": "x"}), "invalid_request"),
    "not_a_jwt": (lambda rx: "not.a-jwt", "invalid_request"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_bad_set_is_refused_with_its_rfc_8935_code_and_audited(rx: Receiver, case: str) -> None:
    make, code = REFUSALS[case]
    alice = rx.signed_in("alice")
    answer = rx.push(make(rx))
    assert answer.status_code == 400, answer.text
    assert answer.json["err"] == code and answer.headers["Cache-Control"] == "no-store"
    assert alice.get("/me").status_code == 200
    assert rx.rows() == [("ssf_refused", "failure", code)] and rx.received == []


def test_a_replayed_set_is_refused_and_ends_nothing(rx: Receiver) -> None:
    token = rx.token()
    assert rx.push(token).status_code == 202
    alice = rx.signed_in("alice")  # signed in again after the revocation
    replay = rx.push(token)
    assert replay.status_code == 400 and replay.json["err"] == "invalid_request"
    assert alice.get("/me").status_code == 200
    assert [row[:2] for row in rx.rows()] == [("ssf_session_revoked", "success"), ("ssf_refused", "failure")]
    assert len(rx.received) == 1


@pytest.mark.parametrize(
    ("auth", "content_type", "code"),
    [
        (None, SET_TYPE, "authentication_failed"),
        ("wrong-" + PUSH_TOKEN, SET_TYPE, "authentication_failed"),
        (PUSH_TOKEN, "application/jwt", "invalid_request"),
    ],
)
def test_a_push_without_credentials_or_of_another_type_is_refused(
    rx: Receiver, auth: str | None, content_type: str, code: str
) -> None:
    answer = rx.push(rx.token(), auth=auth, content_type=content_type)
    assert answer.status_code == 400 and answer.json["err"] == code
    assert rx.rows() == []  # refused before the SET is read


def test_an_unknown_transmitter_is_not_found(rx: Receiver) -> None:
    answer = rx.app.test_client().post("/auth/ssf/push/nope", data=rx.token(), content_type=SET_TYPE)
    assert answer.status_code == 404 and answer.json["err"] == "invalid_request"


def test_a_poll_transmitter_refuses_pushes(
    transmitter: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any
) -> None:
    rx = make_receiver(
        transmitter,
        mock_clock,
        authflow_hasher,
        delivery="poll",
        push_token=None,
        poll_endpoint=f"{POLL_BASE}/poll",
        poll_token="poll-token",
    )
    answer = rx.push(rx.token(), auth=None)
    assert answer.status_code == 400 and answer.json["err"] == "access_denied"


# --- fail closed, one commit, retries -------------------------------------------------------------


def test_a_session_store_that_is_down_answers_503_and_the_retry_works(rx: Receiver) -> None:
    alice = rx.signed_in("alice")
    token = rx.token(f"{RISC}account-disabled")
    rx.sessions.down = True
    answer = rx.push(token)
    assert answer.status_code == 503 and answer.headers["Retry-After"]
    assert not _user(rx, "alice").disabled and rx.rows() == [] and rx.received == []
    assert rx.push(token).status_code == 202  # not acknowledged before: the retry is handled
    assert _user(rx, "alice").disabled
    assert alice.get("/me", headers={"Accept": "application/json"}).status_code == 401


def test_a_transmitter_whose_keys_cannot_be_fetched_answers_503(
    transmitter: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any
) -> None:
    rx = make_receiver(
        transmitter, mock_clock, authflow_hasher, jwks_uri=f"{transmitter.issuer}/no-keys-here"
    )
    answer = rx.push(rx.token(f"{RISC}account-disabled"))
    assert answer.status_code == 503 and answer.json["err"] == "temporarily_unavailable"
    assert not _user(rx, "alice").disabled and rx.rows() == []


def test_a_failed_audit_write_leaves_nothing_half_done_and_the_retry_works(rx: Receiver) -> None:
    user = _user(rx, "alice")
    stored = StoredProviderTokens(
        "default", user.user_id, "test-op", "sealed", "Bearer", (), None, rx.clock.now()
    )
    rx.backend.save_provider_tokens(stored)
    token = rx.token(f"{RISC}account-disabled")
    rx.backend.fail_next_write()
    assert rx.push(token).status_code == 503
    assert not _user(rx, "alice").disabled  # the unit rolled back: jti, account, tokens
    assert len(rx.backend.provider_tokens_of_user("default", user.user_id)) == 1 and rx.received == []
    assert rx.push(token).status_code == 202
    assert _user(rx, "alice").disabled and rx.backend.provider_tokens_of_user("default", user.user_id) == []


def test_the_same_set_pushed_ten_times_at_once_is_handled_once(rx: Receiver) -> None:
    rx.signed_in("alice")
    token = rx.token(f"{RISC}account-disabled")
    statuses = run_together([lambda: rx.push(token).status_code for _ in range(10)])
    assert sorted(statuses) == [202] + [400] * 9
    assert [row[:2] for row in rx.rows()].count(("ssf_account_disabled", "success")) == 1
    assert len(rx.received) == 1


# --- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "over",
    [
        {"push_token": None},
        {"push_token": "short"},
        {"unauthenticated_push": True},
        {"algorithms": ["none"]},
        {"algorithms": ["HS256"]},
        {"algorithms": "ES256"},
        {"jwks_uri": "http://keys.example/jwks"},
        {"audience": None},
        {"delivery": "poll"},
        {"delivery": "carrier-pigeon"},
        {"max_age": timedelta(days=30)},
        {"colour": "blue"},
    ],
)
def test_unsafe_configuration_is_refused_at_init_app(
    transmitter: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any, over: dict[str, Any]
) -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_SSF_TRANSMITTERS"):
        make_receiver(transmitter, mock_clock, authflow_hasher, **over)


def test_the_push_endpoint_is_exempt_from_flask_wtfs_csrf_check(
    transmitter: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any
) -> None:
    app = base_app(SECRET_KEY=secrets.token_hex(32), AUTHFLOW_SSF_TRANSMITTERS=_transmitters(transmitter))
    CSRFProtect(app)  # before AuthFlow, as the views' pages ask
    backend = InMemoryBackend(clock=mock_clock)
    http = RequestsHttpClient(adapters=transmitter.http_adapters())
    AuthFlow().init_app(app, backend=backend, clock=mock_clock, hasher=authflow_hasher, http_client=http)
    rx = Receiver(app, backend, FlakySessions(clock=mock_clock), transmitter, mock_clock)
    assert rx.push(rx.token()).status_code == 202


def test_a_transmitters_secrets_stay_out_of_its_repr(rx: Receiver) -> None:
    shown = repr(receiver_of(rx.app).transmitter("tx"))
    assert "tx" in shown and PUSH_TOKEN not in shown


def test_pushes_without_a_secret_only_when_the_app_says_so(
    transmitter: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any
) -> None:
    rx = make_receiver(transmitter, mock_clock, authflow_hasher, push_token=None, unauthenticated_push=True)
    rx.signed_in("alice")
    assert rx.push(rx.token(), auth=None).status_code == 202


# --- the poll client -------------------------------------------------------------------------------


@dataclass
class ScriptedPollEndpoint:
    """Serves queued SETs per RFC 8936 and records every poll request."""

    queued: dict[str, str] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def app(self) -> Flask:
        app = Flask("poll_endpoint")

        @app.post("/poll")
        def poll() -> Any:
            if request.headers.get("Authorization") != "Bearer poll-token":
                return jsonify(err="authentication_failed"), 401
            body = request.get_json()
            self.requests.append(body)
            for jti in [*body.get("ack", []), *body.get("setErrs", {})]:
                self.queued.pop(jti, None)
            sets = dict(list(self.queued.items())[: body["maxEvents"]])
            return jsonify(sets=sets, moreAvailable=len(self.queued) > len(sets))

        return app


def test_the_poll_client_acknowledges_handled_sets_and_reports_refused_ones(
    transmitter: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any
) -> None:
    endpoint = ScriptedPollEndpoint()
    rx = make_receiver(
        transmitter,
        mock_clock,
        authflow_hasher,
        endpoint.app(),
        delivery="poll",
        push_token=None,
        poll_endpoint=f"{POLL_BASE}/poll",
        poll_token="poll-token",
    )
    alice = rx.signed_in("alice")
    good, bad = rx.claims(), rx.claims(aud="https://other.example")
    endpoint.queued = {
        good["jti"]: rx.transmitter.sign(good, typ=SET_TYPE),
        bad["jti"]: rx.transmitter.sign(bad, typ=SET_TYPE),
    }
    result = rx.app.test_cli_runner().invoke(args=["authflow", "ssf", "poll", "tx", "--max-events", "1"])
    assert result.exit_code == 0, result.output
    assert endpoint.queued == {}
    acked = [jti for body in endpoint.requests for jti in body["ack"]]
    errs = {jti: e["err"] for body in endpoint.requests for jti, e in body.get("setErrs", {}).items()}
    assert acked == [good["jti"]] and errs == {bad["jti"]: "invalid_audience"}
    assert alice.get("/me", headers={"Accept": "application/json"}).status_code == 401
    assert "1 acknowledged" in result.output and "1 refused" in result.output
