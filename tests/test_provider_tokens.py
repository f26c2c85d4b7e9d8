"""Provider tokens kept for the provider's APIs: sealing, refresh (single-flight, rotation),
the typed refusals, revocation on unlink, user deletion and back-channel logout."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation import OAuthError
from flask_authflow.federation._errors import Discovery, ProviderUnreachable, TokenExchange
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._provider import OAuthProviderConfig, TokenSet
from flask_authflow.federation._provider_tokens import (
    InsufficientScope,
    NoProviderToken,
    NoRefreshToken,
    RefreshTokenExpired,
)
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.provider_tokens_support import PROVIDER, Keeper, Scripted, keeper, provider_config

JSON = "application/json"


@pytest.fixture
def op(mock_clock: MockClock) -> TestOpenIDProvider:
    return TestOpenIDProvider("https://op.test", clock=mock_clock)


@pytest.fixture
def script(op: TestOpenIDProvider) -> Scripted:
    scripted = Scripted()
    scripted.install(op)
    return scripted


@pytest.fixture
def backend(mock_clock: MockClock) -> InMemoryBackend:
    return InMemoryBackend(clock=mock_clock)


@pytest.fixture
def kept(backend: InMemoryBackend, mock_clock: MockClock, op: TestOpenIDProvider, script: Scripted) -> Keeper:
    http = RequestsHttpClient(adapters=op.http_adapters())
    return keeper(backend, mock_clock, http, provider_config(op))


def _expire(clock: MockClock) -> None:
    """Past the access token's 300 s, less the 30 s skew."""
    clock.advance(timedelta(seconds=271))


# --- keeping and sealing -------------------------------------------------------------------------


def test_the_tokens_are_sealed_and_bound_to_their_row(kept: Keeper, backend: InMemoryBackend) -> None:
    kept.keep("u1", refresh="refresh-secret")
    row = backend.get_provider_tokens("default", "u1", PROVIDER)
    assert row is not None
    assert row.sealed.startswith("sealed:v1:")
    assert "access-0" not in row.sealed and "refresh-secret" not in row.sealed
    assert "access-0" not in repr(row)
    assert row.scopes == ("openid", "email", "offline_access")  # no scope answered: those requested
    assert kept.get("u1") == "access-0"
    backend.save_provider_tokens(replace(row, user_id="u2"))  # a sealed value copied onto another row
    with pytest.raises(NoProviderToken):
        kept.get("u2")
    assert backend.get_provider_tokens("default", "u2", PROVIDER) is None  # an unreadable row goes
    assert kept.get("u1") == "access-0"


def test_a_provider_without_store_tokens_keeps_nothing(
    backend: InMemoryBackend, mock_clock: MockClock, op: TestOpenIDProvider, script: Scripted
) -> None:
    http = RequestsHttpClient(adapters=op.http_adapters())
    off = keeper(backend, mock_clock, http, provider_config(op, store_tokens=False))
    provider = off.tokens.registry.get(PROVIDER, "default")
    assert not off.tokens.keep("default", "u1", provider, TokenSet("", "a"), ("openid",))
    assert backend.get_provider_tokens("default", "u1", PROVIDER) is None
    with pytest.raises(NoProviderToken) as refused:
        off.get("u1")
    assert refused.value.status == 404


def test_the_granted_scope_of_the_answer_is_kept(kept: Keeper) -> None:
    kept.keep("u1", refresh=None, scope="openid email")
    assert kept.get("u1", scopes=["email"]) == "access-0"
    with pytest.raises(InsufficientScope) as refused:
        kept.get("u1", scopes=["email", "calendar", "drive"])
    assert refused.value.missing == ("calendar", "drive")
    assert refused.value.status == 403 and isinstance(refused.value, OAuthError)
    assert kept.get("u1", scopes="openid email") == "access-0"  # a space-separated string
    with pytest.raises(InsufficientScope):
        kept.get("u1", scopes="openid calendar")


# --- refresh ---------------------------------------------------------------------------------------


def test_a_fresh_token_needs_no_request(kept: Keeper, script: Scripted, mock_clock: MockClock) -> None:
    kept.keep("u1", refresh=script.new_refresh_token())
    mock_clock.advance(timedelta(seconds=269))
    assert kept.get("u1") == "access-0"
    assert script.refreshes == []


def test_an_expiring_token_is_refreshed_and_the_rotated_refresh_token_kept(
    kept: Keeper, script: Scripted, mock_clock: MockClock, backend: InMemoryBackend
) -> None:
    first = script.new_refresh_token()
    kept.keep("u1", refresh=first)
    _expire(mock_clock)
    renewed = kept.get("u1")
    assert renewed.startswith("access-") and renewed != "access-0"
    assert script.refreshes == [first]
    assert kept.get("u1") == renewed  # fresh now: no second request
    _expire(mock_clock)
    again = kept.get("u1")
    assert again != renewed
    assert len(script.refreshes) == 2 and script.refreshes[1] != first  # the rotated one was spent
    assert [a for a in kept.audit if a[0] == "provider_token_refresh"] == [
        ("provider_token_refresh", "success", "rotated"),
        ("provider_token_refresh", "success", "rotated"),
    ]
    row = backend.get_provider_tokens("default", "u1", PROVIDER)
    assert row is not None and row.expires_at == mock_clock.now() + timedelta(seconds=300)


def test_without_rotation_the_refresh_token_stays(
    kept: Keeper, script: Scripted, mock_clock: MockClock
) -> None:
    script.rotate = False
    token = script.new_refresh_token()
    kept.keep("u1", refresh=token)
    for _ in range(3):
        _expire(mock_clock)
        kept.get("u1")
    assert script.refreshes == [token, token, token]
    assert ("provider_token_refresh", "success", None) in kept.audit


def test_an_answer_without_expires_in_is_not_refreshed_again(
    kept: Keeper, script: Scripted, mock_clock: MockClock
) -> None:
    script.expires_in = None
    kept.keep("u1", refresh=script.new_refresh_token())
    _expire(mock_clock)
    token = kept.get("u1")
    mock_clock.advance(timedelta(days=1))
    assert kept.get("u1") == token
    assert len(script.refreshes) == 1


def test_an_expired_token_without_refresh_token_is_refused(
    kept: Keeper, mock_clock: MockClock, backend: InMemoryBackend, script: Scripted
) -> None:
    kept.keep("u1", refresh=None)
    _expire(mock_clock)
    with pytest.raises(NoRefreshToken) as refused:
        kept.get("u1")
    assert refused.value.status == 401
    assert script.refreshes == []
    assert backend.get_provider_tokens("default", "u1", PROVIDER) is not None
    assert kept.audit[-1] == ("provider_token_refresh", "failure", "no_refresh_token")
    with pytest.raises(NoRefreshToken):  # the claim was released: the same answer, not a wait
        kept.get("u1")


def test_invalid_grant_deletes_the_row(
    kept: Keeper, mock_clock: MockClock, backend: InMemoryBackend, script: Scripted
) -> None:
    kept.keep("u1", refresh="expired-at-the-provider")
    _expire(mock_clock)
    with pytest.raises(RefreshTokenExpired) as refused:
        kept.get("u1")
    assert refused.value.status == 401
    assert backend.get_provider_tokens("default", "u1", PROVIDER) is None
    assert kept.audit[-1] == ("provider_token_refresh", "failure", "refresh_token_expired")
    with pytest.raises(NoProviderToken):
        kept.get("u1")


@pytest.mark.parametrize(
    ("answer", "error", "code"),
    [
        ((500, "text/plain", b"oops"), ProviderUnreachable, "provider_unreachable"),
        ((503, JSON, b'{"error": "temporarily_unavailable"}'), ProviderUnreachable, "provider_unreachable"),
        ((200, "text/html", b"<html>login</html>"), ProviderUnreachable, "provider_unreachable"),
        ((200, JSON, b"[1, 2]"), ProviderUnreachable, "provider_unreachable"),
        ((200, JSON, b"{not json"), ProviderUnreachable, "provider_unreachable"),
        ((400, JSON, b'{"error": "invalid_client"}'), TokenExchange, "token_exchange_failed"),
        ((401, "text/plain", b"no"), ProviderUnreachable, "provider_unreachable"),
        ((200, JSON, b'{"access_token": "x", "token_type": "mac"}'), TokenExchange, "token_exchange_failed"),
        ((200, JSON, b'{"token_type": "Bearer"}'), TokenExchange, "token_exchange_failed"),
    ],
)
def test_a_failed_refresh_is_typed_and_leaves_the_row_intact(
    kept: Keeper,
    mock_clock: MockClock,
    backend: InMemoryBackend,
    script: Scripted,
    answer: tuple[int, str, bytes],
    error: type[OAuthError],
    code: str,
) -> None:
    token = script.new_refresh_token()
    kept.keep("u1", refresh=token)
    before = backend.get_provider_tokens("default", "u1", PROVIDER)
    _expire(mock_clock)
    script.answers.append(answer)
    with pytest.raises(error) as refused:
        kept.get("u1")
    assert refused.value.status in (401, 502)
    assert "access-0" not in str(refused.value) and token not in str(refused.value)
    assert backend.get_provider_tokens("default", "u1", PROVIDER) == before
    assert kept.audit[-1] == ("provider_token_refresh", "failure", code)
    assert kept.get("u1").startswith("access-")  # the claim was released: the next call refreshes
    assert script.refreshes == [token, token]


def test_a_row_refreshed_by_another_process_before_the_claim_is_not_refreshed_again(
    kept: Keeper,
    script: Scripted,
    mock_clock: MockClock,
    backend: InMemoryBackend,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kept.keep("u1", refresh=script.new_refresh_token())
    _expire(mock_clock)
    claim = backend.claim_provider_tokens

    def after_another_process(*args: Any, **kwargs: Any) -> bool:
        # Between this process's read and its claim, another one refreshed the row (and
        # ended its claim): the claim succeeds, on a row that is fresh again.
        kept.keep("u1", refresh="rotated-elsewhere")
        return claim(*args, **kwargs)

    monkeypatch.setattr(backend, "claim_provider_tokens", after_another_process)
    assert kept.get("u1") == "access-0"
    assert script.refreshes == []  # the stale refresh token was not spent
    now = mock_clock.now()
    assert claim("default", "u1", PROVIDER, "next", now=now, until=now + timedelta(seconds=1))  # released


def test_no_kept_token_is_refused(kept: Keeper) -> None:
    with pytest.raises(NoProviderToken):
        kept.get("nobody")


def test_twenty_threads_refresh_once(kept: Keeper, script: Scripted, mock_clock: MockClock) -> None:
    kept.keep("u1", refresh=script.new_refresh_token())
    _expire(mock_clock)
    script.delay = 0.2  # every thread arrives while the one refresh is in flight
    barrier = threading.Barrier(20)
    got: list[str] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            barrier.wait(10)
            got.append(kept.get("u1"))
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert len(script.refreshes) == 1
    assert len(got) == 20 and len(set(got)) == 1 and got[0] != "access-0"


# --- forgetting ------------------------------------------------------------------------------------


def test_forget_revokes_both_tokens_and_deletes_the_row(
    kept: Keeper, script: Scripted, backend: InMemoryBackend
) -> None:
    kept.keep("u1", refresh="refresh-x")
    assert kept.tokens.forget("default", "u1", PROVIDER, reason="unlink")
    assert script.revoked == [("refresh_token", "refresh-x"), ("access_token", "access-0")]
    assert backend.get_provider_tokens("default", "u1", PROVIDER) is None
    assert kept.audit[-1] == ("provider_token_revoke", "success", "unlink")
    assert not kept.tokens.forget("default", "u1", PROVIDER, reason="unlink")  # nothing left


def test_a_failed_revocation_still_deletes_the_row(
    kept: Keeper, script: Scripted, backend: InMemoryBackend, caplog: pytest.LogCaptureFixture
) -> None:
    kept.keep("u1", refresh="refresh-x")
    script.revoke_status = 503
    assert kept.tokens.forget("default", "u1", PROVIDER, reason="user_deleted")
    assert backend.get_provider_tokens("default", "u1", PROVIDER) is None
    assert kept.audit[-1] == ("provider_token_revoke", "failure", "user_deleted:provider_unreachable")
    assert "revoking the test-op tokens of a user failed" in caplog.text
    assert "refresh-x" not in caplog.text and "access-0" not in caplog.text


def test_without_a_revocation_endpoint_the_row_is_deleted(
    backend: InMemoryBackend, mock_clock: MockClock, op: TestOpenIDProvider
) -> None:
    http = RequestsHttpClient(adapters=op.http_adapters())
    plain = keeper(backend, mock_clock, http, provider_config(op))
    plain.keep("u1", refresh="r")
    assert plain.tokens.forget_user("default", "u1") == 1
    assert backend.get_provider_tokens("default", "u1", PROVIDER) is None
    assert plain.audit[-1] == ("provider_token_revoke", "success", "user_deleted:no_revocation_endpoint")


def test_a_revocation_endpoint_must_be_https(
    backend: InMemoryBackend, mock_clock: MockClock, op: TestOpenIDProvider
) -> None:
    op.discovery_overrides["revocation_endpoint"] = "http://op.test/revoke"
    http = RequestsHttpClient(adapters=op.http_adapters())
    bad = keeper(backend, mock_clock, http, provider_config(op))
    with pytest.raises(Discovery, match="revocation_endpoint"):
        bad.tokens.registry.get(PROVIDER, "default")


def test_store_tokens_is_a_provider_setting(op: TestOpenIDProvider) -> None:
    values = {
        "discovery_url": op.discovery_url,
        "client_id": "c",
        "client_secret": "s",
        "redirect_uri": "https://rp.test/cb",
    }
    assert OAuthProviderConfig.from_mapping(values).store_tokens is False
    assert OAuthProviderConfig.from_mapping({**values, "store_tokens": True}).store_tokens is True
    with pytest.raises(ConfigurationError, match="unknown key"):
        OAuthProviderConfig.from_mapping({**values, "store_token": True})
