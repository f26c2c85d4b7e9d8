"""The ``audit`` group: purge old rows, replay the spool."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from flask_authflow.audit.spool import SpoolAuditSink
from flask_authflow.cli.base import (
    CommandFailed,
    authflow_cli,
    authflow_message,
    emit,
    iso_time,
    json_option,
    short_time,
)
from flask_authflow.errors import AuthFlowError
from flask_authflow.web.state import get_state


@authflow_cli.group("audit")
def audit() -> None:
    """Audit trail maintenance."""


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class AgeType(click.ParamType[timedelta, Any]):
    """An age such as ``90d``, ``12w``, ``36h``, ``30m`` or ``3600s``."""

    name = "AGE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        text = str(value).strip().lower()
        number, unit = text[:-1], text[-1:]
        if unit not in _AGE_UNITS or not number.isdigit() or int(number) == 0:
            self.fail(f"{value!r} is not an age such as 90d, 12w, 36h, 30m or 3600s", param, ctx)
        return timedelta(seconds=int(number) * _AGE_UNITS[unit])


def _age_text(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    for unit, name in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds % unit == 0:
            return f"{seconds // unit} {name}(s)"
    return f"{seconds} second(s)"


@audit.command("purge")
@click.option(
    "--older-than",
    "older_than",
    type=AgeType(),
    help="Delete rows older than this (90d, 12w ...); at least AUTHFLOW_AUDIT_RETENTION, the default.",
)
@json_option
def audit_purge(older_than: timedelta | None, as_json: bool) -> None:
    """Delete audit rows older than AUTHFLOW_AUDIT_RETENTION (or a longer --older-than).

    Rows younger than the retention are never deleted: a shorter --older-than is refused.
    """
    state = get_state()
    retention = state.config.audit.retention
    if retention is None:
        raise CommandFailed(
            "AUTHFLOW_AUDIT_RETENTION is None: audit rows are kept forever; set a retention to purge",
            "retention",
        )
    age = older_than if older_than is not None else retention
    if age < retention:
        raise CommandFailed(
            f"--older-than {_age_text(age)} is shorter than AUTHFLOW_AUDIT_RETENTION "
            f"({_age_text(retention)}): rows younger than the retention are never deleted",
            "retention",
        )
    before = state.clock.now() - age
    deleted = state.backend.purge_audit(before)
    emit(
        as_json,
        {"deleted": deleted, "before": iso_time(before), "older_than_seconds": int(age.total_seconds())},
        f"{deleted} audit row(s) older than {_age_text(age)} deleted (written before {short_time(before)})",
    )


@audit.command("replay-spool")
@json_option
def audit_replay_spool(as_json: bool) -> None:
    """Move audit rows spooled while the audit store was down into the store."""
    state = get_state()
    spool = state.service.audit_fallback
    if not isinstance(spool, SpoolAuditSink):
        raise CommandFailed("this app has no audit spool file", "no_spool")
    try:
        moved = spool.replay(state.backend)
    except AuthFlowError as error:
        left = len(spool.records())
        raise CommandFailed(
            f"{authflow_message(error)}; {left} row(s) remain in {spool.path}", error.code
        ) from None
    emit(
        as_json,
        {"moved": moved, "remaining": len(spool.records()), "spool": str(spool.path)},
        f"{moved} audit row(s) moved from {spool.path}",
    )
