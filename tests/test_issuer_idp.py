"""LocalIdp: minting rules, headers, rotation, multi-process reload, discovery, signals."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.encoding import b64url_decode
from flask_authflow.errors import (
    ConfigurationError,
    DuplicateKeyId,
    IssuanceError,
    KeyStoreError,
    TokenVerificationError,
)
from flask_authflow.issuer import (
    FileLocalIdpKeyStore,
    LocalIdp,
    LocalIdpSigningKey,
    MemoryLocalIdpKeyStore,
    MintClaims,
)
from flask_authflow.issuer._keys import LoadedKeys
from flask_authflow.jose import JwtVerifier
from flask_authflow.jose._jwks import JwksHandle
from flask_authflow.signals import key_rotated, token_minted

ISS = "https://issuer.test"
NOW = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> MockClock:
    return MockClock(NOW)


@pytest.fixture
def key() -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_es256()


@pytest.fixture
def idp(key: LocalIdpSigningKey, clock: MockClock) -> LocalIdp:
    return LocalIdp.from_key_store(ISS, MemoryLocalIdpKeyStore.with_current(key)).with_clock(clock)


def claims(minutes: float = 5, sub: str = "svc") -> MintClaims:
    return MintClaims(sub, NOW + timedelta(minutes=minutes)).with_audience("api")


def parts(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    head, body, _ = token.split(".")
    return json.loads(b64url_decode(head)), json.loads(b64url_decode(body))


def verify(idp: LocalIdp, token: str, clock: MockClock, audience: str = "api") -> Any:
    return (
        JwtVerifier(idp.jwks_handle(), clock=clock)
        .with_algorithms(["ES256", "RS256"])
        .verify(token, audience, issuer=ISS)
    )


# -- minting --------------------------------------------------------------------------------------


def test_mint_sets_iss_iat_jti_and_header(idp: LocalIdp, key: LocalIdpSigningKey, clock: MockClock) -> None:
    token = idp.mint(claims())
    header, payload = parts(token)
    assert header == {"alg": "ES256", "kid": key.kid, "typ": "JWT"}
    assert payload["iss"] == ISS
    assert payload["sub"] == "svc"
    assert payload["aud"] == "api"
    assert payload["iat"] == int(NOW.timestamp())
    assert payload["exp"] == int(NOW.timestamp()) + 300
    assert len(b64url_decode(payload["jti"])) == 16  # 128 random bits
    assert verify(idp, token, clock).sub == "svc"


def test_jti_is_unique(idp: LocalIdp) -> None:
    jtis = {parts(idp.mint(claims()))[1]["jti"] for _ in range(200)}
    assert len(jtis) == 200


def test_optional_claims(idp: LocalIdp, clock: MockClock) -> None:
    c = (
        MintClaims("svc", NOW + timedelta(minutes=10))
        .with_audiences(["a", "b"])
        .with_issued_at(NOW - timedelta(seconds=5))
        .with_not_before(NOW + timedelta(seconds=1))
        .with_jwt_id("my-id")
        .with_custom_claim("tenant", "acme")
        .with_custom_claim("roles", ["reader"])
    )
    _, payload = parts(idp.mint(c))
    assert payload["aud"] == ["a", "b"]
    assert payload["iat"] == int(NOW.timestamp()) - 5
    assert payload["nbf"] == int(NOW.timestamp()) + 1
    assert payload["jti"] == "my-id"
    assert payload["tenant"] == "acme" and payload["roles"] == ["reader"]


def test_exp_as_epoch_seconds(idp: LocalIdp) -> None:
    exp = int(NOW.timestamp()) + 60
    assert parts(idp.mint(MintClaims("svc", exp)))[1]["exp"] == exp
    naive = (NOW + timedelta(minutes=1)).replace(tzinfo=None)
    assert parts(idp.mint(MintClaims("svc", naive)))[1]["exp"] == exp


def test_builders_return_new_values() -> None:
    base = MintClaims("svc", NOW + timedelta(minutes=1))
    derived = base.with_audience("a").with_custom_claim("x", 1).with_jwt_id("j")
    assert base.audiences == () and base.custom == {} and base.jwt_id is None
    assert derived.audiences == ("a",) and derived.custom == {"x": 1}
    with pytest.raises(AttributeError):
        base.subject = "root"  # type: ignore[misc]
    value = ["r"]
    c = base.with_custom_claim("roles", value)
    value.append("admin")
    assert c.custom["roles"] == ["r"]  # deep-copied


def test_past_or_present_exp_refused(idp: LocalIdp) -> None:
    with pytest.raises(IssuanceError, match="exp"):
        idp.mint(MintClaims("svc", NOW - timedelta(seconds=1)))
    with pytest.raises(IssuanceError, match="exp"):
        idp.mint(MintClaims("svc", NOW))


def test_nbf_after_exp_refused(idp: LocalIdp) -> None:
    c = claims(1).with_not_before(NOW + timedelta(minutes=2))
    with pytest.raises(IssuanceError, match="nbf"):
        idp.mint(c)


def test_iat_after_exp_refused(idp: LocalIdp) -> None:
    with pytest.raises(IssuanceError, match="iat"):
        idp.mint(claims(1).with_issued_at(NOW + timedelta(minutes=2)))


@pytest.mark.parametrize("name", ["iss", "sub", "aud", "exp", "nbf", "iat", "jti"])
def test_custom_claims_cannot_override_registered(name: str) -> None:
    with pytest.raises(IssuanceError, match="registered"):
        claims().with_custom_claim(name, "x")
    with pytest.raises(IssuanceError, match="registered"):
        MintClaims("svc", NOW, custom={name: "x"})


@pytest.mark.parametrize("value", [object(), float("nan"), {1, 2}, b"bytes"])
def test_custom_claims_must_be_json(value: Any) -> None:
    with pytest.raises(IssuanceError, match="JSON"):
        claims().with_custom_claim("x", value)


@pytest.mark.parametrize("bad", ["", 5, None])
def test_subject_and_audience_must_be_strings(bad: Any) -> None:
    with pytest.raises(IssuanceError):
        MintClaims(bad, NOW)
    with pytest.raises(IssuanceError):
        claims().with_audience(bad)


@pytest.mark.parametrize("bad", ["tomorrow", float("inf"), True, None])
def test_exp_must_be_a_time(bad: Any) -> None:
    with pytest.raises(IssuanceError):
        MintClaims("svc", bad)


def test_default_max_lifetime_is_one_hour(idp: LocalIdp) -> None:
    idp.mint(claims(60))
    with pytest.raises(IssuanceError, match="lifetime"):
        idp.mint(claims(60 + 1 / 60))
    idp = idp.with_max_lifetime(timedelta(hours=2))
    idp.mint(claims(119))
    idp = idp.with_max_lifetime(None)
    idp.mint(claims(60 * 24 * 30))


@pytest.mark.parametrize("bad", [timedelta(0), timedelta(seconds=-1), 3600])
def test_bad_max_lifetime(idp: LocalIdp, bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        idp.with_max_lifetime(bad)


def test_mint_needs_mint_claims(idp: LocalIdp) -> None:
    with pytest.raises(IssuanceError):
        idp.mint({"sub": "x"})  # type: ignore[arg-type]


def test_oversized_token_refused(idp: LocalIdp) -> None:
    with pytest.raises(IssuanceError, match="longer"):
        idp.mint(claims().with_custom_claim("blob", "x" * 20_000))


# -- headers --------------------------------------------------------------------------------------


def test_mint_with_header(idp: LocalIdp, key: LocalIdpSigningKey, clock: MockClock) -> None:
    token = idp.mint_with_header(
        claims(), {"typ": "at+jwt", "x-trace": "abc", "alg": "ES256", "kid": key.kid}
    )
    header, _ = parts(token)
    assert header == {"alg": "ES256", "kid": key.kid, "typ": "at+jwt", "x-trace": "abc"}
    assert verify(idp, token, clock).header["typ"] == "at+jwt"


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "RS256"},
        {"alg": "none"},
        {"alg": "HS256"},
        {"kid": "someone-else"},
        {"crit": ["exp"]},
        {"b64": False},
        {"jku": "https://evil.test/jwks"},
        {"jwk": {"kty": "EC"}},
        {"x5u": "https://evil.test/cert"},
        {"x5c": ["AAAA"]},
        {"zip": "DEF"},  # never a compressed payload
        {"enc": "A256GCM"},  # nor a JWE header
        {"typ": ""},
        {"typ": 5},
        {"": "empty"},
        {"big": "x" * 2000},
        {"obj": object()},
    ],
)
def test_bad_headers_refused(idp: LocalIdp, header: dict[str, Any]) -> None:
    with pytest.raises(IssuanceError):
        idp.mint_with_header(claims(), header)


# -- rotation ---------------------------------------------------------------------------------------


def test_rotation_keeps_old_tokens_valid(idp: LocalIdp, key: LocalIdpSigningKey, clock: MockClock) -> None:
    old_token = idp.mint(claims())
    handle = idp.jwks_handle()
    version = handle.version
    new = LocalIdpSigningKey.generate_es256()
    idp.rotate_signing_key(new)
    assert idp.jwks_handle() is handle and handle.version > version
    assert idp.current_kid == new.kid
    new_token = idp.mint(claims())
    assert parts(new_token)[0]["kid"] == new.kid
    assert verify(idp, old_token, clock).kid == key.kid
    assert verify(idp, new_token, clock).kid == new.kid
    assert [k["kid"] for k in idp.jwks()["keys"]] == [new.kid, key.kid]
    assert idp.key_store.load_all().current == new


def test_rotation_refuses_duplicate_kid(idp: LocalIdp, key: LocalIdpSigningKey) -> None:
    version = idp.jwks_handle().version
    with pytest.raises(DuplicateKeyId):
        idp.rotate_signing_key(key.with_key_id(key.kid))
    assert idp.current_kid == key.kid
    assert idp.jwks_handle().version == version


def test_rotation_needs_a_key(idp: LocalIdp) -> None:
    with pytest.raises(ConfigurationError):
        idp.rotate_signing_key("key")  # type: ignore[arg-type]


class FailingStore(MemoryLocalIdpKeyStore):
    def rotate(self, new_current: LocalIdpSigningKey) -> None:
        raise KeyStoreError("disk full")


def test_rotation_persists_before_swapping(key: LocalIdpSigningKey) -> None:
    idp = LocalIdp.from_key_store(ISS, FailingStore(LoadedKeys(key)))
    with pytest.raises(KeyStoreError):
        idp.rotate_signing_key(LocalIdpSigningKey.generate_es256())
    assert idp.current_kid == key.kid
    assert [k["kid"] for k in idp.jwks()["keys"]] == [key.kid]


def test_no_window_where_a_minted_token_does_not_verify(idp: LocalIdp) -> None:
    idp = idp.with_clock(MockClock(datetime.now(UTC)))
    verifier = JwtVerifier(idp.jwks_handle()).with_algorithms(["ES256"])
    stop = threading.Event()
    failures: list[BaseException] = []

    def mint_and_verify() -> None:
        while not stop.is_set():
            c = MintClaims("svc", datetime.now(UTC) + timedelta(minutes=5)).with_audience("api")
            try:
                verifier.verify(idp.mint(c), "api")
            except TokenVerificationError as exc:
                failures.append(exc)

    workers = [threading.Thread(target=mint_and_verify) for _ in range(3)]
    for w in workers:
        w.start()
    for _ in range(25):
        idp.rotate_signing_key(LocalIdpSigningKey.generate_es256())
    stop.set()
    for w in workers:
        w.join()
    assert not failures


# -- several processes sharing one store ------------------------------------------------------------


def test_rotation_by_another_process_is_picked_up(tmp_path: Path, clock: MockClock) -> None:
    first = LocalIdpSigningKey.generate_es256()
    FileLocalIdpKeyStore.initialize(tmp_path / "keys", first)
    a = LocalIdp.from_key_store(ISS, FileLocalIdpKeyStore(tmp_path / "keys")).with_clock(clock)
    b = LocalIdp.from_key_store(ISS, FileLocalIdpKeyStore(tmp_path / "keys")).with_clock(clock)
    b = b.with_reload_interval(timedelta(0))
    new = LocalIdpSigningKey.generate_es256()
    a.rotate_signing_key(new)
    token = b.mint(claims())
    assert parts(token)[0]["kid"] == new.kid
    assert {k["kid"] for k in b.jwks()["keys"]} == {first.kid, new.kid}
    assert verify(b, token, clock).kid == new.kid


def test_reload_waits_for_the_interval(tmp_path: Path, clock: MockClock) -> None:
    FileLocalIdpKeyStore.initialize(tmp_path / "keys", LocalIdpSigningKey.generate_es256())
    a = LocalIdp.from_key_store(ISS, FileLocalIdpKeyStore(tmp_path / "keys"))
    b = LocalIdp.from_key_store(ISS, FileLocalIdpKeyStore(tmp_path / "keys")).with_clock(clock)
    old = b.current_kid
    a.rotate_signing_key(LocalIdpSigningKey.generate_es256())
    assert parts(b.mint(claims()))[0]["kid"] == old  # default interval: 5 s, not yet elapsed
    assert b.reload() is True
    assert b.current_kid == a.current_kid
    assert b.reload() is False


def test_periodic_reload_follows_the_injected_clock(tmp_path: Path, clock: MockClock) -> None:
    """The 5 s reload interval is measured on the issuer's clock."""
    FileLocalIdpKeyStore.initialize(tmp_path / "keys", LocalIdpSigningKey.generate_es256())
    a = LocalIdp.from_key_store(ISS, FileLocalIdpKeyStore(tmp_path / "keys"))
    b = LocalIdp.from_key_store(ISS, FileLocalIdpKeyStore(tmp_path / "keys")).with_clock(clock)
    old = b.current_kid
    a.rotate_signing_key(LocalIdpSigningKey.generate_es256())
    clock.advance(timedelta(seconds=4.9))
    assert parts(b.mint(claims()))[0]["kid"] == old
    clock.advance(timedelta(seconds=0.2))  # 5.1 s on the clock, no real time passed
    assert parts(b.mint(claims()))[0]["kid"] == a.current_kid
    assert {k["kid"] for k in b.jwks()["keys"]} == {old, a.current_kid}


def test_store_failure_during_reload_keeps_serving(
    key: LocalIdpSigningKey, clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Flaky(MemoryLocalIdpKeyStore):
        broken = False

        def load_all(self) -> LoadedKeys:
            if self.broken:
                raise KeyStoreError("database down")
            return super().load_all()

    store = Flaky(LoadedKeys(key))
    idp = LocalIdp.from_key_store(ISS, store).with_clock(clock).with_reload_interval(timedelta(0))
    store.broken = True
    with caplog.at_level(logging.WARNING, logger="flask_authflow.issuer"):
        token = idp.mint(claims())
    assert parts(token)[0]["kid"] == key.kid
    assert "could not re-read" in caplog.text
    with pytest.raises(KeyStoreError):
        idp.reload()


def test_empty_store_refused() -> None:
    with pytest.raises(KeyStoreError):
        LocalIdp.from_key_store(ISS, MemoryLocalIdpKeyStore())


# -- configuration and discovery --------------------------------------------------------------------


@pytest.mark.parametrize("issuer", ["", "issuer", "ftp://x", "https://", "https://x/?q=1", "https://x/#f", 5])
def test_issuer_must_be_a_url(issuer: Any, key: LocalIdpSigningKey) -> None:
    with pytest.raises(ConfigurationError):
        LocalIdp.from_key_store(issuer, MemoryLocalIdpKeyStore.with_current(key))


def test_discovery_document(idp: LocalIdp) -> None:
    idp = idp.with_metadata_field("service_documentation", "https://docs.test").with_metadata_field(
        "x_tier", ["a"]
    )
    doc = idp.discovery_document()
    assert doc == {
        "issuer": ISS,
        "jwks_uri": f"{ISS}/jwks.json",
        "id_token_signing_alg_values_supported": ["ES256"],
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "service_documentation": "https://docs.test",
        "x_tier": ["a"],
    }
    doc["x_tier"].append("mutated")
    assert idp.discovery_document()["x_tier"] == ["a"]


def test_discovery_lists_historical_algorithms(idp: LocalIdp) -> None:
    idp.rotate_signing_key(LocalIdpSigningKey.generate_rs256(bits=2048))
    assert idp.discovery_document()["id_token_signing_alg_values_supported"] == ["RS256", "ES256"]


@pytest.mark.parametrize(
    "name",
    [
        "issuer",
        "jwks_uri",
        "id_token_signing_alg_values_supported",
        "response_types_supported",
        "subject_types_supported",
        "",
    ],
)
def test_metadata_cannot_override_core_fields(idp: LocalIdp, name: str) -> None:
    with pytest.raises(ConfigurationError):
        idp.with_metadata_field(name, "https://evil.test")


def test_metadata_must_be_json(idp: LocalIdp) -> None:
    with pytest.raises(ConfigurationError):
        idp.with_metadata_field("x", object())


def test_base_url(idp: LocalIdp) -> None:
    idp = idp.with_base_url("https://public.example/idp/")
    assert idp.discovery_document()["jwks_uri"] == "https://public.example/idp/jwks.json"
    assert idp.discovery_document()["issuer"] == ISS
    for bad in ["public.example", "javascript:alert(1)", "https://x/?a=b", ""]:
        with pytest.raises(ConfigurationError):
            idp.with_base_url(bad)


def test_extra_public_jwk(idp: LocalIdp, key: LocalIdpSigningKey) -> None:
    extra = LocalIdpSigningKey.generate_es256().with_key_id("next")
    idp = idp.with_extra_public_jwk(extra.public_jwk())
    assert [k["kid"] for k in idp.jwks()["keys"]] == [key.kid, "next"]
    with pytest.raises(ConfigurationError):
        idp.with_extra_public_jwk(extra.public_jwk())
    with pytest.raises(ConfigurationError):
        idp.with_extra_public_jwk({"kty": "oct", "k": "AAAA", "kid": "x"})
    nokid = dict(LocalIdpSigningKey.generate_es256().public_jwk())
    del nokid["kid"]
    with pytest.raises(ConfigurationError):
        idp.with_extra_public_jwk(nokid)
    idp.rotate_signing_key(LocalIdpSigningKey.generate_es256())
    assert "next" in [k["kid"] for k in idp.jwks()["keys"]]


def test_shared_jwks_handle(key: LocalIdpSigningKey) -> None:
    handle = JwksHandle()
    idp = LocalIdp.from_key_store(ISS, MemoryLocalIdpKeyStore.with_current(key), jwks_handle=handle)
    assert idp.jwks_handle() is handle
    assert [k.kid for k in handle.snapshot().keys] == [key.kid]


def test_verifier_shortcut(idp: LocalIdp) -> None:
    assert idp.verifier().algorithms == frozenset({"ES256"})
    assert idp.verifier().verify(idp.mint(claims()), "api").sub == "svc"


def test_repr_has_no_secrets(idp: LocalIdp, key: LocalIdpSigningKey) -> None:
    text = repr(idp)
    assert key.kid in text and "PRIVATE" not in text
    assert "custom" in repr(claims().with_custom_claim("ssn", "123-45-6789"))
    assert "123-45-6789" not in repr(claims().with_custom_claim("ssn", "123-45-6789"))


# -- signals ------------------------------------------------------------------------------------------


def test_signals(idp: LocalIdp, key: LocalIdpSigningKey) -> None:
    minted: list[dict[str, Any]] = []
    rotated: list[dict[str, Any]] = []

    def on_mint(sender: Any, **kw: Any) -> None:
        minted.append({"sender": sender, **kw})

    def on_rotate(sender: Any, **kw: Any) -> None:
        rotated.append({"sender": sender, **kw})

    with token_minted.connected_to(on_mint), key_rotated.connected_to(on_rotate):
        token = idp.mint(claims())
        new = LocalIdpSigningKey.generate_es256()
        idp.rotate_signing_key(new)
    assert len(minted) == 1
    assert minted[0]["sender"] is idp and minted[0]["kid"] == key.kid and minted[0]["algorithm"] == "ES256"
    assert minted[0]["claims"]["sub"] == "svc"
    assert token not in json.dumps(minted[0]["claims"])
    assert rotated == [{"sender": idp, "previous_kid": key.kid, "new_kid": new.kid}]


def test_signal_names_exist() -> None:
    from flask_authflow import signals

    for name in (
        "login_succeeded",
        "login_failed",
        "factor_verified",
        "session_revoked",
        "key_rotated",
        "token_minted",
    ):
        assert hasattr(getattr(signals, name), "send")


def test_builders_return_a_new_issuer_and_leave_the_original_unchanged(
    idp: LocalIdp, clock: MockClock
) -> None:
    """Every with_* builder returns a new value."""
    extra = LocalIdpSigningKey.generate_es256().with_key_id("next")
    before_doc, before_jwks = idp.discovery_document(), idp.jwks()
    other_clock = MockClock(NOW + timedelta(days=1))
    built = {
        "base_url": idp.with_base_url("https://public.example/idp"),
        "metadata": idp.with_metadata_field("x_tier", "gold"),
        "clock": idp.with_clock(other_clock),
        "max_lifetime": idp.with_max_lifetime(timedelta(hours=3)),
        "reload": idp.with_reload_interval(None),
        "extra": idp.with_extra_public_jwk(extra.public_jwk()),
    }
    for name, new in built.items():
        assert new is not idp, name
    assert built["base_url"].jwks_uri == "https://public.example/idp/jwks.json"
    assert built["metadata"].discovery_document()["x_tier"] == "gold"
    assert built["clock"].clock is other_clock
    assert built["max_lifetime"].max_lifetime == timedelta(hours=3)
    assert "next" in [k["kid"] for k in built["extra"].jwks()["keys"]]
    # The original is unchanged by every builder above.
    assert idp.discovery_document() == before_doc
    assert idp.jwks() == before_jwks
    assert idp.clock is clock
    assert idp.max_lifetime == timedelta(hours=1)
    assert idp.jwks_uri == f"{ISS}/jwks.json"
