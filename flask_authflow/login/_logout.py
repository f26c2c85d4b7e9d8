"""``logout``: back to Guest, whatever the audit store says.

Logging out is the safe direction: the session always ends. Its audit row goes to the
audit sink, or when that fails to the durable fallback; a row that even the fallback
cannot take is counted and logged, never dropped silently.
"""

from __future__ import annotations

from flask_authflow._core.session import AuthSession
from flask_authflow.audit._context import AuditContext
from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.errors import AuditWriteError
from flask_authflow.login._operation import PHANTOM_PREFIX, LoginServices, Operation, log, write_rows

__all__ = ["logout"]


def logout(svc: LoginServices, ctx: AuditContext, session: AuthSession) -> None:
    """Back to Guest: everything dropped, session id rotated."""
    user_id, tenant = session.user_id, session.tenant
    op = Operation(svc, ctx, session, "logout", tenant=tenant, user_id=user_id)
    session.clear()
    op.audit("success")
    if user_id is not None and not user_id.startswith(PHANTOM_PREFIX):
        op.signal("session_revoked", user_id=user_id, tenant=tenant, reason="logout")
    try:
        write_rows(svc, op.rows)
    except AuditWriteError:
        _fallback(svc, op.rows)
    op.release()


def _fallback(svc: LoginServices, rows: list[AuditRecord]) -> None:
    counters, fallback = svc.counters, svc.audit_fallback
    for row in rows:
        try:
            if fallback is None:
                raise AuditWriteError("no audit fallback is configured")
            fallback.write(row)
        except Exception:  # noqa: BLE001 - every failure is logged and counted below
            counters.increment("audit_lost_writes")
            log.error("audit row of a logout lost: the audit store and its fallback both failed (%s)", row)
        else:
            counters.increment("audit_fallback_writes")
            log.warning("audit store failed; logout row written to the fallback %r", fallback)
