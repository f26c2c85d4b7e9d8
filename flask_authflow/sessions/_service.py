"""``authflow.sessions``: the live sessions of a user, listed and revoked.

A session is named by the hash of its id (:func:`~flask_authflow._core.session.sid_hash`),
as the account page and ``flask authflow sessions list`` show it: the id itself never
leaves the store. Ending sessions is the account feature's decision (it ends more than
sessions: see :meth:`Sessions.revoke_all`), so the app wires the two revocations in; this
object gives them the shape of :mod:`flask_authflow._core.service`.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Generic, TypeVar

from flask_authflow._core.ports import MaintainedSessionStore
from flask_authflow._core.service import TenantScoped
from flask_authflow._core.session import SessionRecord, sid_hash

__all__ = ["Sessions"]

EndedT = TypeVar("EndedT")


class Sessions(TenantScoped, Generic[EndedT]):
    """List a user's sessions; revoke one, or all of them ("log out everywhere"); an
    operator's revocations of a tenant or a provider login session, and the purge.

    :param store: the app's session store.
    :param revoke_one: ``(tenant, user_id, session_hash, reason)``: ends that session of that
        user only (``session_revoked`` with ``reason``); whether there was one.
    :param revoke_all: ``(tenant, user_id, keep_sid)``: log out everywhere, audited
        ``logout_everywhere``; what ended.
    """

    def __init__(
        self,
        store: MaintainedSessionStore,
        *,
        revoke_one: Callable[[str, str, str, str], bool],
        revoke_all: Callable[[str, str, str | None], EndedT],
        default_tenant: str,
    ) -> None:
        super().__init__(default_tenant=default_tenant)
        self.store = store
        self._revoke_one = revoke_one
        self._revoke_all = revoke_all

    def list(self, user_id: str, *, tenant: str | None = None) -> list[SessionRecord]:
        """The user's live sessions, most recently seen first."""
        records = self.store.list_user_sessions(self._tenant(tenant), user_id)
        return sorted(records, key=lambda record: record.last_seen_at, reverse=True)

    def get(self, user_id: str, session_hash: str, *, tenant: str | None = None) -> SessionRecord | None:
        """The user's session whose id hashes to ``session_hash``, or ``None``."""
        for record in self.store.list_user_sessions(self._tenant(tenant), user_id):
            if hmac.compare_digest(sid_hash(record.sid), session_hash):
                return record
        return None

    def revoke(
        self, user_id: str, session_hash: str, *, tenant: str | None = None, reason: str = "session_revoked"
    ) -> bool:
        """End the one session of the user whose id hashes to ``session_hash`` (the
        ``session_revoked`` signal carries ``reason``: ``revoked_by_user`` from the account
        page); false when the user has no such session. Nothing else of the user ends (API
        tokens stay)."""
        return self._revoke_one(self._tenant(tenant), user_id, session_hash, reason)

    def revoke_all(self, user_id: str, *, tenant: str | None = None, keep_sid: str | None = None) -> EndedT:
        """Log the user out everywhere: every session but ``keep_sid`` ends, and with them
        the user's API tokens, pending mailed links and lock (see :doc:`/sessions`); returns
        what ended (:class:`~flask_authflow.login._recovery.Ended`). Audited
        ``logout_everywhere`` with the request's context and session (in a request).

        :raises ~flask_authflow.errors.UserNotFound: no such user."""
        return self._revoke_all(self._tenant(tenant), user_id, keep_sid)

    # --- an operator's maintenance -----------------------------------------------------------

    def revoke_tenant(self, *, tenant: str | None = None) -> int:
        """End every session of every user of the tenant; how many ended."""
        return self.store.delete_tenant_sessions(self._tenant(tenant))

    def revoke_provider_session(self, issuer: str, provider_sid: str) -> int:
        """End every session signed in through the provider login session ``provider_sid``
        at ``issuer`` (what back-channel logout does); how many ended."""
        return self.store.delete_federated_sessions(issuer, provider_sid)

    def purge_expired(self, *, tenant: str | None = None) -> int:
        """Delete expired sessions now, of the tenant or (``tenant=None``) of every tenant:
        they are never loaded, this frees their rows; how many went."""
        return self.store.purge_expired(tenant=None if tenant is None else self._tenant(tenant))
