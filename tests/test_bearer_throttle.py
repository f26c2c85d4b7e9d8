"""Refused bearer tokens count against the client's address, and are audited in aggregate
(issue 28, point 4).

A flood of made-up tokens ran one token lookup and wrote one audit row per request. Now
each refusal counts against the address and its network; past ``bearer.address`` the
request is answered 429 before any lookup, and an address writes at most
``AUDITED_REFUSALS + 2`` rows an hour however long the flood.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from flask import Flask

from flask_authflow._throttle import Throttle, parse_limits
from flask_authflow._web.api_auth import token_service
from flask_authflow._web.state import get_state
from flask_authflow.api_auth._service import AUDITED_REFUSALS
from flask_authflow.api_auth._tokens import new_token
from tests.appfactory import AppFactory
from tests.concurrency import run_together
from tests.test_api_tokens import USER_AGENT, build, user_and_token

FLOODER = "203.0.113.66"


def _made_up() -> str:
    """A well-formed token nobody issued (it gets as far as the lookup)."""
    return new_token().value


def _call(app: Flask, value: str, address: str = FLOODER) -> Any:
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    answer = client.get("/api/me", headers={"User-Agent": USER_AGENT, "Authorization": f"Bearer {value}"})
    answer.close()
    return answer


class _Lookups:
    """Counts the token lookups of the app's store (the real store, wrapped)."""

    def __init__(self, app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
        kind = type(token_service(app).store)
        real = kind.get_api_token
        self.count = 0
        self._lock = threading.Lock()

        def counted(store: Any, token_id: str) -> Any:
            with self._lock:
                self.count += 1
            return real(store, token_id)

        monkeypatch.setattr(kind, "get_api_token", counted)


def _rows(app: Flask) -> list[Any]:
    return [row for row in get_state(app).backend.audit_rows if row.event.startswith("api_token")]


def _throttle(app: Flask, **limits: str) -> None:
    get_state(app).service.throttle._limits.update(parse_limits("t", limits))


def test_a_flood_of_made_up_tokens_is_throttled_before_lookup_and_audited_in_aggregate(
    app_factory: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, _ = build(app_factory)
    _throttle(app, **{"bearer.address": "20/hour"})
    lookups = _Lookups(app, monkeypatch)
    answers = [_call(app, _made_up()) for _ in range(200)]
    assert [answer.status_code for answer in answers] == [401] * 20 + [429] * 180
    assert all(int(answer.headers["Retry-After"]) >= 1 for answer in answers[20:])
    assert answers[-1].get_json()["error"] == "throttled"
    assert lookups.count == 20  # a throttled request looks nothing up
    rows = _rows(app)
    assert [row.event for row in rows] == ["api_token_refused"] * AUDITED_REFUSALS + [
        "api_token_refusals",
        "api_token_throttled",
    ]
    assert all(row.client_ip == FLOODER for row in rows)
    assert rows[-1].status == "throttled" and "bearer.address" in (rows[-1].reason or "")
    assert "20 refused" in (rows[-1].reason or "")


def test_other_addresses_and_valid_tokens_are_not_slowed(app_factory: AppFactory) -> None:
    app, _ = build(app_factory)
    _throttle(app, **{"bearer.address": "3/hour"})
    _, created = user_and_token(app)
    for _ in range(50):  # a valid token is never counted
        assert _call(app, created.value, "198.51.100.5").status_code == 200
    for _ in range(4):
        _call(app, _made_up())
    assert _call(app, _made_up()).status_code == 429
    assert _call(app, created.value, "198.51.100.5").status_code == 200
    assert _call(app, _made_up(), "198.51.100.5").status_code == 401


def test_one_network_shares_its_count(app_factory: AppFactory) -> None:
    app, _ = build(app_factory)
    _throttle(app, **{"bearer.network": "4/hour"})
    statuses = [_call(app, _made_up(), f"203.0.113.{number}").status_code for number in range(1, 7)]
    assert statuses == [401] * 4 + [429] * 2


def test_a_parallel_flood_is_bounded_by_the_requests_in_flight(
    app_factory: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, _ = build(app_factory)
    _throttle(app, **{"bearer.address": "10/hour"})
    lookups = _Lookups(app, monkeypatch)
    statuses = run_together([lambda: _call(app, _made_up()).status_code] * 30)
    assert set(statuses) <= {401, 429} and statuses.count(401) >= 10
    assert lookups.count == statuses.count(401)  # every lookup was a counted refusal
    assert len(_rows(app)) <= AUDITED_REFUSALS + 2
    after = lookups.count
    assert _call(app, _made_up()).status_code == 429 and lookups.count == after


def test_the_throttle_storage_down_refuses_every_bearer_request(
    app_factory: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, _ = build(app_factory)
    _, created = user_and_token(app)
    throttle: Throttle = get_state(app).service.throttle

    class Down:
        def test(self, *args: Any) -> bool:
            raise ConnectionError("the limiter's storage is down")

    monkeypatch.setattr(throttle, "_limiter", Down())
    answer = _call(app, created.value)
    assert answer.status_code == 503  # fail closed
