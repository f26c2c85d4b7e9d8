"""``authflow.login``: the login steps an application calls itself on the current
request's session (its own login form, a sign-up that signs the user in, a magic link,
a passkey button, a workflow), each audited with the request's context.

The flows are :class:`~flask_authflow.login._service.AuthnRequest`'s; the app wires in the
current request's handle and session, and what "remember me" does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from flask_authflow._core.service import TenantScoped
from flask_authflow._core.session import AuthSession
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorOutcome,
    FactorRequired,
    LoginOutcome,
    WorkflowOutcome,
    WorkflowPending,
    WorkflowStarted,
)
from flask_authflow.login import _workflow as workflow
from flask_authflow.login._service import AuthnRequest

__all__ = ["Login"]


class Login(TenantScoped):
    """Sign the current session in, out, by passkey, and through workflows.

    :param here: the login handle and session of the current request.
    :param remember: makes the session of a sign-in completed in this request long-lived.
    :param workflow_expiry: ``AUTHFLOW_WORKFLOW_EXPIRY``'s per-kind overrides.
    """

    def __init__(
        self,
        *,
        here: Callable[[], tuple[AuthnRequest, AuthSession]],
        remember: Callable[[AuthSession], None],
        workflow_expiry: Mapping[str, Any] | None,
        default_tenant: str,
    ) -> None:
        super().__init__(default_tenant=default_tenant)
        self._here = here
        self._remember = remember
        self._workflow_expiry = workflow_expiry

    def password(
        self, identifier: str, password: str, *, tenant: str | None = None, remember: bool = False
    ) -> LoginOutcome | FactorOutcome:
        """Begin a login and verify the password in one call, as ``POST /login`` does.

        Returns the begin's outcome when it does not ask for the password (locked, step-up),
        else the password step's. With ``remember``, the session of a sign-in completed in
        this request lives ``AUTHFLOW_REMEMBER_ME_TTL`` (see :doc:`/devices`)."""
        handle, session = self._here()
        with FactorCredential.password(password) as credential:
            outcome = handle.login_with_password(identifier, self._tenant(tenant), session, credential)
        if remember is True:
            self._remember(session)
        return outcome

    def user(
        self, user_id: str, *, tenant: str | None = None, method: str = "external", skip_factors: bool = False
    ) -> Authenticated | FactorRequired | WorkflowPending:
        """Log the user in on the current session after the application checked who it is
        (sign-up, a magic link); see :meth:`AuthnRequest.establish
        <flask_authflow.login._service.AuthnRequest.establish>`. A pending workflow ends
        first (audited ``workflow_aborted``, reason ``new_login``).

        Returns ``Authenticated``, or ``FactorRequired`` when the user has factors beyond
        the password (never skipped unless ``skip_factors=True``, which is audited), or
        ``WorkflowPending`` when the user must set up a second factor first.

        :raises ~flask_authflow.errors.UserNotFound: no such user.
        :raises ~flask_authflow.errors.AccountDisabled: the account is disabled."""
        handle, session = self._here()
        return handle.establish(
            session, self._tenant(tenant), user_id, method=method, skip_factors=skip_factors
        )

    def logout(self) -> None:
        """Log the current session out (audited; id rotated; cookie cleared)."""
        handle, session = self._here()
        handle.logout(session)

    def begin_passkey(self, *, tenant: str | None = None) -> Mapping[str, Any]:
        """WebAuthn request options for a usernameless passkey login (``AUTHFLOW_PASSKEY_LOGIN``)."""
        handle, session = self._here()
        return handle.begin_passkey_login(self._tenant(tenant), session)

    def finish_passkey(self, credential_json: str | bytes) -> FactorOutcome:
        """Finish a passkey login with the browser's assertion JSON."""
        handle, session = self._here()
        with FactorCredential(FactorKind.WEBAUTHN, credential_json) as credential:
            return handle.finish_passkey_login(credential, session)

    # --- workflows (:doc:`/workflows`) ---------------------------------------------------------

    def start_workflow(
        self, kind: str, data: Any = None, expires_in: float | timedelta | None = None
    ) -> WorkflowStarted:
        """Start a workflow of ``kind`` on the current session; the outcome holds its token."""
        handle, session = self._here()
        return workflow.start(
            handle.service, handle.ctx, session, kind, data, expires_in, self._workflow_expiry
        )

    def complete_workflow(self, token_or_kind: str) -> WorkflowOutcome:
        """Complete the current session's workflow with its token (or a ``WorkflowKind``)."""
        handle, session = self._here()
        return workflow.complete(handle.service, handle.ctx, session, token_or_kind)

    def abort_workflow(self) -> WorkflowOutcome:
        """End the current session's workflow without completing it."""
        handle, session = self._here()
        return workflow.abort(handle.service, handle.ctx, session)
