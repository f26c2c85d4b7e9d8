"""An operator's changes to a user's second factors: a TOTP key provisioned, a factor
removed, a new set of recovery codes (what :class:`~flask_authflow.login._accounts.AccountAdmin`'s
``enroll_totp``, ``disable_factor`` and ``regenerate_recovery_codes`` run).

Each is one :class:`~flask_authflow.login._operator_change.OperatorChange`: every session
of the user ends (a session established under the old factors does not outlive them), and
the factor change commits with its audit row (``factor_enrolled``, ``factor_disabled``,
``recovery_codes_regenerated``; the factor's kind in ``factor``, reason
``sessions_ended=N``), or nothing of it does.
"""

from __future__ import annotations

from functools import partial

from flask_authflow._core.factors import EnrollContext, EnrollmentStart
from flask_authflow._outcomes import FactorKind
from flask_authflow.errors import EnrollmentError, FactorNotRegistered
from flask_authflow.login._operation import Operation, guard_store
from flask_authflow.login._operator_change import OperatorChange

__all__ = ["disable_factor", "enroll_totp", "regenerate_recovery_codes"]

ENROLLED_EVENT = "factor_enrolled"
DISABLED_EVENT = "factor_disabled"
CODES_EVENT = "recovery_codes_regenerated"


def enroll_totp(change: OperatorChange) -> str:
    """A new TOTP key for the user, confirmed at once (it replaces the earlier one); its
    ``otpauth://`` URI. :raises FactorNotRegistered: the app has no TOTP factor (before
    anything ends)."""
    change.svc.enrollment(FactorKind.TOTP)
    start = change.run(
        ENROLLED_EVENT,
        lambda op: _enroll_at_once(change, op, FactorKind.TOTP),
        ends_sessions=ENROLLED_EVENT,
        factor=FactorKind.TOTP.value,
    )[0]
    return str(start.public["otpauth_uri"])


def regenerate_recovery_codes(change: OperatorChange) -> list[str]:
    """A new set of recovery codes for the user, confirmed at once (the previous set stops
    working); the codes. :raises FactorNotRegistered: the app has no recovery codes, or its
    enrollment shows none (an application's own kind)."""
    change.svc.enrollment(FactorKind.RECOVERY_CODE)  # before anything ends

    def issue(op: Operation) -> list[str]:
        codes = _enroll_at_once(change, op, FactorKind.RECOVERY_CODE).public.get("codes")
        if not isinstance(codes, list) or not all(isinstance(code, str) for code in codes):
            raise FactorNotRegistered("the app's recovery_code enrollment shows no codes to hand out")
        return codes

    return change.run(CODES_EVENT, issue, ends_sessions=CODES_EVENT, factor=FactorKind.RECOVERY_CODE.value)[0]


def disable_factor(change: OperatorChange, factor_id: str) -> bool:
    """Remove the user's factor ``factor_id`` (confirmed or pending); ``False``, and nothing
    changes, when the user has no such factor or it is the password."""
    user, store = change.user, change.svc.record_store()
    config = guard_store(lambda: store.get_factor(user.tenant, user.user_id, factor_id))
    if config is None or config.kind is FactorKind.PASSWORD:
        return False

    def remove(op: Operation) -> None:
        if not guard_store(lambda: store.delete_factor(user.tenant, user.user_id, factor_id)):
            raise _FactorGone()  # removed in parallel: nothing of this change is kept

    try:
        change.run(DISABLED_EVENT, remove, ends_sessions=DISABLED_EVENT, factor=config.kind.value)
    except _FactorGone:
        return False
    return True


def _enroll_at_once(change: OperatorChange, op: Operation, kind: FactorKind) -> EnrollmentStart:
    """In ``op``'s unit: begin an enrollment of ``kind`` for the user and confirm it at
    once, replacing the user's earlier factor of that kind."""
    service, user = change.svc, change.user
    store = service.record_store()
    ctx = EnrollContext(
        tenant=user.tenant,
        user_id=user.user_id,
        account_name=user.identifier,
        issuer_name=service.site_name,
        now=op.now,
        store=store,
        flow={},
    )
    start = guard_store(lambda: service.enrollment(kind).begin(ctx, {}))
    confirm = partial(store.confirm_factor, user.tenant, user.user_id, start.factor_id, replace_kind=True)
    if not guard_store(confirm):
        # Only a parallel change of the same user's factor gets here: the new one is gone.
        raise EnrollmentError(f"the new {kind.value} factor could not be confirmed: try again")
    return start


class _FactorGone(Exception):
    """The factor to remove was removed by a parallel change: the change's unit is rolled
    back (never leaves this module, so it is no error an application sees)."""
