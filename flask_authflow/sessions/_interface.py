"""The Flask session interface: a signed session-id cookie in front of a server-side store.

The browser holds only ``<sid>.<signature>``; everything else stays in the
:class:`~flask_authflow._core.ports.SessionStore`. On every request the cookie is
verified (HMAC-SHA256 via itsdangerous), the record loaded and checked (expiry, the
User-Agent binding), and ``flask.session`` becomes a :class:`RequestSession`. At the
end of the request a changed session is written back and its cookie set; an unchanged
one costs no write and no ``Set-Cookie``.

Reading never fails a request: a cookie that is missing, malformed, forged, expired,
unknown or bound to another User-Agent yields a fresh Guest session, and an
unreachable store yields a Guest that is not written back (fail closed, without
logging the user out because of an outage).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from flask import Flask, Request, Response
from flask import session as flask_session
from flask.sessions import SessionInterface, SessionMixin

from flask_authflow._clock import Clock, SystemClock
from flask_authflow._core.ports import SessionStore, SessionTouch, SessionWrite
from flask_authflow._core.session import (
    CUSTOM_DATA_LIMIT,
    AuthSession,
    AuthState,
    SessionRecord,
    new_guest_record,
)
from flask_authflow._responses import error_response
from flask_authflow.errors import ConfigurationError, SessionDataTooLarge, StoreUnavailable
from flask_authflow.sessions._request import RequestSession, SessionCarrier
from flask_authflow.sessions._response import enforce_size, mark_response, refuse
from flask_authflow.sessions._signing import (
    COOKIE_SALT,
    FINGERPRINT_PURPOSE,
    MAX_COOKIE_LENGTH,
    MIN_SIGNING_KEY_LENGTH,
    KeySlot,
    binding,
    check_signing_key,
    verify_cookie,
)
from flask_authflow.sessions._touch import due_after, touch_settings

__all__ = [
    "COOKIE_SALT",
    "FINGERPRINT_PURPOSE",
    "MAX_COOKIE_LENGTH",
    "MIN_SIGNING_KEY_LENGTH",
    "AuthFlowSessionInterface",
    "RequestSession",
    "SessionCarrier",
]

log = logging.getLogger("flask_authflow.sessions")

_SAMESITE = ("Lax", "Strict", "None")


def _positive(value: timedelta, what: str) -> timedelta:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ConfigurationError(f"{what} must be a positive timedelta")
    return value


class AuthFlowSessionInterface(SessionInterface):
    """Server-side sessions behind a signed session-id cookie.

    :param store: where records live (:class:`~flask_authflow.sessions._stores.MemorySessionStore`,
        :class:`~flask_authflow.storage._sql.session_store.SqlAlchemySessionStore`).
    :param signing_key: the cookie HMAC key, at least 32 random bytes, identical across
        restarts and workers. Changing it without keeping the old one in
        ``previous_signing_keys`` ends every session.
    :param previous_signing_keys: retired keys still accepted (oldest first); a cookie
        verified with one is re-signed with ``signing_key`` on that response.
    :param ttl: absolute lifetime, counted from the creation of the session record
        (id rotations keep it, so no number of logins or step-ups extends a session).
    :param idle_timeout: a session not seen for this long is over.
    :param secure: the cookie's ``Secure`` flag; turn off only for plain-HTTP development.
    :param samesite: ``"Lax"`` (default), ``"Strict"``, or ``"None"`` (needs ``secure``).
    :param custom_limit: maximum size of the application's session data (serialised).
    :param remember_ttl: the absolute lifetime of a session whose login asked to be
        remembered (default: ``ttl``).
    :param remember_idle_timeout: whether such a session still ends after ``idle_timeout``.
    :param touch_interval: how stale the stored "last seen" time may get before an
        unchanged session is touched (default: a tenth of ``idle_timeout``), so a busy
        user does not cost one write per request. A touch writes that time only (one
        small statement, never the sealed record) and is skipped rather than waited for
        when the store is busy.
    :param touch_jitter: how much earlier than ``touch_interval`` a session may come due,
        spread evenly over sessions by their id (default: half of ``touch_interval``), so
        sessions created together are not all touched in the same second.
    """

    def __init__(
        self,
        store: SessionStore,
        signing_key: bytes,
        *,
        previous_signing_keys: Iterable[bytes] = (),
        ttl: timedelta = timedelta(hours=12),
        idle_timeout: timedelta = timedelta(hours=1),
        cookie_name: str = "authflow_session",
        secure: bool = True,
        samesite: str = "Lax",
        cookie_domain: str | None = None,
        cookie_path: str = "/",
        clock: Clock | None = None,
        custom_limit: int = CUSTOM_DATA_LIMIT,
        touch_interval: timedelta | None = None,
        touch_jitter: timedelta | None = None,
        remember_ttl: timedelta | None = None,
        remember_idle_timeout: bool = True,
    ) -> None:
        current = check_signing_key(signing_key, "session signing key")
        previous = tuple(check_signing_key(k, "previous session signing key") for k in previous_signing_keys)
        self.ttl = _positive(ttl, "the session TTL")
        self.idle_timeout = _positive(idle_timeout, "the session idle timeout")
        #: The absolute lifetime of a "remember me" session (``None``: the same as ``ttl``).
        self.remember_ttl = (
            _positive(remember_ttl, "the remember-me TTL") if remember_ttl is not None else ttl
        )
        #: Whether a "remember me" session still ends after ``idle_timeout`` without use.
        self.remember_idle_timeout = bool(remember_idle_timeout)
        self.touch_interval, self.touch_jitter = touch_settings(idle_timeout, touch_interval, touch_jitter)
        if samesite not in _SAMESITE:
            raise ConfigurationError(f"samesite must be one of {', '.join(_SAMESITE)}")
        if samesite == "None" and not secure:
            raise ConfigurationError('samesite="None" requires a Secure cookie')
        if not cookie_name or not re.fullmatch(r"[A-Za-z0-9_.-]+", cookie_name):
            raise ConfigurationError("the cookie name must be a non-empty token")
        if not isinstance(custom_limit, int) or custom_limit <= 0:
            raise ConfigurationError("custom_limit must be a positive number of bytes")
        self.store = store
        self.cookie_name = cookie_name
        self.secure = bool(secure)
        self.samesite = samesite
        self.cookie_domain = cookie_domain
        self.cookie_path = cookie_path
        self.custom_limit = custom_limit
        self._clock: Clock = clock if clock is not None else SystemClock()
        # Current key first, then the previous keys newest first: the order they are tried.
        self._slots = tuple(KeySlot.build(k) for k in (current, *reversed(previous)))
        self._current = self._slots[0]
        #: Called once for each request served as a new guest because its User-Agent did not
        #: match the session's binding (``AuthFlow.init_app`` counts them for ``/metrics``).
        self.on_binding_mismatch: Callable[[], None] | None = None
        #: Picks another carrier of the signed id for a request (``None``, or a call that
        #: answers ``None``: the cookie). The headless API installs its app tokens here.
        self.carrier_for: Callable[[Request], SessionCarrier | None] | None = None
        self._settings: dict[str, Any] = {
            "store": store,
            "signing_key": current,
            "previous_signing_keys": previous,
            "ttl": ttl,
            "idle_timeout": idle_timeout,
            "cookie_name": cookie_name,
            "secure": secure,
            "samesite": samesite,
            "cookie_domain": cookie_domain,
            "cookie_path": cookie_path,
            "clock": self._clock,
            "custom_limit": custom_limit,
            # ``None`` stays ``None`` so that with_idle_timeout() recomputes the default.
            "touch_interval": touch_interval,
            "touch_jitter": touch_jitter,
            "remember_ttl": remember_ttl,
            "remember_idle_timeout": remember_idle_timeout,
        }

    # --- builders ---------------------------------------------------------------------------

    def _with(self, **changes: Any) -> AuthFlowSessionInterface:
        return type(self)(**{**self._settings, **changes})

    def with_ttl(self, ttl: timedelta) -> AuthFlowSessionInterface:
        """A copy with another absolute session lifetime."""
        return self._with(ttl=ttl)

    def with_idle_timeout(self, idle_timeout: timedelta) -> AuthFlowSessionInterface:
        """A copy with another idle timeout."""
        return self._with(idle_timeout=idle_timeout)

    def with_secure(self, secure: bool) -> AuthFlowSessionInterface:
        """A copy with the cookie's ``Secure`` flag on or off."""
        return self._with(secure=secure)

    def with_previous_signing_key(self, key: bytes) -> AuthFlowSessionInterface:
        """A copy that still accepts cookies signed with ``key`` (a retired signing key)."""
        return self._with(previous_signing_keys=(*self._settings["previous_signing_keys"], key))

    def with_clock(self, clock: Clock) -> AuthFlowSessionInterface:
        """A copy that reads time from ``clock`` (tests)."""
        return self._with(clock=clock)

    # --- helpers other parts use ------------------------------------------------------------

    def fingerprint(self, user_agent: str | None) -> str:
        """The binding value of a User-Agent under the current signing key.

        For code that creates sessions outside a request (test helpers, the CLI): a
        non-guest record must carry the fingerprint of the client that will use it.
        """
        return self._current.fingerprint(user_agent or "")

    def sign_sid(self, sid: str) -> str:
        """The cookie value for session ``sid`` (signed with the current key)."""
        return self._current.signer.sign(sid).decode("ascii")

    def expires_at(self, record: SessionRecord) -> datetime:
        """When ``record`` ends: absolute lifetime or idle timeout, whichever comes first (a
        "remember me" session: its longer lifetime, and the idle timeout unless turned off)."""
        if record.remember:
            absolute = record.created_at + self.remember_ttl
            if not self.remember_idle_timeout:
                return absolute
            return min(absolute, record.last_seen_at + self.idle_timeout)
        return min(record.created_at + self.ttl, record.last_seen_at + self.idle_timeout)

    def touch_due_after(self, sid: str) -> timedelta:
        """How long after its last-seen time session ``sid`` is touched: ``touch_interval``
        less a share of ``touch_jitter`` fixed by the id (ids are random, so the shares
        are spread evenly; the same session always gets the same one)."""
        return due_after(self.touch_interval, self.touch_jitter, sid)

    def _verify_cookie(self, raw: str) -> tuple[str, KeySlot] | None:
        """The session id in a cookie value and the key that signed it, or ``None``."""
        return verify_cookie(self._slots, raw)

    def _touch_for(self, sid: str, now: datetime) -> SessionTouch:
        """The touch the read of session ``sid`` writes when the session is due."""
        return SessionTouch(
            at=now, due_by=now - self.touch_due_after(sid), expires_at=now + self.idle_timeout
        )

    def _untouch(self, record: SessionRecord, expires_at: datetime) -> None:
        """Put back the last-seen time (``record``'s) and the expiry a folded touch moved,
        for a request the session turned out not to serve (bound to another User-Agent,
        over) or that never looked at it: neither keeps the session alive."""
        try:
            self.store.touch(record, expires_at)
        except StoreUnavailable:
            log.warning("session touch not undone: the session store is unavailable")

    def _guest(
        self, now: datetime, fingerprint: str, *, cookie_sent: bool, user_agent: str
    ) -> RequestSession:
        session = RequestSession(
            new_guest_record(now),
            new=True,
            request_fingerprint=fingerprint,
            custom_limit=self.custom_limit,
            cookie_sent=cookie_sent,
        )
        session.request_user_agent = user_agent
        return session

    # --- SessionInterface -------------------------------------------------------------------

    def open_session(self, app: Flask, request: Request) -> RequestSession:
        carrier = self.carrier_for(request) if self.carrier_for is not None else None
        user_agent = request.headers.get("User-Agent", "")
        if carrier is None:
            return self._open(request.cookies.get(self.cookie_name), user_agent)
        session = self._open(carrier.presented, carrier.binding + user_agent)
        session.carrier = carrier
        session.request_user_agent = user_agent
        return session

    def _open(self, raw: str | None, user_agent: str) -> RequestSession:
        now = self._clock.now()
        if raw is None:
            return self._guest(
                now, self._current.fingerprint(user_agent), cookie_sent=False, user_agent=user_agent
            )
        verified = self._verify_cookie(raw)
        if verified is None:
            return self._guest(
                now, self._current.fingerprint(user_agent), cookie_sent=True, user_agent=user_agent
            )
        sid, slot = verified
        current_fp = self._current.fingerprint(user_agent)
        touch = self._touch_for(sid, now)
        try:
            loaded = self.store.load_touching(sid, touch)
        except StoreUnavailable:
            log.warning("session store unavailable; request served as a guest, session not saved")
            session = self._guest(now, current_fp, cookie_sent=True, user_agent=user_agent)
            session.store_failed = True
            return session
        if loaded is None:
            return self._guest(now, current_fp, cookie_sent=True, user_agent=user_agent)
        record, replaced = loaded
        if record.sid != sid or now >= self.expires_at(record):
            if replaced is not None:
                self._untouch(record, replaced)
            return self._guest(now, current_fp, cookie_sent=True, user_agent=user_agent)

        bound, rebound = binding(record, slot, self._current, user_agent, current_fp)
        if not bound:
            if replaced is not None:
                self._untouch(record, replaced)
            return self._mismatched(now, current_fp, user_agent)

        seen = replace(record, last_seen_at=touch.at) if replaced is not None else record
        session = RequestSession(
            seen,
            new=False,
            request_fingerprint=current_fp,
            custom_limit=self.custom_limit,
            cookie_sent=True,
        )
        session.request_user_agent = user_agent
        if slot is not self._current:
            session.resign = True
            if record.fingerprint is not None and not rebound:
                # Keep the session alive across the key rotation: bind it again under
                # the fingerprint key of the current signing key.
                session.rebind(current_fp)
                session.force_write = True
        if replaced is not None:
            session.touched = (record, replaced)
            # The touch wrote an expiry of at least now + idle timeout; one ending earlier
            # (the absolute lifetime is near) is written again, with one more small write.
            session.touch_due = self.expires_at(seen) < touch.expires_at
        return session

    def _mismatched(self, now: datetime, fingerprint: str, user_agent: str) -> RequestSession:
        """A cookie whose record is bound to another User-Agent: probably a stolen cookie (or
        a browser update). The stored session is left alone for its legitimate holder; this
        client starts over as a new guest, and the mismatch is counted."""
        log.warning("session binding mismatch; request served as a new guest session")
        session = self._guest(now, fingerprint, cookie_sent=True, user_agent=user_agent)
        session.binding_mismatch = True
        if self.on_binding_mismatch is not None:
            self.on_binding_mismatch()
        return session

    def save_early(self, app: Flask, response: Response) -> Response:
        """Save the current session from an ``after_request`` hook.

        Flask calls :meth:`save_session` after every ``after_request`` hook, where an
        exception can only become a bare 500. Saving here first lets a store outage
        become a typed 503 response (the change is not kept: fail closed); the later
        :meth:`save_session` call is then a no-op.
        """
        session = flask_session._get_current_object()  # type: ignore[attr-defined]
        if not isinstance(session, RequestSession) or session.saved:
            return response
        if session.store_failed and session.modified:
            # The store could not even be read, so this change (a login, a logout) can
            # not be kept: answer 503 rather than a success that did not happen.
            log.warning("session changes discarded: the session store was unavailable")
            session.saved = True
            failed = error_response(StoreUnavailable())
            failed.vary.add("Cookie")
            return failed
        try:
            self.save_session(app, session, response)
        except StoreUnavailable as exc:
            session.saved = True
            failed = error_response(exc)
            if session.accessed:
                failed.vary.add("Cookie")
            return failed
        # Not marked saved: ``after_request`` handlers registered before init_app run
        # after this one, and what they change is written by the final save_session.
        session.early = (response, session.used)
        return response

    def save_session(self, app: Flask, session: SessionMixin, response: Response) -> None:
        if not isinstance(session, RequestSession) or session.saved:
            return
        used = session.used
        if session.early == (response, used) and not (
            session.modified
            or session.force_write
            or session.resign
            or session.touch_due
            or session.touched is not None
        ):
            return  # save_early already did all of it, and nothing changed since on this response
        if session.touched is not None and not used:
            # The read touched a session this request never looked at (JWKS, static files):
            # put the last-seen time back, so that such a request does not keep it alive.
            self._untouch(*session.touched)
            session.touched, session.touch_due = None, False
        mark_response(session, response, used)
        if session.store_failed:
            if session.modified:
                log.warning("session changes discarded: the session store was unavailable")
            return
        # The last-seen refresh and a re-signature happen only for requests that looked
        # at the session: views that never do (JWKS, discovery, static) cost nothing.
        if used and not session.modified and dict.__len__(session) and self._grew_in_place(session, response):
            return
        due = session.force_write or session.resign or session.touch_due or session.touched is not None
        if not (session.modified or session.cookie_due or (used and due)):
            return
        self._write(session, response)

    def _grew_in_place(self, session: RequestSession, response: Response) -> bool:
        """A nested change without ``session.modified`` is not saved (as with Flask's own
        session); one that grew the data past the cap is not dropped silently either: the
        response says so (413) and ``True`` stops the save."""
        try:
            session.check_size()
        except SessionDataTooLarge as exc:
            log.warning("custom session data grew to %d bytes in place; not saved", exc.size)
            refuse(response, exc)
            return True
        return False

    def _write(self, session: RequestSession, response: Response) -> None:
        """Persist ``session`` and set its cookie; a change that did not persist fails the request."""
        too_large = enforce_size(session, self.store) if session.modified else None
        try:
            self._persist(session, response)
        except StoreUnavailable:
            if not session.modified:
                log.warning("session refresh skipped: the session store is unavailable")
                return
            # A change (a login, a logout) that did not persist must not look done: the
            # request fails (Flask answers 500). Flask then saves the session once more
            # for the error response; that attempt must not persist the change either.
            session.store_failed = True
            raise
        # What was written is the new baseline: a later change in this request (an
        # ``after_request`` handler running after save_early) is written again.
        session.modified = session.force_write = session.resign = session.cookie_due = False
        session.touch_due, session.touched = False, None
        if too_large is not None:
            # Nothing is dropped silently: the response says the data was refused.
            refuse(response, too_large)

    def prepare_write(self, session: AuthSession) -> SessionWrite | None:
        """What a login step's unit of work writes of ``session`` (see
        :meth:`UnitOfWork.save_session <flask_authflow._core.ports.UnitOfWork.save_session>`),
        so that the session and the step's other writes commit together; ``None`` when
        nothing of this request's session is written there (an expired one: the response
        deletes it)."""
        if not isinstance(session, RequestSession) or session.store_failed:
            return None
        now = self._clock.now()
        record = replace(session.record, last_seen_at=now)
        expires_at = self.expires_at(record)
        if expires_at <= now:
            return None
        existing = session.loaded_sid == record.sid
        replaces = () if existing or session.loaded_sid is None else (session.loaded_sid,)
        return SessionWrite(record, expires_at, replaces, existing)

    def mark_written(self, session: AuthSession, write: SessionWrite) -> None:
        """``write`` committed with its login step: the response only sends the cookie
        (unless the session changed since: the response then writes it)."""
        if not isinstance(session, RequestSession) or session.record.sid != write.record.sid:
            return
        session.loaded_sid = write.record.sid
        session.dead_sids.clear()
        session.modified = session.force_write = session.touch_due = False
        session.touched = None
        session.cookie_due = True

    def _persist(self, session: RequestSession, response: Response) -> None:
        now = self._clock.now()
        record = session.record
        if record.state is AuthState.GUEST and not record.custom and not record.flow:
            for dead in session.dead_sids:
                self.store.delete(dead)
            # Nothing worth keeping: no row, no cookie.
            if session.loaded_sid == record.sid:
                self.store.delete(record.sid)
            if session.cookie_sent:
                self._delete_cookie(response, session.carrier)
            return
        if session.modified or session.force_write:
            record = replace(record, last_seen_at=now)
            expires_at = self.expires_at(record)
            if expires_at <= now:  # the absolute lifetime ran out during the request
                self._end(session, record, response)
                return
            if not self._save_record(session, record, expires_at, response):
                return
        elif session.touch_due:
            # The folded touch wrote a later expiry than the session's end: one small write
            # of the right one; a touch the store skipped (busy, or the session revoked
            # meanwhile) changes nothing here: the cookie stays as it is.
            expires_at = self.expires_at(record)
            if expires_at <= now:
                self._end(session, record, response)
                return
            if not self.store.touch(record, expires_at):
                return
        else:  # the read touched the session, or only a re-signature: nothing to store
            expires_at = self.expires_at(record)
        self._set_cookie(response, record.sid, expires_at, session.carrier)

    def _end(self, session: RequestSession, record: SessionRecord, response: Response) -> None:
        """The session is over (its absolute lifetime ran out): delete it and its cookie."""
        for dead in session.dead_sids:
            self.store.delete(dead)
        self.store.delete(record.sid)
        if session.cookie_sent:
            self._delete_cookie(response, session.carrier)

    def _save_record(
        self, session: RequestSession, record: SessionRecord, expires_at: datetime, response: Response
    ) -> bool:
        """Save the whole record; False (cookie cleared) when the session was revoked meanwhile."""
        existing = session.loaded_sid == record.sid
        replaces = () if existing or session.loaded_sid is None else (session.loaded_sid,)
        if not self.store.save(record, expires_at, replaces=replaces, existing=existing):
            # The session was deleted (logout elsewhere, revoked, password changed)
            # after this request loaded it: it stays deleted and this client is a Guest.
            log.info("session revoked during the request; not saved, cookie cleared")
            session.saved = True
            if session.cookie_sent:
                self._delete_cookie(response, session.carrier)
            return False
        session.loaded_sid = record.sid
        session.dead_sids.clear()
        return True

    def _set_cookie(
        self, response: Response, sid: str, expires_at: datetime, carrier: SessionCarrier | None = None
    ) -> None:
        if carrier is not None:
            carrier.issue(response, self.sign_sid(sid), expires_at)
            return
        if response.cache_control.public:
            # A response that sets a session cookie is never public: a shared cache
            # would hand this cookie to other users.
            response.headers["Cache-Control"] = "private, no-store"
        response.set_cookie(
            self.cookie_name,
            self.sign_sid(sid),
            expires=expires_at,
            path=self.cookie_path,
            domain=self.cookie_domain,
            secure=self.secure,
            httponly=True,
            samesite=self.samesite,
        )

    def _delete_cookie(self, response: Response, carrier: SessionCarrier | None = None) -> None:
        if carrier is not None:
            carrier.withdraw(response)
            return
        response.delete_cookie(
            self.cookie_name,
            path=self.cookie_path,
            domain=self.cookie_domain,
            secure=self.secure,
            httponly=True,
            samesite=self.samesite,
        )

    def __repr__(self) -> str:
        return (
            f"<AuthFlowSessionInterface store={self.store!r} cookie={self.cookie_name!r} "
            f"ttl={self.ttl} idle_timeout={self.idle_timeout} previous_keys={len(self._slots) - 1}>"
        )
