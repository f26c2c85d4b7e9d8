"""The device hook of ``audit_context`` (the device feature's ``device_context``): if it
raises, the failure is logged at WARNING with the exception, once per request, and the
login's audit rows are still written (with the request's address and agent, without a
device): the audit never fails because of the hook."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import flask
import pytest

from flask_authflow import get_state
from flask_authflow._outcomes import Authenticated, FactorCredential
from flask_authflow._web.state import account_admin
from flask_authflow.audit._context import AuditContext, audit_context, audit_source

PASSWORD = "plum tuesday kettle orbit 47"
REQUEST = {"REMOTE_ADDR": "127.0.0.1", "HTTP_USER_AGENT": "agent/1"}


def test_a_failing_device_hook_is_logged_once_and_the_login_is_still_audited(
    authflow_memory_app: Callable[..., flask.Flask], caplog: pytest.LogCaptureFixture
) -> None:
    app = authflow_memory_app()
    state = get_state(app)
    boom = RuntimeError("the device store is down")
    calls: list[Any] = []

    def hook(ctx: AuditContext, request: flask.Request) -> AuditContext:
        calls.append(request)
        raise boom

    audit_source(app).add_device = hook
    with app.app_context():
        account_admin(app).create_user("default", "alice", PASSWORD, source="test", check_policy=False)
    with (
        app.test_request_context("/", environ_base=REQUEST),
        caplog.at_level(logging.WARNING, logger="flask_authflow.audit"),
    ):
        ctx = audit_context()
        assert audit_context() is ctx  # resolved once: the hook is not asked again
        handle = state.service.with_audit_context(ctx)
        handle.begin_login("alice", "default", flask.session)
        outcome = handle.verify_factor(FactorCredential.password(PASSWORD), flask.session)
    assert isinstance(outcome, Authenticated)
    assert len(calls) == 1
    [record] = [r for r in caplog.records if r.name == "flask_authflow.audit"]
    assert record.levelno == logging.WARNING
    assert record.exc_info is not None and record.exc_info[1] is boom
    row = state.backend.audit_rows[-1]
    assert (row.event, row.status) == ("factor_verify", "success")
    assert (row.client_ip, row.ip_source, row.user_agent) == ("127.0.0.1", "peer", "agent/1")
    assert row.device_id is None
