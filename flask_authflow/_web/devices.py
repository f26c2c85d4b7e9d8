"""The device feature in a Flask app: the device cookie on requests and responses, the
device on every audit row, the record of each sign-in, trusted devices and the end of
their trust.

* The request's device is read lazily, when something asks for the audit context (a
  login step, a recorded event): a valid device cookie gives its id and its user; a
  request without one gets a fresh id, which the browser keeps only if a sign-in
  succeeds. A forged, expired or rebound cookie is ignored (the login audits why).
* After a sign-in (``login_succeeded``, not a step-up) the device is recorded for the
  user (a new one is announced by mail if the app opted in), trusted when the user asked
  for it at a second factor, and the cookie is (re)issued bound to the User-Agent.
* Every ``session_revoked`` but a logout or a new login on the same session (a password
  or factor change, a disabled or deleted user, an operator's revoke) ends the user's
  device trusts.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, replace
from typing import Any

from flask import Flask, Request, Response, after_this_request, has_request_context, request

from flask_authflow import signals
from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow._web.device_mail import send_new_device_mail
from flask_authflow._web.per_request import keep_for_request, request_kept
from flask_authflow._web.state import AuthFlowState, current_auth_session, get_state
from flask_authflow.audit._context import AuditContext, audit_context, audit_source
from flask_authflow.audit._sinks import hash_session_id
from flask_authflow.devices import Devices
from flask_authflow.devices._cookie import DeviceClaim, DeviceCookie, DeviceReading, new_device_id
from flask_authflow.devices._service import DeviceService
from flask_authflow.devices._settings import DeviceSettings
from flask_authflow.login._operation import PHANTOM_PREFIX

__all__ = [
    "TRUST_KEPT_ON",
    "DeviceWiring",
    "current_device_id",
    "current_device_trusted",
    "end_device_trust",
    "forget_device",
    "install_devices",
    "record_device_event",
    "remember_session",
    "request_trust",
    "user_devices",
]

log = logging.getLogger("flask_authflow.devices")

#: ``session_revoked`` reasons that leave device trusts alone (the user logged out, or a
#: new login replaced the session, or a Shared Signals session revocation, which ends
#: sessions as back-channel logout does); every other revocation ends them.
TRUST_KEPT_ON = frozenset(
    {"logout", "new_login", "backchannel_logout", "ssf_session_revoked", "ssf_sessions_revoked"}
)
#: ``flask.g`` key of the request's device bookkeeping.
_G_KEY = "_authflow_device"


@dataclass(slots=True)
class _RequestDevice:
    """The device of one request: what the cookie said, and what the response must do."""

    reading: DeviceReading
    device_id: str
    trust_requested: bool = False
    issue: DeviceClaim | None = None


@dataclass(frozen=True, slots=True)
class DeviceWiring:
    """The app's device parts (``get_state().devices``)."""

    settings: DeviceSettings
    cookie: DeviceCookie
    service: DeviceService
    secure: bool
    samesite: str
    domain: str | None
    path: str


def install_devices(app: Flask, state: AuthFlowState) -> DeviceWiring:
    """Build the device parts of ``app`` and hook them into its requests and signals."""
    settings = DeviceSettings.from_config(app.config)
    session = state.config.session
    wiring = DeviceWiring(
        settings=settings,
        cookie=DeviceCookie(
            session.signing_key, session.previous_signing_keys, lifetime=settings.cookie_lifetime
        ),
        service=DeviceService(state.backend, settings),
        secure=session.cookie_secure,
        samesite=session.cookie_samesite,
        domain=session.cookie_domain,
        path=session.cookie_path,
    )
    state.devices = wiring
    audit_source(app).add_device = _device_context  # the request's device on its audit rows
    state.service.device_trusted = wiring.service.is_trusted
    # No app-wide hook: a sign-in that issues a device cookie asks for one (after_this_request),
    # so requests that sign nobody in pay nothing for devices. The device is recorded in the
    # sign-in's own unit of work (one commit), not by a login_succeeded receiver (sent after it).
    state.service.on_sign_in = lambda tenant, user_id: _signed_in(app, user_id=user_id, tenant=tenant)
    signals.session_revoked.connect(_revoked, sender=app, weak=False)
    return wiring


def _device_context(ctx: AuditContext, req: Request) -> AuditContext:
    """``ctx`` with the request's device (read once per request); never raises."""
    try:
        found = _request_device(req)
    except Exception:  # the audit context cannot fail, by contract
        log.exception("the device cookie could not be read")
        return ctx
    claim = found.reading.claim
    return replace(
        ctx,
        device_id=found.device_id,
        device_user=claim.user_id if claim is not None else None,
        device_refused=found.reading.refused,
    )


def _request_device(req: Request) -> _RequestDevice:
    found: _RequestDevice | None = request_kept(_G_KEY)  # never another request's cookie
    if found is None:
        wiring: DeviceWiring = get_state().devices
        raw = req.cookies.get(wiring.settings.cookie_name)
        reading = wiring.cookie.read(raw, req.headers.get("User-Agent"))
        device_id = reading.claim.device_id if reading.claim is not None else new_device_id()
        found = _RequestDevice(reading, device_id)
        keep_for_request(_G_KEY, found)
    return found


def request_trust(wanted: bool = True) -> None:
    """Ask that a sign-in completed in this request with a second factor trusts this
    device (the factor page's "trust this device" box, ``trust_device`` in JSON)."""
    if wanted and has_request_context() and get_state().devices is not None:
        _request_device(request).trust_requested = True


def remember_session(session: AuthSession) -> bool:
    """ "Remember me" (the login form's box, ``"remember": true`` in JSON), after the password
    step: the session, signed in or waiting for its next factor, lives
    ``AUTHFLOW_REMEMBER_ME_TTL`` once signed in (audited ``remember_me``); false, and nothing
    changes, for a session the password did not get that far."""
    record = session.record
    if record.state not in (AuthState.AUTHENTICATING, AuthState.AUTHENTICATED) or record.remember:
        return False
    if record.tenant is None or record.user_id is None or record.user_id.startswith(PHANTOM_PREFIX):
        return False
    if record.state is AuthState.AUTHENTICATING and not record.factors_passed:
        return False  # the password step did not pass
    session.transition(lambda r: replace(r, remember=True))
    record_device_event(get_state(), "remember_me", "success", tenant=record.tenant, user_id=record.user_id)
    return True


def _signed_in(app: Flask, *, user_id: str, tenant: str, step_up: bool = False, **_: Any) -> None:
    """After a sign-in: record the device, trust it if asked, (re)issue its cookie. A client
    that keeps no cookies (the headless API's ``app`` clients, whose session travels in a
    header) has no device cookie to read or get: nothing is recorded for it."""
    if step_up or not has_request_context() or not _keeps_cookies(get_state(app)):
        return
    try:
        _record_sign_in(get_state(app), user_id, tenant)
    except Exception:  # a failed write of a unit of work undoes the sign-in with it at the commit
        log.exception("the device of a sign-in could not be recorded")


def _keeps_cookies(state: AuthFlowState) -> bool:
    """The request's session travels in the cookie (not in another carrier, such as an app's
    ``Authorization: Session`` header)."""
    carrier_for = state.session_interface.carrier_for
    return carrier_for is None or carrier_for(request) is None


def _record_sign_in(state: AuthFlowState, user_id: str, tenant: str) -> None:
    wiring: DeviceWiring = state.devices
    found = _request_device(request)
    claim = found.reading.claim
    device_id = found.device_id if claim is None or claim.user_id == user_id else new_device_id()
    now = state.clock.now()
    place = _place(state)
    new = wiring.service.signed_in(
        tenant, user_id, device_id, user_agent=request.headers.get("User-Agent"), place=place, now=now
    )
    if found.issue is None:
        after_this_request(_set_cookie)
    found.issue = DeviceClaim(device_id, tenant, user_id)
    who = {"tenant": tenant, "user_id": user_id, "device_id": device_id}
    if new:  # a known device is on the sign-in's own rows (their device_id): no row of its own
        record_device_event(state, "device_sign_in", "new", **who)
    if found.trust_requested:
        passed_second = len(current_auth_session().record.factors_passed) > 1
        until = wiring.service.trust(tenant, user_id, device_id, now) if passed_second else None
        status, reason = ("success", None) if until is not None else ("refused", "no_second_factor")
        record_device_event(state, "device_trusted", status, reason=reason, **who)
    if new and wiring.settings.new_device_mail:
        send_new_device_mail(state, tenant, user_id, device_id)


def _place(state: AuthFlowState) -> str | None:
    """What the application's ``device_place`` hook says of this request; a hook that fails
    or answers something other than text means "unknown" (logged), never a failed sign-in."""
    hook = state.hooks.device_place
    if hook is None:
        return None
    try:
        place = hook(request)
    except Exception:  # the application's code: the place is only informative
        log.exception("the device_place hook failed")
        return None
    return place if isinstance(place, str) and place.strip() else None


def _set_cookie(response: Response) -> Response:
    found: _RequestDevice | None = request_kept(_G_KEY)
    if found is None or found.issue is None or response.status_code >= 500:
        return response  # a failed request (a store outage, say) sets nothing
    wiring: DeviceWiring = get_state().devices
    value = wiring.cookie.issue(found.issue, request.headers.get("User-Agent"))
    response.set_cookie(
        wiring.settings.cookie_name,
        value,
        max_age=int(wiring.settings.cookie_lifetime.total_seconds()),
        secure=wiring.secure,
        httponly=True,
        samesite=wiring.samesite,
        domain=wiring.domain,
        path=wiring.path,
    )
    return response


def record_device_event(
    state: AuthFlowState,
    event: str,
    status: str,
    *,
    tenant: str,
    user_id: str,
    reason: str | None = None,
    device_id: str | None = None,
) -> None:
    """One audit row of a device decision, in a request (its context, its session) or on
    the command line (no context); ``device_id`` overrides the request's device."""
    ctx = audit_context()
    session_id = None
    if has_request_context():
        session_id = hash_session_id(current_auth_session().sid)
    row = ctx.row(
        state.clock.now(),
        event,
        status,
        tenant=tenant,
        user_id=user_id,
        session_id=session_id,
        reason=reason[:64] if reason is not None else None,
        device_id=device_id if device_id is not None else ctx.device_id,
    )
    state.service.audit_sink.write(row)


def user_devices(state: AuthFlowState) -> Devices:
    """``authflow.devices`` on ``state``: the app's device decisions, each change committed
    with its audit row (:func:`record_device_event`) in the backend's unit of work."""

    def record(event: str, tenant: str, user_id: str, reason: str) -> None:
        record_device_event(state, event, "success", tenant=tenant, user_id=user_id, reason=reason)

    wiring: DeviceWiring = state.devices
    return Devices(
        wiring.service,
        record=record,
        begin_unit=state.service.store.begin_unit,
        default_tenant=state.config.default_tenant,
    )


def forget_device(state: AuthFlowState, tenant: str, user_id: str, device_id: str) -> bool:
    """Deprecated (goes in 0.9): ``authflow.devices.revoke(user_id, device_id, tenant=...)``."""
    warnings.warn(
        "flask_authflow.web.devices.forget_device is deprecated and goes in 0.9: "
        "use authflow.devices.revoke(user_id, device_id, tenant=...)",
        DeprecationWarning,
        stacklevel=2,
    )
    return user_devices(state).revoke(user_id, device_id, tenant=tenant)


def end_device_trust(
    state: AuthFlowState, tenant: str, user_id: str, device_id: str | None = None, *, reason: str
) -> int:
    """Deprecated (goes in 0.9): ``authflow.devices.revoke_trust(user_id, device_id,
    tenant=..., reason=...)``."""
    warnings.warn(
        "flask_authflow.web.devices.end_device_trust is deprecated and goes in 0.9: "
        "use authflow.devices.revoke_trust(user_id, device_id, tenant=..., reason=...)",
        DeprecationWarning,
        stacklevel=2,
    )
    return user_devices(state).revoke_trust(user_id, device_id, tenant=tenant, reason=reason)


def _revoked(
    app: Flask, *, user_id: str | None = None, tenant: str | None = None, reason: str = "", **_: Any
) -> None:
    """A password or factor change, a disabled user, an operator's revoke: trust ends."""
    if reason in TRUST_KEPT_ON or user_id is None or tenant is None:
        return
    user_devices(get_state(app)).revoke_trust(user_id, tenant=tenant, reason=reason)


def current_device_id() -> str | None:
    """The id of this browser's device, from a valid device cookie (``None`` without one)."""
    if not has_request_context():
        return None
    claim = _request_device(request).reading.claim
    return claim.device_id if claim is not None else None


def current_device_trusted(tenant: str, user_id: str) -> bool:
    """Whether this browser's device (a valid cookie issued to this user) is trusted by the
    user now: what an authorization policy reads as ``session.device_trusted``."""
    if not has_request_context():
        return False
    state = get_state()
    wiring: DeviceWiring | None = state.devices
    if wiring is None:
        return False
    claim = _request_device(request).reading.claim
    if claim is None or claim.user_id != user_id or claim.tenant != tenant:
        return False
    return wiring.service.is_trusted(tenant, user_id, claim.device_id, state.clock.now())
