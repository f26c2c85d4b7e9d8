"""AuditContext: resolved once per request, never fails."""

from __future__ import annotations

from typing import Any

import flask
import pytest

from flask_authflow.audit._client_ip import TrustedProxies
from flask_authflow.audit._context import AuditContext, audit_context, audit_source, resolve_audit_context

PROXY = TrustedProxies(["10.0.0.0/8"])


def environ(**extra: Any) -> dict[str, Any]:
    return {"REMOTE_ADDR": "10.0.0.1", **extra}


def test_resolves_client_from_trusted_proxy() -> None:
    ctx = resolve_audit_context(
        environ(HTTP_X_FORWARDED_FOR="203.0.113.5", HTTP_USER_AGENT="agent/1", HTTP_X_REQUEST_ID="abc-123"),
        PROXY,
    )
    assert ctx == AuditContext("203.0.113.5", "forwarded", "agent/1", "abc-123")


def test_request_id_from_untrusted_peer_is_replaced() -> None:
    ctx = resolve_audit_context({"REMOTE_ADDR": "198.51.100.1", "HTTP_X_REQUEST_ID": "abc-123"}, PROXY)
    assert ctx.request_id != "abc-123" and len(ctx.request_id) == 32
    assert (ctx.client_ip, ctx.ip_source) == ("198.51.100.1", "peer")


@pytest.mark.parametrize("bad", ["", "a b", "x" * 129, "id\nforged", "ü"])
def test_malformed_request_id_is_replaced(bad: str) -> None:
    ctx = resolve_audit_context(environ(HTTP_X_REQUEST_ID=bad), PROXY)
    assert ctx.request_id != bad and len(ctx.request_id) == 32


def test_user_agent_truncated_and_cleaned() -> None:
    ctx = resolve_audit_context(environ(HTTP_USER_AGENT="A" * 600), PROXY)
    assert ctx.user_agent == "A" * 512
    ctx = resolve_audit_context(environ(HTTP_USER_AGENT="evil\r\nforged: row"), PROXY)
    assert ctx.user_agent == "evil??forged: row"
    assert resolve_audit_context(environ(), PROXY).user_agent is None


def test_no_peer_is_unknown() -> None:
    ctx = resolve_audit_context({}, PROXY)
    assert (ctx.client_ip, ctx.ip_source) == (None, "unknown")


class Exploding:
    @property
    def environ(self) -> Any:
        raise RuntimeError("boom")


@pytest.mark.parametrize(
    "source", [None, 42, Exploding(), {"REMOTE_ADDR": 5}, {"HTTP_X_FORWARDED_FOR": b"x"}]
)
def test_never_raises(source: Any) -> None:
    ctx = resolve_audit_context(source, PROXY)
    assert isinstance(ctx, AuditContext)


def test_defaults_to_loopback_trust() -> None:
    ctx = resolve_audit_context({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.5"}, None)
    assert ctx.client_ip == "203.0.113.5"


def test_outside_a_request_is_unknown() -> None:
    ctx = audit_context()
    assert ctx.ip_source == "unknown" and ctx.client_ip is None


def test_cached_on_g_and_uses_configured_proxies() -> None:
    app = flask.Flask(__name__)
    audit_source(app).trusted_proxies = PROXY  # what init_app gives the audit context
    headers = {"X-Forwarded-For": "203.0.113.5", "User-Agent": "ua"}
    with app.test_request_context("/", headers=headers, environ_base={"REMOTE_ADDR": "10.0.0.1"}):
        first = audit_context()
        assert first is audit_context()
        assert (first.client_ip, first.ip_source, first.user_agent) == ("203.0.113.5", "forwarded", "ua")
    with app.test_request_context("/", headers=headers, environ_base={"REMOTE_ADDR": "10.0.0.1"}):
        assert audit_context().request_id != first.request_id


def test_without_extension_only_loopback_is_trusted() -> None:
    app = flask.Flask(__name__)
    with app.test_request_context(
        "/", headers={"X-Forwarded-For": "203.0.113.5"}, environ_base={"REMOTE_ADDR": "10.0.0.1"}
    ):
        assert (audit_context().client_ip, audit_context().ip_source) == ("10.0.0.1", "peer")


def test_x_real_ip_is_read_from_a_trusted_proxy_only() -> None:
    trusted = resolve_audit_context(environ(HTTP_X_REAL_IP="203.0.113.5"), PROXY)
    assert (trusted.client_ip, trusted.ip_source) == ("203.0.113.5", "forwarded")
    spoofed = resolve_audit_context({"REMOTE_ADDR": "198.51.100.1", "HTTP_X_REAL_IP": "203.0.113.5"}, PROXY)
    assert (spoofed.client_ip, spoofed.ip_source) == ("198.51.100.1", "peer")
    both = resolve_audit_context(
        environ(HTTP_X_FORWARDED_FOR="203.0.113.5", HTTP_X_REAL_IP="198.51.100.77"), PROXY
    )
    assert (both.client_ip, both.ip_source) == ("203.0.113.5", "forwarded")
    malformed = resolve_audit_context(environ(HTTP_X_REAL_IP="203.0.113.5, 6.6.6.6"), PROXY)
    assert (malformed.client_ip, malformed.ip_source) == ("10.0.0.1", "peer")
