"""``flask authflow users import``: users of another application, with everything that keeps
them as safe as they were.

The users come from a CSV or JSON file (see :mod:`.importing.files`) or straight from a
database (``--from-url``; Flask-Security-Too, see :mod:`.importing.fst`). The database
password may stay off the command line: ``AUTHFLOW_IMPORT_DATABASE_PASSWORD``, or
``--password-prompt``.

**Nothing is lowered in silence.** Every user is planned first (:mod:`.importing.plan`):
what carries, what is refused, what the user will be asked at the next sign-in. A factor
the user had that cannot be carried (its secret cannot be opened) would make the account
easier to enter: such a run is refused unless ``--accept-reenrollment`` is given, and then
those users must set the factor up again after their password before their session is
authenticated. ``--dry-run`` prints the plan and writes nothing.

Each user is written in one unit of work (:mod:`.importing.write`) with the stored hash as
it is (the first login replaces it with Argon2id). A user already present is left as it is,
so a second run imports nothing and refuses nothing new.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import click
from flask import current_app

from flask_authflow._cli.base import CommandFailed, emit, json_option, tenant_or_default
from flask_authflow._cli.importing.files import read_file
from flask_authflow._cli.importing.links import issuer_resolver
from flask_authflow._cli.importing.model import ImportedUser, SourceData
from flask_authflow._cli.importing.plan import PlanContext, Refused, UserPlan, plan_user
from flask_authflow._cli.importing.sources import PASSWORD_VARIABLE, database_url, read_database
from flask_authflow._cli.importing.write import ImportStore, WriteTarget, write_roles, write_user
from flask_authflow._cli.users import users
from flask_authflow._outcomes import FactorKind
from flask_authflow._web.state import AuthFlowState, account_admin, get_state
from flask_authflow.login._legacy_hashes import LegacyHashes, identify

__all__ = ["ImportReport", "plan_all", "users_import"]

#: Kinds whose stored secrets need the app's factor sealer.
_SEALED = frozenset({"totp", "hotp", "recovery_code"})
#: The legacy schemes of passlib's formats: what Flask-Security-Too stores (under its salt).
_PASSLIB_SCHEMES = frozenset(
    {"bcrypt", "argon2", "pbkdf2_sha256", "pbkdf2_sha512", "sha256_crypt", "sha512_crypt"}
)


@dataclass(slots=True)
class ImportReport:
    """What an import did (or, in a dry run, would do), user by user."""

    source: str
    plans: list[UserPlan]
    notices: list[str] = field(default_factory=list)
    dry_run: bool = False
    imported: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    roles_not_carried: list[str] = field(default_factory=list)

    @property
    def lowered(self) -> list[UserPlan]:
        return [p for p in self.plans if p.lowered and p.refused is None]

    def document(self) -> dict[str, Any]:
        plans = [p for p in self.plans if p.refused is None]
        return {
            "source": self.source,
            "dry_run": self.dry_run,
            "imported": len(self.imported),
            "already_present": len(self.present),
            "refused": [{"identifier": who, "reason": why} for who, why in self.refused],
            "users": [p.document() for p in self.plans],
            "summary": {
                "users": len(self.plans),
                "carried": sum(1 for p in plans if p.carried),
                "asked": sum(1 for p in plans if p.asked),
                "lowered": len(self.lowered),
                "refused": len(self.refused),
            },
            "roles_not_carried": self.roles_not_carried,
            "notices": self.notices,
        }

    def text(self) -> str:
        lines = [*(f"note: {notice}" for notice in self.notices)]
        planned = [p for p in self.plans if p.refused is None]
        if self.dry_run:
            lines.extend(_plan_lines(p) for p in self.plans)
            lines.append(f"dry run: {len(planned)} would be imported, {len(self.refused)} refused")
        else:
            imported, present = len(self.imported), len(self.present)
            lines.append(f"{imported} imported, {present} already present, {len(self.refused)} refused")
        lines.extend(f"refused {who!r}: {why}" for who, why in self.refused)
        asked = [p for p in planned if p.asked]
        if asked:
            lines.append(
                f"{len(asked)} will be asked at the next sign-in: "
                + "; ".join(f"{p.identifier} ({', '.join(p.asked)})" for p in asked)
            )
        if self.lowered:
            lines.append(
                f"{len(self.lowered)} would be lowered: "
                + "; ".join(f"{p.identifier} ({'; '.join(p.lowered)})" for p in self.lowered)
            )
        lines.extend(f"role not carried (name not accepted): {name}" for name in self.roles_not_carried)
        return "\n".join(lines)


def _plan_lines(plan: UserPlan) -> str:
    who = plan.identifier or plan.label
    if plan.refused is not None:
        return f"{who}: refused ({plan.refused})"
    parts = [f"{who}: carries {', '.join(plan.carried) or 'nothing'}"]
    if plan.asked:
        parts.append(f"asked: {', '.join(plan.asked)}")
    if plan.lowered:
        parts.append(f"would be lowered: {'; '.join(plan.lowered)}")
    if plan.not_carried:
        parts.append(f"not carried: {', '.join(plan.not_carried)}")
    return "\n  ".join(parts)


def _registered(state: AuthFlowState) -> Callable[[str], bool]:
    """Which factor kinds this app can verify (and so carry or ask for)."""

    def registered(kind: str) -> bool:
        if kind not in FactorKind or state.service.factor(FactorKind(kind)) is None:
            return False
        if kind in _SEALED and state.sealer is None:
            return False
        return kind != FactorKind.EMAIL_OTP.value or state.mail_sender is not None

    return registered


def plan_all(data: SourceData, ctx: PlanContext, source: str, dry_run: bool) -> ImportReport:
    """Plan every user the source read (nothing written)."""
    plans: list[UserPlan] = []
    for item in data.users:
        if isinstance(item, ImportedUser):
            plans.append(plan_user(item, ctx))
        else:
            plans.append(UserPlan(label=item.label, refused=item.reason))
    report = ImportReport(source, plans, list(data.notices), dry_run)
    report.refused.extend((p.identifier or p.label, str(p.refused)) for p in plans if p.refused is not None)
    return report


def _passlib_hashes(report: ImportReport) -> bool:
    """Whether any user carries a hash of passlib's formats (the ones Flask-Security-Too writes)."""
    return any(
        p.user is not None
        and p.user.password_hash is not None
        and identify(p.user.password_hash) in _PASSLIB_SCHEMES
        for p in report.plans
        if p.refused is None
    )


def _read(
    file: Path | None, url: str | None, table: str, prompt: bool, groups_as_roles: bool = False
) -> tuple[str, SourceData]:
    if file is not None:
        return "file", read_file(file)
    password = os.environ.get(PASSWORD_VARIABLE) or None
    if prompt:
        password = click.prompt("Password of the source database", hide_input=True)
    parsed = database_url(str(url), password)
    name, data = read_database(parsed, table, current_app.config, django_groups_as_roles=groups_as_roles)
    if password is None and database_url(str(url), None).password:
        notice = (
            "the URL carries a password (the process list and shell history keep it): leave it out "
            f"and set {PASSWORD_VARIABLE}, or use --password-prompt"
        )
        data = SourceData(data.users, data.roles, [*data.notices, notice])
    return name, data


def _write_all(report: ImportReport, target: WriteTarget, data: SourceData) -> None:
    planned = [p for p in report.plans if p.refused is None]
    report.roles_not_carried = write_roles(target.store, {p.tenant for p in planned}, data.roles)
    roles = frozenset(r.name for r in data.roles) - set(report.roles_not_carried)
    for plan in planned:
        try:
            created = write_user(target, plan, roles)
        except Refused as refused:
            plan.refused = refused.reason
            report.refused.append((plan.identifier, refused.reason))
            continue
        (report.imported if created else report.present).append(plan.identifier)


def _refuse_lowering(report: ImportReport) -> None:
    names = ", ".join(p.identifier for p in report.lowered[:10])
    more = f" and {len(report.lowered) - 10} more" if len(report.lowered) > 10 else ""
    raise CommandFailed(
        f"{len(report.lowered)} user(s) would be lowered (a factor they had cannot be carried): "
        f"{names}{more}. "
        "Nothing was imported. See --dry-run; give the keys that open their factors, or run with "
        "--accept-reenrollment so that they must set them up again at their next sign-in",
        "would_lower",
    )


@users.command("import")
@click.argument("file", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--from-url", "url", help="Read a Flask-Security-Too or django-allauth database at this SQLAlchemy URL."
)
@click.option("--table", default="user", show_default=True, help="The users table of --from-url.")
@click.option("--tenant", help="The tenant of rows that name none (default: AUTHFLOW_DEFAULT_TENANT).")
@click.option(
    "--dry-run", is_flag=True, help="Print what each user carries, is asked and is refused; write nothing."
)
@click.option(
    "--accept-reenrollment",
    is_flag=True,
    help="Import users with a factor that cannot be carried: they must set it up again after their password.",
)
@click.option(
    "--password-prompt",
    is_flag=True,
    help=f"Ask for the --from-url database's password (else {PASSWORD_VARIABLE}, if set).",
)
@click.option(
    "--django-groups-as-roles",
    is_flag=True,
    help="With a django-allauth project's database: its groups become roles, with their permissions.",
)
@json_option
def users_import(
    file: Path | None,
    url: str | None,
    table: str,
    tenant: str | None,
    dry_run: bool,
    accept_reenrollment: bool,
    password_prompt: bool,
    django_groups_as_roles: bool,
    as_json: bool,
) -> None:
    """Import users with their password hashes, factors and roles from FILE (CSV or JSON) or
    --from-url; users already present are left as they are."""
    if (file is None) == (url is None):
        raise click.UsageError("give a FILE or --from-url, not both")
    if password_prompt and url is None:
        raise click.UsageError("--password-prompt goes with --from-url")
    state = get_state()
    source, data = _read(file, url, table, password_prompt, django_groups_as_roles)
    hashing = state.config.hashing
    legacy = LegacyHashes(
        hashing.legacy_schemes, salt=hashing.legacy_salt, argon2_over_ceiling=state.hasher.over_ceiling
    )
    ctx = PlanContext(
        tenant_or_default(tenant),
        state.hasher,
        legacy,
        _registered(state),
        accept_reenrollment,
        issuer_of=issuer_resolver(state.federation),
    )
    report = plan_all(data, ctx, source, dry_run)
    if hashing.legacy_salt is None and _passlib_hashes(report):
        report.notices.append(
            "AUTHFLOW_LEGACY_PASSWORD_SALT is not set: hashes made by Flask-Security-Too (an HMAC under its "
            "SECURITY_PASSWORD_SALT) will not match; set it if these users come from Flask-Security-Too"
        )
    if dry_run:
        if report.lowered and not accept_reenrollment:
            report.notices.append(
                "the run would be refused: users would be lowered (see --accept-reenrollment)"
            )
        emit(as_json, report.document(), report.text())
        return
    if report.lowered and not accept_reenrollment:
        _refuse_lowering(report)
    target = WriteTarget(
        store=cast(ImportStore, state.backend),
        sealer=state.sealer,
        now=state.clock.now(),
        verification_ttl=get_state().config.accounts.verification_ttl,
        app_users=account_admin().app_users,
    )
    _write_all(report, target, data)
    emit(as_json, report.document(), report.text())
