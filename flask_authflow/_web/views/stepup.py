"""Confirm it is you (``/step-up``): the user's strongest login step again.

The page asks for the user's *last* login step (``begin_step_up(strongest=True)``): the
password for an account without second factors, else one of the kinds of its last step
(an authenticator app *or* a security key *or* a recovery code ...), with the factor
page's forms. Only such a step-up lets the user add or remove a sign-in method: a
password step-up would let anyone who knows the password (and holds a stolen session)
remove the second factor.

A step-up the page began is kept while it waits (a reload shows the same one, so an
e-mailed code stays valid); a wrong answer ends it (the service does), and the page
begins a new one. The login itself is never ended here: a lock refuses further tries
until it lifts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Response, redirect, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow._core.session import AuthSession, step_kinds
from flask_authflow._outcomes import Authenticated, FactorCredential, FactorKind, Locked
from flask_authflow._web.csrf import csrf_valid
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views.common import (
    MAX_CODE_LENGTH,
    MAX_CREDENTIAL_LENGTH,
    MESSAGES,
    VIEWS_BLUEPRINT,
    error_message,
    error_status,
    form_has,
    form_text,
    handle,
    identifier_of,
    lock_message,
    page,
    pending_step_up,
    request_next,
    signed_in,
    to_login,
)
from flask_authflow._web.views.signin import FACTOR_NOTICES, send_refused, sends_codes, step_methods
from flask_authflow.errors import AuthFlowError, StoreUnavailable

__all__ = [
    "STEP_UP_NOTICES",
    "ensure_step_up",
    "send_step_up_code",
    "step_up",
    "strongest_step",
    "waiting_step",
]

#: The notices the step-up page shows after a redirect (``?notice=...``); only these keys.
STEP_UP_NOTICES = {"code_sent": FACTOR_NOTICES["code_sent"]}

_PASSWORD = FactorKind.PASSWORD.value


# --- which step ----------------------------------------------------------------------------------


def strongest_step(session: AuthSession) -> tuple[str, ...]:
    """The kinds of the signed-in user's last login step, read without starting anything:
    what ``begin_step_up(session, strongest=True)`` asks for.

    :raises StoreUnavailable: the factor store failed.
    """
    service = get_state().service
    tenant, user_id = str(session.tenant), str(session.user_id)
    try:
        enrolled = service.factor_store.required_factors(tenant, user_id)
        steps = service.steps_for(tenant, user_id, enrolled)
    except AuthFlowError:
        raise
    except Exception as exc:  # fail closed, as the service does
        raise StoreUnavailable("a store needed for the step-up failed") from exc
    return step_kinds(steps[-1]) if steps else (_PASSWORD,)


def waiting_step(session: AuthSession) -> tuple[str, ...] | None:
    """The kinds of the strongest step-up the session waits for (``None``: none waits, or
    the pending one is another step, such as a password-only step-up an app began)."""
    pending = pending_step_up(session)
    return pending if pending and pending == strongest_step(session) else None


def ensure_step_up(session: AuthSession) -> tuple[tuple[str, ...], bool]:
    """The kinds of the strongest step-up, begun (its factors challenged: WebAuthn options,
    an e-mail code when it is the only kind) unless one already waits; and whether it was
    begun now.

    :raises AuthFlowError: the service refused (a store failed ...).
    """
    waiting = waiting_step(session)
    if waiting is not None:
        return waiting, False
    handle().begin_step_up(session, strongest=True)
    return pending_step_up(session) or (_PASSWORD,), True


def send_step_up_code(session: AuthSession, kind: FactorKind) -> Any:
    """Send the code of ``kind`` for the waiting step-up (one is begun if none waits); the
    factor's refusal (``"too_many_sends"`` ...), or ``None`` when the code went out.

    :raises AuthFlowError: the service refused (a store failed ...).
    """
    kinds, begun = ensure_step_up(session)
    answer: Any = None
    if not (begun and kinds == (kind.value,)):  # a new step-up of this kind alone sent one
        answer = handle().challenge(kind, session).challenges.get(kind)
    return answer.get("error") if isinstance(answer, Mapping) else None


# --- the page ------------------------------------------------------------------------------------


def _step_up_page(
    target: str | None,
    status: int = 200,
    *,
    error: str | None = None,
    notice: str | None = None,
    begin: bool = True,
) -> Response:
    """The step-up page. With ``begin``, a strongest step-up waits when the page is shown
    (one is begun if none does); without (a refused token, a lock), nothing is started and
    the page shows the step's forms as they would be."""
    session = current_auth_session()
    try:
        kinds = ensure_step_up(session)[0] if begin else (waiting_step(session) or strongest_step(session))
    except AuthFlowError as failure:  # a store failed: say so, offer nothing
        kinds = ()
        if error is None:
            error, status = error_message(failure), error_status(failure)
    methods = step_methods(kinds)
    return page(
        "step_up.html",
        status,
        next=target,
        identifier=identifier_of(session),
        error=error,
        notice=notice,
        kinds=kinds,
        password=_PASSWORD in kinds,
        methods=methods,
    )


def _secret(kind: FactorKind) -> tuple[str, str | None]:
    """The answer typed or sent for ``kind`` (a code without its spaces), and the message
    refusing it, if any."""
    if kind is FactorKind.PASSWORD:
        password = form_text("password")
        return password, None if password else MESSAGES["missing_password"]
    if kind is FactorKind.WEBAUTHN:
        credential = form_text("credential").strip()
        if not credential:
            return credential, MESSAGES["missing_credential"]
        too_long = len(credential) > MAX_CREDENTIAL_LENGTH
        return credential, MESSAGES["credential_too_long"] if too_long else None
    code = "".join(form_text("code").split())  # "123 456" as apps show it
    if not code:
        return code, MESSAGES["missing_code"]
    return code, MESSAGES["too_long"] if len(code) > MAX_CODE_LENGTH else None


def _wrong(kind: FactorKind) -> str:
    if kind is FactorKind.PASSWORD:
        return MESSAGES["wrong_password"]
    return MESSAGES["retry_key" if kind is FactorKind.WEBAUTHN else "retry_code"]


def _done(target: str | None) -> BaseResponse:
    return redirect(target or url_for(f"{VIEWS_BLUEPRINT}.account", notice="stepped_up"))


# --- the view ------------------------------------------------------------------------------------


def step_up() -> ResponseReturnValue:
    """GET: the page (a strongest step-up begun, or the one waiting). POST: the password or
    a code / security key response of the chosen ``kind`` (``action=send``: e-mail a code)."""
    target = request_next()
    if not signed_in():
        return to_login(target)
    if request.method == "GET":
        return _step_up_page(target, notice=STEP_UP_NOTICES.get(request.args.get("notice", "")))
    if not csrf_valid():
        return _step_up_page(target, 400, error=MESSAGES["csrf"], begin=False)
    session = current_auth_session()
    try:
        kinds = waiting_step(session) or strongest_step(session)
    except AuthFlowError as failure:
        return _step_up_page(target, error_status(failure), error=error_message(failure), begin=False)
    chosen = form_text("kind") or (_PASSWORD if form_has("password") else kinds[0])
    if chosen not in kinds or chosen not in FactorKind:
        message = MESSAGES["stronger_step"] if chosen == _PASSWORD else MESSAGES["wrong_kind"]
        return _step_up_page(target, 400, error=message)
    kind = FactorKind(chosen)
    if form_text("action") == "send":
        return _send(target, session, kind)
    secret, problem = _secret(kind)
    if problem is not None:
        return _step_up_page(target, 400, error=problem)
    try:
        ensure_step_up(session)
        with FactorCredential(kind, secret) as credential:
            outcome = handle().verify_factor(credential, session)
    except AuthFlowError as failure:  # malformed input (not counted), a store failure
        return _step_up_page(target, error_status(failure), error=error_message(failure))
    if isinstance(outcome, Authenticated):
        return _done(target)
    if isinstance(outcome, Locked):
        return _step_up_page(target, 403, error=lock_message(outcome.until), begin=False)
    # Wrong: the service ended the step-up (the login stays); the page begins a new one.
    return _step_up_page(target, 401, error=_wrong(kind))


def _send(target: str | None, session: AuthSession, kind: FactorKind) -> BaseResponse:
    """ "E-mail me a code": (re)issue the code of ``kind`` for the waiting step-up."""
    if not sends_codes(kind.value, get_state().service.factor(kind)):
        return _step_up_page(target, 400, error=MESSAGES["sends_nothing"])
    try:
        problem = send_step_up_code(session, kind)
    except AuthFlowError as failure:
        return _step_up_page(target, error_status(failure), error=error_message(failure))
    if problem is not None:  # the factor declined without raising (too many codes sent ...)
        status = 429 if problem == "too_many_sends" else 400
        return _step_up_page(target, status, error=send_refused(problem, step_up=True))
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.step_up", next=target, notice="code_sent"))
