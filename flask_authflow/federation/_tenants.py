"""Multi-tenant issuers: a discovery issuer such as
``https://login.microsoftonline.com/{tenantid}/v2.0`` names no single issuer; each token
is checked against the template filled with the token's own ``tid`` claim, and against
the provider's tenant allow-list when it has one."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from flask_authflow.errors import TokenCheck

__all__ = ["TENANT_ID_RE", "tenant_issuer_refusal"]

#: What a ``tid`` may look like (Microsoft tenant ids are GUIDs; anything URL-unsafe is refused).
TENANT_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def tenant_issuer_refusal(
    claims: Mapping[str, Any], template: str, allowed: tuple[str, ...], placeholder: str
) -> tuple[TokenCheck, str] | None:
    """Why the token's ``iss``/``tid`` pair is refused, or ``None`` when it holds.

    The ``tid`` must be present and well formed, on ``allowed`` when that is not empty,
    and ``iss`` must equal ``template`` with ``placeholder`` replaced by that ``tid``.
    """
    tid = claims.get("tid")
    if not isinstance(tid, str) or not TENANT_ID_RE.fullmatch(tid):
        return TokenCheck.ISSUER, "the token of a multi-tenant provider has no usable tid claim"
    if allowed and tid not in allowed:
        return TokenCheck.ISSUER, f"tenant {tid!r} is not on allowed_tenants"
    if claims.get("iss") != template.replace(placeholder, tid):
        return TokenCheck.ISSUER, "the token's iss is not the issuer of its tid"
    return None
