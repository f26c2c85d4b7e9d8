"""Breached passwords: the Pwned Passwords range API, through the provider HTTP client,
mocked with requests-mock (never the internet)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import pytest
import requests
import requests_mock
from flask import Flask

from flask_authflow import AuthFlow
from flask_authflow._web.breach_wiring import password_policy, range_fetch
from flask_authflow._web.state import account_admin
from flask_authflow.errors import ConfigurationError, WeakPassword
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.login._breached import BreachCheckUnavailable, BreachedPasswords, range_query
from flask_authflow.login._password_policy import PasswordPolicy
from flask_authflow.login._settings import PasswordPolicySettings

URL = "https://api.pwnedpasswords.com/range"
BREACHED = "correct horse battery staple"
FRESH = "a quiet meadow of unlikely otters"


def suffix_of(password: str) -> tuple[str, str]:
    digest = hashlib.sha1(password.encode()).hexdigest().upper()
    return digest[:5], digest[5:]


def answer(*entries: tuple[str, int], padding: int = 3) -> str:
    lines = [f"{suffix}:{count}" for suffix, count in entries]
    lines += [f"{secrets.token_hex(18)[:35].upper()}:0" for _ in range(padding)]
    return "\r\n".join(lines)


@pytest.fixture
def mock() -> tuple[requests_mock.Adapter, RequestsHttpClient]:
    adapter = requests_mock.Adapter()
    return adapter, RequestsHttpClient(adapters={"https://": adapter})


def checker(client: RequestsHttpClient, **options: Any) -> BreachedPasswords:
    return BreachedPasswords(range_fetch(URL, client), **options)


def test_only_five_hex_characters_of_the_sha1_leave_the_process(mock: Any) -> None:
    adapter, client = mock
    prefix, suffix = suffix_of(BREACHED)
    adapter.register_uri("GET", f"{URL}/{prefix}", text=answer((suffix, 3)))
    with pytest.raises(WeakPassword) as refused:
        checker(client)(BREACHED)
    assert refused.value.reason == "breached"
    (sent,) = adapter.request_history
    assert sent.url == f"{URL}/{prefix}"
    assert sent.headers["Add-Padding"] == "true"
    everything = sent.url + repr(dict(sent.headers)) + str(sent.body)
    assert suffix not in everything.upper() and BREACHED not in everything
    assert range_query(BREACHED) == (prefix, suffix)


def test_a_password_not_in_the_range_passes(mock: Any) -> None:
    adapter, client = mock
    prefix, _ = suffix_of(FRESH)
    adapter.register_uri("GET", f"{URL}/{prefix}", text=answer(("0" * 35, 12)))
    checker(client)(FRESH)
    assert checker(client).times_seen(FRESH) == 0


def test_padding_entries_never_match(mock: Any) -> None:
    adapter, client = mock
    prefix, suffix = suffix_of(FRESH)
    adapter.register_uri("GET", f"{URL}/{prefix}", text=answer((suffix, 0)))
    checker(client)(FRESH)


def test_min_count_sets_how_often_it_must_have_been_seen(mock: Any) -> None:
    adapter, client = mock
    prefix, suffix = suffix_of(BREACHED)
    adapter.register_uri("GET", f"{URL}/{prefix}", text=answer((suffix.lower(), 4)))
    checker(client, min_count=5)(BREACHED)
    with pytest.raises(WeakPassword):
        checker(client, min_count=4)(BREACHED)


@pytest.mark.parametrize(
    "failure",
    [
        {"exc": requests.exceptions.ConnectTimeout},
        {"exc": requests.exceptions.ConnectionError},
        {"status_code": 503, "text": "busy"},
        {"status_code": 302, "headers": {"Location": "https://elsewhere.example/"}},
        {"text": "<html>captive portal</html>"},
        {"text": "ABCDEF:notanumber"},
        {"content": b"\xff\xfe not utf-8"},
        {"text": "0" * 35 + ":1\r\n" * 20_000},  # over the size cap
    ],
    ids=["timeout", "refused", "503", "redirect", "html", "bad-count", "not-utf8", "huge"],
)
def test_an_unusable_answer_fails_open_or_closed_as_configured(mock: Any, failure: dict[str, Any]) -> None:
    adapter, client = mock
    prefix, _ = suffix_of(BREACHED)
    adapter.register_uri("GET", f"{URL}/{prefix}", **failure)
    assert checker(client).times_seen(BREACHED) is None
    checker(client)(BREACHED)  # fail open: accepted
    with pytest.raises(BreachCheckUnavailable) as refused:
        checker(client, fail_closed=True)(BREACHED)
    assert refused.value.status == 503


def test_the_policy_asks_last_and_only_for_otherwise_good_passwords(mock: Any) -> None:
    adapter, client = mock
    policy = PasswordPolicy(breach_check=checker(client))
    with pytest.raises(WeakPassword) as short:
        policy.check("short", username="alice", tenant="acme")
    assert short.value.reason == "too_short"
    assert adapter.request_history == []  # refused locally: nothing was sent
    prefix, suffix = suffix_of(BREACHED)
    adapter.register_uri("GET", f"{URL}/{prefix}", text=answer((suffix, 1)))
    with pytest.raises(WeakPassword) as breached:
        policy.check(BREACHED, username="alice", tenant="acme")
    assert breached.value.reason == "breached"


def test_the_range_url_must_be_https() -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_PASSWORD_BREACH_CHECK_URL"):
        range_fetch("http://api.example.com/range", RequestsHttpClient())
    settings = PasswordPolicySettings.from_config({"AUTHFLOW_PASSWORD_BREACH_CHECK": True})
    assert settings.breach_check_url == URL and settings.breach_check_fail_closed is False
    assert password_policy(PasswordPolicySettings.from_config({})).breach_check is None


def test_the_app_refuses_a_breached_password_when_switched_on(tmp_path: Any) -> None:
    app = Flask(__name__, instance_path=str(tmp_path))
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_SESSION_STORE="memory",
        AUTHFLOW_PASSWORD_BREACH_CHECK=True,
    )
    AuthFlow(app)
    prefix, suffix = suffix_of(BREACHED)
    with app.app_context(), requests_mock.Mocker() as mocked:
        mocked.get(f"{URL}/{prefix}", text=answer((suffix, 7)))
        with pytest.raises(WeakPassword) as refused:
            account_admin(app).create_user("default", "alice", BREACHED)
        assert refused.value.reason == "breached"
        fresh_prefix, _ = suffix_of(FRESH)
        mocked.get(f"{URL}/{fresh_prefix}", text=answer())
        assert account_admin(app).create_user("default", "bob", FRESH).identifier == "bob"
