"""The ``audit`` group: verify the chain, purge old rows, replay the spool."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from flask_authflow._cli.base import (
    CommandFailed,
    authflow_cli,
    authflow_message,
    emit,
    iso_time,
    json_option,
    short_time,
)
from flask_authflow._web.state import get_state
from flask_authflow.audit._chain import ChainReport, purge_chained, verify_chains
from flask_authflow.errors import AuthFlowError


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
    chain = state.config.audit.audit_chain()
    faults: list[ChainReport] = []
    if chain is None:
        deleted = state.backend.purge_audit(before)
    else:  # each chain's verified prefix goes, behind a checkpoint
        deleted, faults = purge_chained(state.backend, chain, before)
    emit(
        as_json,
        {
            "deleted": deleted,
            "before": iso_time(before),
            "older_than_seconds": int(age.total_seconds()),
            "chains_kept": [report.to_dict() for report in faults],
        },
        f"{deleted} audit row(s) older than {_age_text(age)} deleted (written before {short_time(before)})"
        + "".join(f"\n{_report_text(report)}: its rows were kept" for report in faults),
    )
    if faults:
        raise click.exceptions.Exit(1)


_FAULTS = {
    "broken": "a row was edited (its MAC does not verify)",
    "missing": "rows are missing (deleted)",
    "reordered": "rows were moved or swapped",
    "unchained": "a row without a MAC follows chained rows",
    "checkpoint": "the checkpoint is forged or altered",
}


def _report_text(report: ChainReport) -> str:
    name = "(no tenant)" if report.tenant is None else f"tenant {report.tenant!r}"
    counts = f"{report.verified} row(s) verified"
    if report.unchained_prefix:
        counts += f", {report.unchained_prefix} unchained row(s) before the chain"
    if report.checkpoint_seq:
        counts += f", from the checkpoint at seq {report.checkpoint_seq}"
    if report.fault is None:
        return f"{name}: ok ({counts})"
    fault = report.fault
    where = f"seq {fault.seq}" + ("" if fault.row_id is None else f", row id {fault.row_id}")
    return f"{name}: BROKEN at {where}: {_FAULTS[fault.kind]} ({counts})"


@audit.command("verify")
@json_option
def audit_verify(as_json: bool) -> None:
    """Check every tenant's audit chain; report the first broken, missing or reordered row.

    The exit status is 1 when a chain is broken.
    """
    chain = get_state().config.audit.chain_keys()
    if chain is None:
        raise CommandFailed("AUTHFLOW_AUDIT_CHAIN_KEY is not set: there is no chain to verify", "chain_off")
    reports = verify_chains(get_state().backend, chain)
    ok = all(report.ok for report in reports)
    emit(
        as_json,
        {"ok": ok, "chains": [report.to_dict() for report in reports]},
        "\n".join(_report_text(report) for report in reports) or "no audit rows",
    )
    if not ok:
        raise click.exceptions.Exit(1)


@audit.command("replay-spool")
@json_option
def audit_replay_spool(as_json: bool) -> None:
    """Move audit rows spooled while the audit store was down into the store."""
    state = get_state()
    spool = state.audit_spool
    if spool is None:
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
