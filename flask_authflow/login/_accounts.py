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

With the login service every operator's change (disable, enable, delete, unlock, and the
factor changes of :mod:`~flask_authflow.login._operator_factors`) is ONE
:class:`~flask_authflow.login._operator_change.OperatorChange`: the sessions end first,
then the change and its own audit row commit together or not at all, then a second pass
ends a session a login started meanwhile. Disabling and deleting hold the user's row in
the unit, and a login that completes re-reads the account under the same lock
(:mod:`~flask_authflow.login._verify`): it sees the change, or commits first and the
second pass ends its session. Without the service (a bare ``AccountAdmin(backend,
session_store)``) the changes are made step by step, unaudited: the audit sink, the
clock and the unit of work are the service's.
"""

from __future__ import annotations

import hmac
from contextlib import ExitStack
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Protocol

from flask_authflow import signals
from flask_authflow._core.app_users import AppUserHooks
from flask_authflow._core.identifiers import check_tenant, normalise_identifier
from flask_authflow._core.ports import (
    FactorConfig,
    FactorRecordStore,
    IdentityStore,
    SessionStore,
    UserRecord,
)
from flask_authflow._core.session import AuthSession, new_guest_record, sid_hash
from flask_authflow._outcomes import FactorKind
from flask_authflow.audit._context import AuditContext, audit_context
from flask_authflow.errors import ConfigurationError, UserNotFound
from flask_authflow.login import _operator_factors as operator_factors
from flask_authflow.login import _recovery as recovery
from flask_authflow.login._operation import Operation, guard_store
from flask_authflow.login._operator_change import (
    DELETE_EVENT,
    DISABLE_EVENT,
    ENABLE_EVENT,
    UNLOCK_EVENT,
    OperatorChange,
    Unlocked,
    account_locked_until,
    lock_subjects,
)
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._password_policy import PasswordPolicy
from flask_authflow.login._recovery import Ended
from flask_authflow.login._sign_in_ways import hold_user

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

    def disable(
        self,
        tenant: str,
        identifier: str,
        *,
        context: AuditContext | None = None,
        session: AuthSession | None = None,
    ) -> int:
        """Disable the account (logins fail like a wrong password) and end its sessions; how
        many ended. With the login service: audited ``account_disabled`` (see the module's
        text), with ``context`` on ``session`` as :meth:`change_password`.

        :raises UserNotFound: no such user."""
        user = self._user(tenant, identifier)
        if self.service is None:
            self.backend.set_disabled(user.tenant, user.identifier, True)
            return self._revoke(user, "user_disabled")

        def change(op: Operation) -> None:
            # The UPDATE holds the user's row: a login completing now takes turns with it.
            guard_store(lambda: self.backend.set_disabled(user.tenant, user.identifier, True))

        change_of = self._change(user, context, session)
        return change_of.run(DISABLE_EVENT, change, ends_sessions="user_disabled")[1]

    def enable(
        self,
        tenant: str,
        identifier: str,
        *,
        context: AuditContext | None = None,
        session: AuthSession | None = None,
    ) -> None:
        """Allow the account to log in again (no session is restored); with the login
        service audited ``account_enabled``.

        :raises UserNotFound: no such user."""
        user = self._user(tenant, identifier)
        if self.service is None:
            self.backend.set_disabled(user.tenant, user.identifier, False)
            return

        def change(op: Operation) -> None:
            guard_store(lambda: self.backend.set_disabled(user.tenant, user.identifier, False))

        self._change(user, context, session).run(ENABLE_EVENT, change)

    def delete(
        self,
        tenant: str,
        identifier: str,
        *,
        context: AuditContext | None = None,
        session: AuthSession | None = None,
    ) -> int:
        """Delete the account, its factors and counters, and end its sessions (audit rows
        stay); how many sessions ended. With the login service audited ``account_deleted``;
        the account, the application's ``user_deleted`` hook's rows and the audit row
        commit together, and ``user_deleted`` is sent once they did.

        :raises UserNotFound: no such user."""
        user = self._user(tenant, identifier)
        if self.service is None:
            # Disable, revoke, then delete: no login can start a new session between the
            # revocation and the deletion, and a crash at any step leaves at worst a
            # disabled user without sessions, never sessions of a deleted user.
            self.backend.set_disabled(user.tenant, user.identifier, True)
            count = self._revoke(user, "user_deleted")
            self._remove(user)
            return count

        def change(op: Operation) -> None:
            self._hold(user)  # first, as a login takes it: the user's row, then its counters
            self._remove(user)

        with ExitStack() as stack:
            release = stack.enter_context(signals.held_until_commit())  # user_deleted, once kept
            if self.app_users is not None:  # the hook's rows and the account: one transaction
                stack.enter_context(self.app_users.owned(deleting=True))
            change_of = self._change(user, context, session)
            ended = change_of.run(DELETE_EVENT, change, ends_sessions="user_deleted")[1]
        release()
        return ended

    def _remove(self, user: UserRecord) -> None:
        """Delete ``user`` from the store, with the application's ``user_deleted`` hook."""

        def remove() -> None:
            guard_store(lambda: self.backend.delete_user(user.tenant, user.identifier))

        if self.app_users is None:
            remove()
        else:
            self.app_users.delete(user, remove)

    def unlock(
        self,
        tenant: str,
        identifier: str,
        *,
        context: AuditContext | None = None,
        session: AuthSession | None = None,
    ) -> Unlocked:
        """End the user's lockout: the account-wide locks of its identifier and of its user
        id (a step-up's), the (account, address) pair locks, and the failures counted
        toward them (the full number of tries again); what ended. Audited
        ``lockout_cleared`` (reason ``locked_until=<time>``, or ``not_locked``), in one
        unit with the change. Needs the login service
        (:class:`~flask_authflow.errors.ConfigurationError` otherwise).

        :raises UserNotFound: no such user."""
        user = self._user(tenant, identifier)
        svc = self._login_service("unlocking a user")

        def change(op: Operation) -> Unlocked:
            until = account_locked_until(svc.lockout.locked_until, user, op.now)
            for subject in lock_subjects(user):
                guard_store(partial(svc.store.clear_lock, user.tenant, subject))
            return Unlocked(until)

        def reason(done: Unlocked) -> str:
            until = done.locked_until
            return f"locked_until={until.isoformat()}" if until is not None else "not_locked"

        return self._change(user, context, session).run(UNLOCK_EVENT, change, describe=reason)[0]

    # --- the one template of an operator's change ---------------------------------------------

    def _login_service(self, what: str) -> AuthnService:
        if self.service is None:
            raise ConfigurationError(
                f"{what} needs the login service: build AccountAdmin with service=... "
                "(flask_authflow._web.state.account_admin(app) does)"
            )
        return self.service

    def _hold(self, user: UserRecord) -> None:
        """Lock the user's row in the open unit: a login that completes meanwhile re-reads
        the account under the same lock (its settlement's ``holder``, see ``_verify``), so
        it sees the change, or committed before it and its session is ended by the second
        pass."""
        assert self.service is not None
        hold_user(self.service, user.tenant, user.user_id)

    def _change(
        self, user: UserRecord, context: AuditContext | None, session: AuthSession | None
    ) -> OperatorChange:
        """What an operator's change of ``user`` runs with (see :meth:`_request`)."""
        svc = self._login_service("an audited change of an account")
        ctx, asking = self._request(context, session)

        def first(reason: str) -> int:
            return self.revoke_sessions(user.tenant, user.user_id, reason=reason)

        def late(reason: str) -> int:
            count = self.session_store.delete_user_sessions(user.tenant, user.user_id)
            if count:
                self._signal(user.tenant, user.user_id, reason)
            return count

        return OperatorChange(svc, ctx, asking, user, first, late)

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
        (the request's context in a request, nothing known from the command line; a guest
        session)."""
        assert self.service is not None
        ctx = context if context is not None else audit_context()
        if session is None:
            session = AuthSession(new_guest_record(self.service.clock.now()), new=True)
        return ctx, session

    # --- second factors, as an operator changes them (see _operator_factors) -----------------

    def _factor_service(self) -> tuple[AuthnService, FactorRecordStore]:
        service = self._login_service("changing a user's factors")
        return service, service.record_store()

    def _factor_change(
        self, tenant: str, identifier: str, context: AuditContext | None, session: AuthSession | None
    ) -> OperatorChange:
        """What an operator's change of the user's factors runs with."""
        self._factor_service()  # ConfigurationError without the login service
        return self._change(self._user(tenant, identifier), context, session)

    def enroll_totp(
        self,
        tenant: str,
        identifier: str,
        *,
        context: AuditContext | None = None,
        session: AuthSession | None = None,
    ) -> str:
        """Provision a new TOTP key for the user and return its ``otpauth://`` URI.

        The factor is **confirmed at once**: an operator cannot prove possession of a key
        the user has not loaded yet, so the usual proof (a code from the new key) is skipped
        and the key counts for logins from now on. It replaces the user's earlier TOTP
        factor, confirmed or pending, in the same store transaction. The URI holds the key
        (it is the only copy outside the store, where the key is sealed): hand it to the
        user over a channel you trust. Every session of the user ends (reason
        ``factor_enrolled``); audited ``factor_enrolled`` (factor ``totp``).

        :raises UserNotFound: no such user. :raises FactorNotRegistered: the app has no TOTP
            factor.
        """
        return operator_factors.enroll_totp(self._factor_change(tenant, identifier, context, session))

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

    def disable_factor(
        self,
        tenant: str,
        identifier: str,
        factor_id: str,
        *,
        context: AuditContext | None = None,
        session: AuthSession | None = None,
    ) -> bool:
        """Remove one of the user's factors (confirmed or pending) and end every session of
        the user (reason ``factor_disabled``); audited ``factor_disabled`` (with the
        factor's kind). ``False``, and nothing changes, when the user has no factor
        ``factor_id`` or it is the password (set another one instead).

        :raises UserNotFound: no such user."""
        change = self._factor_change(tenant, identifier, context, session)
        return operator_factors.disable_factor(change, factor_id)

    def regenerate_recovery_codes(
        self,
        tenant: str,
        identifier: str,
        *,
        context: AuditContext | None = None,
        session: AuthSession | None = None,
    ) -> list[str]:
        """Issue a new set of recovery codes for the user, confirmed at once, and return the
        codes (``xxxxx-xxxxx``; only digests are stored, so they cannot be shown again). The
        previous set stops working in the same store transaction, and every session of the
        user ends (reason ``recovery_codes_regenerated``); audited
        ``recovery_codes_regenerated``. With the default login steps, recovery codes are
        asked for only as an alternative to another second factor.

        :raises UserNotFound: no such user. :raises FactorNotRegistered: the app's
            ``recovery_code`` enrollment shows no codes (an application's own kind).
        """
        change = self._factor_change(tenant, identifier, context, session)
        return operator_factors.regenerate_recovery_codes(change)
