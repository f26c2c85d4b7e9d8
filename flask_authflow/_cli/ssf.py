"""The ``ssf`` group: the Shared Signals receiver's poll client (RFC 8936)."""

from __future__ import annotations

import click
from flask import current_app

from flask_authflow._cli.base import authflow_cli, emit, json_option
from flask_authflow._core.session import AuthSession, new_guest_record
from flask_authflow._web.state import get_state
from flask_authflow.audit._context import AuditContext


@authflow_cli.group("ssf")
def ssf() -> None:
    """Receive Shared Signals (security events) from the configured transmitters."""


@ssf.command("poll")
@click.argument("transmitter")
@click.option("--max-events", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--max-rounds", type=click.IntRange(1, 100), default=10, show_default=True)
@json_option
def ssf_poll(transmitter: str, max_events: int, max_rounds: int, as_json: bool) -> None:
    """Poll TRANSMITTER (configured with delivery "poll") for its SETs, handle each one,
    acknowledge the handled ones and report the refused ones to it (run it from cron or a
    scheduler). SETs a store could not take are left for the next poll."""
    # Here, not at the top: the receiver needs the oidc extra, the command line does not.
    from flask_authflow._web.ssf_views import receiver_of
    from flask_authflow.federation._ssf.poll import poll_transmitter

    state = get_state()
    handle = state.service.with_audit_context(AuditContext.unknown())
    session = AuthSession(new_guest_record(state.clock.now()), new=True)
    report = poll_transmitter(
        receiver_of(current_app), handle, session, transmitter, max_events=max_events, max_rounds=max_rounds
    )
    document = {
        "acknowledged": report.acknowledged,
        "refused": report.refused,
        "deferred": report.deferred,
        "requests": report.requests,
    }
    text = (
        f"{len(report.acknowledged)} acknowledged, {len(report.refused)} refused, "
        f"{len(report.deferred)} left for the next poll ({report.requests} request(s))"
    )
    emit(as_json, document, text)
