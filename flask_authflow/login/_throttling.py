"""The throttle check of a login step, made before any credential is checked.

A refused request is audited (status ``throttled``, the limit as reason) and raises
:class:`~flask_authflow.errors.Throttled` (429 with ``Retry-After``): no Argon2 verify, no
lockout reservation, no session change.
"""

from __future__ import annotations

from flask_authflow.errors import Throttled
from flask_authflow.login._operation import LoginServices, Operation

__all__ = ["refuse_if_throttled"]


def refuse_if_throttled(op: Operation, svc: LoginServices, scope: str) -> None:
    """Count this request of ``scope`` (``login`` or ``factor``) against the limits of its address.

    :raises Throttled: a limit has no room; the refusal is audited first.
    """
    try:
        svc.throttle.hit(scope, address=op.ctx.client_ip)
    except Throttled as exc:
        op.refuse(exc, "throttled", exc.scope)
        raise
