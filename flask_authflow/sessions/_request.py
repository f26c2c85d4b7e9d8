"""The session of one request (:class:`RequestSession`) and what carries its signed id.

Private to the session interface; both names are imported from
:mod:`flask_authflow.sessions._interface`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Protocol

from flask import Response

from flask_authflow._core.session import AuthSession, AuthState, SessionRecord

__all__ = ["RequestSession", "SessionCarrier"]


class SessionCarrier(Protocol):
    """How a request carries its signed session id when not in the cookie (the headless
    API's app tokens, ``flask_authflow._web.headless.clients``): the same id, store and
    record, only carried differently. Chosen per request by
    :attr:`AuthFlowSessionInterface.carrier_for`."""

    #: Mixed into the User-Agent binding, so that a session bound under one carrier is a
    #: binding mismatch (a new guest) under another: never accepted from the cookie jar.
    binding: str
    #: The signed id the request presented (``None``: none).
    presented: str | None

    def issue(self, response: Response, value: str, expires_at: datetime) -> None:
        """Hand the client ``value`` (the signed id; a new one after each rotation)."""

    def withdraw(self, response: Response) -> None:
        """Tell the client its session ended (where a cookie would be deleted)."""


class RequestSession(AuthSession):
    """The :class:`AuthSession` of one request, with what the interface needs to save it.

    These flags are bookkeeping of the interface, not part of the session's data.
    """

    def __init__(
        self,
        record: SessionRecord,
        *,
        new: bool,
        request_fingerprint: str | None,
        custom_limit: int,
        cookie_sent: bool,
    ) -> None:
        super().__init__(record, new=new, request_fingerprint=request_fingerprint, custom_limit=custom_limit)
        #: the browser sent a session cookie (valid or not).
        self.cookie_sent = cookie_sent
        #: the store could not be read: never write, never touch the cookie.
        self.store_failed = False
        #: the cookie verified with a previous signing key: re-sign it with the current one.
        self.resign = False
        #: write the record even if unmodified (fingerprint re-binding).
        self.force_write = False
        #: the read refreshed the stored "last seen" time (a touch folded into
        #: :meth:`~flask_authflow._core.ports.SessionStore.load_touching`): the record as
        #: loaded and the expiry the touch replaced. A response that used the session
        #: carries the cookie with the later expiry; one that did not puts them back.
        self.touched: tuple[SessionRecord, datetime] | None = None
        #: the stored expiry is to be written again with one small write
        #: (:meth:`~flask_authflow._core.ports.SessionStore.touch`): the folded touch wrote a
        #: later one than the session's end (its absolute lifetime is near).
        self.touch_due = False
        #: the id the record was loaded under (``None`` for a session new in this request).
        self.loaded_sid: str | None = None if new else record.sid
        #: already saved by :meth:`AuthFlowSessionInterface.save_early` for this request.
        self.saved = False
        #: written to the store in a login step's transaction (:meth:`AuthFlowSessionInterface.
        #: mark_written`): only the cookie is left to send.
        self.cookie_due = False
        #: (response, used) when save_early completed: the final save_session has nothing
        #: left to do unless the response was replaced or the session used or changed since.
        self.early: tuple[Response, bool] | None = None
        #: what carries the signed id instead of the cookie (``None``: the cookie).
        self.carrier: SessionCarrier | None = None

    @property
    def state_unread(self) -> AuthState:
        """The state, read without marking the session used (for the interface)."""
        return self._record.state

    def rebind(self, fingerprint: str) -> None:
        """Re-bind to ``fingerprint`` (same User-Agent, fingerprint key of the current signing key)."""
        self._record = replace(self._record, fingerprint=fingerprint)
