"""Account administration that ends sessions: disable, delete, change the password, and
an operator's changes to a user's second factors.

Every change that takes access away from a user revokes all of that user's sessions in
the same call, so a disabled, deleted or re-keyed account keeps no live cookie anywhere;
the session layer never re-creates a revoked session (see :doc:`/sessions`). So does
every change an operator makes to a user's factors (a provisioned TOTP key, a removed
factor, a new set of recovery codes): a session established under the old factors ends.

A new password (``create_user``, ``set_password``) must pass the :class:`PasswordPolicy`
given to :class:`AccountAdmin`; logins never check it, so older passwords keep working.

With the app's login service (``service=``, as :func:`flask_authflow._web.state.account_admin`
builds it), a new password and :meth:`AccountAdmin.logout_everywhere` end more than the
sessions: API tokens, pending account tokens and the lock (see
:mod:`~flask_authflow.login._recovery`), audited with the request's context. Ending one
session (:meth:`AccountAdmin.revoke_session`) ends that session only.
"""

from __future__ import annotations

import hmac
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from flask_authflow import signals
from flask_authflow._core.app_users import AppUserHooks
from flask_authflow._core.factors import EnrollContext, EnrollmentStart
from flask_authflow._core.identifiers import check_tenant, normalise_identifier
from flask_authflow._core.ports import (
    FactorConfig,
    FactorRecordStore,
    IdentityStore,
    SessionStore,
    UnitOfWork,
    UserRecord,
)
from flask_authflow._core.session import AuthSession, new_guest_record, sid_hash
from flask_authflow._outcomes import FactorKind
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import ConfigurationError, EnrollmentError, FactorNotRegistered, UserNotFound
from flask_authflow.login import _recovery as recovery
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._password_policy import PasswordPolicy
from flask_authflow.login._recovery import Ended

if TYPE_CHECKING:
    from flask_authflow.login._service import AuthnService

__all__ = ["AccountAdmin", "AdminBackend"]


class AdminBackend(IdentityStore, Protocol):
    """What account administration needs from the identity store."""

    def set_password_hash(self, tenant: str, user_id: str, password_hash: str) -> None: ...

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None: ...

    def delete_user(self, tenant: str, identifier: str) -> UserRecord: ...

    def list_factors(self, tenant: str, user_id: str) -> list[FactorConfig]: ...


class AccountAdmin:
    """Disable, enable, delete a user, set their password or change their second factors,
    revoking their sessions.

    :param sender: what ``session_revoked`` is sent with (the Flask app, as Flask does).
    :param policy: the :class:`PasswordPolicy` a new password must pass (``None``: no check;
        :func:`flask_authflow._web.state.account_admin` passes the app's policy).
    :param service: the app's :class:`~flask_authflow.login._service.AuthnService`, whose
        registered factors, factor store, clock and site name the factor methods
        (:meth:`enroll_totp`, :meth:`list_factors`, :meth:`disable_factor`,
        :meth:`regenerate_recovery_codes`) use; they raise
        :class:`~flask_authflow.errors.ConfigurationError` without one.
        :func:`flask_authflow._web.state.account_admin` passes the app's service.
    :param app_users: runs the application's ``user_created`` / ``user_deleted`` hooks
        with each account created or deleted here (:class:`~flask_authflow._core.app_users.AppUserHooks`).
    :param hasher: hashes the passwords set here (the backend receives hashes); default:
        the service's, else Argon2id with the RFC 9106 low-memory profile.
        :func:`flask_authflow._web.state.account_admin` passes the app's.
    """

    def __init__(
        self,
        backend: AdminBackend,
        session_store: SessionStore,
        *,
        sender: object = None,
        policy: PasswordPolicy | None = None,
        service: AuthnService | None = None,
        app_users: AppUserHooks | None = None,
        hasher: PasswordHasher | None = None,
    ) -> None:
        self._hasher = hasher if hasher is not None else (service.hasher if service is not None else None)
        self.backend = backend
        self.app_users = app_users
        self.session_store = session_store
        self.sender = sender
        self.policy = policy
        self.service = service

    @property
    def hasher(self) -> PasswordHasher:
        """The hasher of new passwords (the default one is made on first use: it
        precomputes a 64 MiB dummy hash)."""
        if self._hasher is None:
            self._hasher = PasswordHasher()
        return self._hasher

    def _user(self, tenant: str, identifier: str) -> UserRecord:
        user = self.backend.find_user(check_tenant(tenant), normalise_identifier(identifier))
        if user is None:
            raise UserNotFound()
        return user

    def _revoke(self, user: UserRecord, reason: str, keep_sid: str | None = None) -> int:
        return self.revoke_sessions(user.tenant, user.user_id, keep_sid=keep_sid, reason=reason)

    def _signal(self, tenant: str, user_id: str, reason: str) -> None:
        signals.session_revoked.send(
            self.sender if self.sender is not None else self,
            user_id=user_id,
            tenant=tenant,
            reason=reason,
        )

    def _revoke_others(self, tenant: str, user_id: str, keep_sid: str) -> int:
        count = 0
        for record in self.session_store.list_user_sessions(tenant, user_id):
            if record.sid != keep_sid:
                self.session_store.delete(record.sid)
                count += 1
        return count

    def revoke_sessions(
        self, tenant: str, user_id: str, *, keep_sid: str | None = None, reason: str = "revoked"
    ) -> int:
        """End every session of the user, except ``keep_sid`` when given ("log out all other
        sessions"); returns how many ended."""
        if keep_sid is None:
            count = self.session_store.delete_user_sessions(tenant, user_id)
        else:
            count = self._revoke_others(tenant, user_id, keep_sid)
        self._signal(tenant, user_id, reason)
        return count

    def revoke_session(
        self, tenant: str, user_id: str, session_hash: str, *, reason: str = "session_revoked"
    ) -> bool:
        """End the one session of this user whose id hashes to ``session_hash`` (the id pages
        and the CLI show, :func:`~flask_authflow._core.session.sid_hash`); ``False`` when the
        user has no such session. A session of another user is never touched, and nothing
        else of the user ends (API tokens stay: ``reason`` is not one that ends every
        session)."""
        for record in self.session_store.list_user_sessions(tenant, user_id):
            if hmac.compare_digest(sid_hash(record.sid), session_hash):
                self.session_store.delete(record.sid)
                self._signal(tenant, user_id, reason)
                return True
        return False

    def check_password(
        self, tenant: str, identifier: str, password: str, *, has_second_factor: bool = False
    ) -> None:
        """Refuse ``password`` for this user with :class:`~flask_authflow.errors.WeakPassword`
        when it breaks the policy (nothing is checked without a policy)."""
        if self.policy is not None:
            self.policy.check(
                password,
                username=normalise_identifier(identifier),
                tenant=tenant,
                has_second_factor=has_second_factor,
            )

    def create_user(
        self,
        tenant: str,
        identifier: str,
        password: str | None = None,
        *,
        email: str | None = None,
        email_verified_at: datetime | None = None,
        source: str = "admin",
        check_policy: bool = True,
    ) -> UserRecord:
        """Create a user (with ``password``, or none for a passwordless account), and the
        application's row through its ``user_created`` hook (told ``source``).

        The password must pass the policy for a user whose only factor it is
        (:class:`~flask_authflow.errors.WeakPassword` otherwise; nothing is created), unless
        ``check_policy`` is false (the pytest plugin's throw-away users)."""
        tenant = check_tenant(tenant)
        if password is not None and check_policy:
            self.check_password(tenant, identifier, password)

        password_hash = self.hasher.hash(password) if password is not None else None

        def make() -> UserRecord:
            return self.backend.create_user(
                tenant,
                identifier,
                password_hash=password_hash,
                email=email,
                email_verified_at=email_verified_at,
            )

        if self.app_users is None:
            return make()
        return self.app_users.create(self.backend, make, source=source)

    def has_second_factor(self, user: UserRecord) -> bool:
        """True if ``user`` has an enrolled factor besides the password."""
        return any(
            factor.kind is not FactorKind.PASSWORD
            for factor in self.backend.list_factors(user.tenant, user.user_id)
        )

    def disable(self, tenant: str, identifier: str) -> int:
        """Disable the account (logins fail like a wrong password) and end its sessions."""
        user = self._user(tenant, identifier)
        self.backend.set_disabled(user.tenant, user.identifier, True)
        return self._revoke(user, "user_disabled")

    def enable(self, tenant: str, identifier: str) -> None:
        """Allow the account to log in again (no session is restored)."""
        user = self._user(tenant, identifier)
        self.backend.set_disabled(user.tenant, user.identifier, False)

    def delete(self, tenant: str, identifier: str) -> int:
        """Delete the account, its factors and counters, and end its sessions (audit rows stay)."""
        user = self._user(tenant, identifier)
        # Disable, revoke, then delete: no login can start a new session between the
        # revocation and the deletion, and a crash at any step leaves at worst a
        # disabled user without sessions, never sessions of a deleted user.
        self.backend.set_disabled(user.tenant, user.identifier, True)
        count = self._revoke(user, "user_deleted")

        def remove() -> None:
            self.backend.delete_user(user.tenant, user.identifier)

        if self.app_users is None:
            remove()
        else:
            self.app_users.delete(user, remove)
        return count

    def set_password(
        self,
        tenant: str,
        identifier: str,
        password: str,
        *,
        keep_sid: str | None = None,
        context: AuditContext | None = None,
        session: AuthSession | None = None,
    ) -> int:
        """Set a new password and end every session of the user, except ``keep_sid`` when
        given (the session of a user who changes their own password); returns how many ended
        (:meth:`change_password` tells what else ended)."""
        return self.change_password(
            tenant, identifier, password, keep_sid=keep_sid, context=context, session=session
        ).sessions

    def change_password(
        self,
        tenant: str,
        identifier: str,
        password: str,
        *,
        keep_sid: str | None = None,
        context: AuditContext | None = None,
        session: AuthSession | None = None,
        replaces: str | None = None,
    ) -> Ended:
        """Set a new password and end every session of the user but ``keep_sid``; with the
        login service also the user's API tokens, pending account tokens (reset, change of
        e-mail, verification) and locks, audited (``password_changed`` and its side rows)
        with ``context`` (the request's; unknown from the command line) on ``session`` (the
        asking one; a guest's for an operator). Without the service, only the password and
        the sessions change.

        The password must pass the policy (shorter passwords are allowed when the user has a
        second factor enrolled); :class:`~flask_authflow.errors.WeakPassword` otherwise, and
        nothing changes. ``replaces``: the hash the current password was verified against
        (:func:`~flask_authflow.login._recovery.change_password`)."""
        user = self._user(tenant, identifier)
        self.check_password(
            user.tenant, user.identifier, password, has_second_factor=self.has_second_factor(user)
        )
        if self.service is None:
            self.backend.set_password_hash(user.tenant, user.user_id, self.hasher.hash(password))
            return Ended(self._revoke(user, recovery.CHANGE_EVENT, keep_sid))
        ctx, asking = self._request(context, session)
        return recovery.change_password(
            self.service,
            ctx,
            asking,
            user.tenant,
            user.user_id,
            password,
            keep_sid=keep_sid,
            replaces=replaces,
        )

    def logout_everywhere(
        self,
        tenant: str,
        user_id: str,
        *,
        keep_sid: str | None = None,
        context: AuditContext | None = None,
        session: AuthSession | None = None,
    ) -> Ended:
        """Log out everywhere: end every session of the user but ``keep_sid``, and (with
        the login service) the user's API tokens, pending account tokens and locks, audited
        ``logout_everywhere`` with ``context`` on ``session`` (as :meth:`change_password`).

        :raises UserNotFound: no such user."""
        if self.service is None:
            return Ended(
                self.revoke_sessions(tenant, user_id, keep_sid=keep_sid, reason=recovery.EVERYWHERE_EVENT)
            )
        ctx, asking = self._request(context, session)
        return recovery.logout_everywhere(self.service, ctx, asking, tenant, user_id, keep_sid=keep_sid)

    def _request(
        self, context: AuditContext | None, session: AuthSession | None
    ) -> tuple[AuditContext, AuthSession]:
        """The audit context and session a flow runs in: the given ones, or an operator's
        (nothing known, a guest session)."""
        assert self.service is not None
        ctx = context if context is not None else AuditContext.unknown()
        if session is None:
            session = AuthSession(new_guest_record(self.service.clock.now()), new=True)
        return ctx, session

    # --- second factors, as an operator changes them ------------------------------------------

    def _factor_service(self) -> tuple[AuthnService, FactorRecordStore]:
        if self.service is None:
            raise ConfigurationError(
                "changing a user's factors needs the login service: build AccountAdmin with "
                "service=... (flask_authflow._web.state.account_admin(app) does)"
            )
        return self.service, self.service.record_store()

    def enroll_totp(self, tenant: str, identifier: str) -> str:
        """Provision a new TOTP key for the user and return its ``otpauth://`` URI.

        The factor is **confirmed at once**: an operator cannot prove possession of a key
        the user has not loaded yet, so the usual proof (a code from the new key) is skipped
        and the key counts for logins from now on. It replaces the user's earlier TOTP
        factor, confirmed or pending, in the same store transaction. The URI holds the key
        (it is the only copy outside the store, where the key is sealed): hand it to the
        user over a channel you trust. Every session of the user ends (reason
        ``factor_enrolled``).

        :raises UserNotFound: no such user. :raises FactorNotRegistered: the app has no TOTP
            factor.
        """
        user = self._user(tenant, identifier)
        start = self._enroll_at_once(user, FactorKind.TOTP)
        self._revoke(user, "factor_enrolled")
        return str(start.public["otpauth_uri"])

    def _enroll_at_once(self, user: UserRecord, kind: FactorKind) -> EnrollmentStart:
        """Begin an enrollment of ``kind`` for ``user`` and confirm it at once, replacing the
        user's earlier factor of that kind in the same store transaction."""
        service, store = self._factor_service()
        ctx = EnrollContext(
            tenant=user.tenant,
            user_id=user.user_id,
            account_name=user.identifier,
            issuer_name=service.site_name,
            now=service.clock.now(),
            store=store,
            flow={},
        )
        try:  # the pending factor and its confirmation: one commit
            unit: UnitOfWork | None = service.store.begin_unit()
        except RuntimeError:  # a unit of this context is open: the writes join it
            unit = None
        try:
            start = service.enrollment(kind).begin(ctx, {})
            if not store.confirm_factor(user.tenant, user.user_id, start.factor_id, replace_kind=True):
                # Only a parallel change of the same user's factor gets here: the new one is gone.
                raise EnrollmentError(f"the new {kind.value} factor could not be confirmed: try again")
        except BaseException:
            if unit is not None:
                unit.rollback()
            raise
        if unit is not None:
            unit.commit()
        return start

    def list_factors(
        self, tenant: str, identifier: str, *, include_pending: bool = False
    ) -> list[FactorConfig]:
        """The user's confirmed factors, password included, oldest first; with
        ``include_pending`` also enrollments still waiting for their proof
        (``confirmed=False``). A :class:`FactorConfig` carries its sealed or hashed
        ``secret``: show its other fields, never that one.

        :raises UserNotFound: no such user."""
        user = self._user(tenant, identifier)
        _, store = self._factor_service()
        return store.list_user_factors(user.tenant, user.user_id, include_pending=include_pending)

    def disable_factor(self, tenant: str, identifier: str, factor_id: str) -> bool:
        """Remove one of the user's factors (confirmed or pending) and end every session of
        the user (reason ``factor_disabled``). ``False``, and nothing changes, when the user
        has no factor ``factor_id`` or it is the password (set another one instead).

        :raises UserNotFound: no such user."""
        user = self._user(tenant, identifier)
        _, store = self._factor_service()
        config = store.get_factor(user.tenant, user.user_id, factor_id)
        if config is None or config.kind is FactorKind.PASSWORD:
            return False
        if not store.delete_factor(user.tenant, user.user_id, factor_id):
            return False
        self._revoke(user, "factor_disabled")
        return True

    def regenerate_recovery_codes(self, tenant: str, identifier: str) -> list[str]:
        """Issue a new set of recovery codes for the user, confirmed at once, and return the
        codes (``xxxxx-xxxxx``; only digests are stored, so they cannot be shown again). The
        previous set stops working in the same store transaction, and every session of the
        user ends (reason ``recovery_codes_regenerated``). With the default login steps,
        recovery codes are asked for only as an alternative to another second factor.

        :raises UserNotFound: no such user. :raises FactorNotRegistered: the app's
            ``recovery_code`` enrollment shows no codes (an application's own kind).
        """
        user = self._user(tenant, identifier)
        codes = self._enroll_at_once(user, FactorKind.RECOVERY_CODE).public.get("codes")
        if not isinstance(codes, list) or not all(isinstance(code, str) for code in codes):
            raise FactorNotRegistered("the app's recovery_code enrollment shows no codes to hand out")
        self._revoke(user, "recovery_codes_regenerated")
        return codes
