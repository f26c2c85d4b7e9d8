"""The intermediate state of a federated login: state, nonce and PKCE verifier.

A :class:`Ceremony` lives in the session's ``flow`` under its own key
(:data:`CEREMONY_KEY`), where application data (``flask.session`` items) cannot reach it.
It is single-use: ``finish_oauth_login`` removes it before checking anything, so a
replayed callback finds nothing and fails with :class:`~flask_authflow.federation._errors.CsrfMismatch`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Final

from flask_authflow._clock import utc
from flask_authflow._core.encoding import b64url_encode

__all__ = ["CEREMONY_KEY", "Ceremony", "pkce_challenge"]

#: Key of the ceremony in the session's flow.
CEREMONY_KEY: Final = "oauth_ceremony"


def pkce_challenge(verifier: str) -> str:
    """The S256 code challenge of ``verifier`` (RFC 7636 §4.2)."""
    return b64url_encode(hashlib.sha256(verifier.encode("ascii")).digest())


@dataclass(frozen=True, slots=True)
class Ceremony:
    """One federated login in progress (all random values from :mod:`secrets`)."""

    provider: str
    issuer: str
    state: str
    nonce: str
    code_verifier: str
    started_at: datetime
    return_to: str | None = None
    pending_workflow: bool = False
    tenant: str | None = None
    #: The ``kid`` of the DPoP key the login's tokens are bound to (``dpop_jkt``), if any.
    dpop_kid: str | None = None

    @classmethod
    def start(
        cls,
        provider: str,
        issuer: str,
        now: datetime,
        *,
        return_to: str | None = None,
        pending_workflow: bool = False,
        tenant: str | None = None,
    ) -> Ceremony:
        return cls(
            provider=provider,
            issuer=issuer,
            state=secrets.token_urlsafe(32),
            nonce=secrets.token_urlsafe(32),
            # 64 characters of the unreserved set: RFC 7636 allows 43 to 128.
            code_verifier=secrets.token_urlsafe(48),
            started_at=now,
            return_to=return_to,
            pending_workflow=pending_workflow,
            tenant=tenant,
        )

    @property
    def code_challenge(self) -> str:
        return pkce_challenge(self.code_verifier)

    def to_flow(self) -> dict[str, Any]:
        """The ceremony as the session keeps it (plain JSON-friendly values)."""
        data = asdict(self)
        data["started_at"] = self.started_at.isoformat()
        return data

    @classmethod
    def from_flow(cls, data: Any) -> Ceremony | None:
        """The ceremony stored by :meth:`to_flow`, or ``None`` if ``data`` is not one."""
        if not isinstance(data, Mapping):
            return None
        try:
            strings = {name: data[name] for name in ("provider", "issuer", "state", "nonce", "code_verifier")}
            if not all(isinstance(value, str) and value for value in strings.values()):
                return None
            started = datetime.fromisoformat(str(data["started_at"]))
            return_to = data.get("return_to")
            tenant = data.get("tenant")
            dpop_kid = data.get("dpop_kid")
            return cls(
                **strings,
                started_at=utc(started),
                return_to=return_to if isinstance(return_to, str) else None,
                pending_workflow=data.get("pending_workflow") is True,
                tenant=tenant if isinstance(tenant, str) else None,
                dpop_kid=dpop_kid if isinstance(dpop_kid, str) and dpop_kid else None,
            )
        except (KeyError, TypeError, ValueError):
            return None
