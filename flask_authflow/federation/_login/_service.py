"""The federation service: :class:`FederationService`, thin.

It holds what the flows need (the registry, the stores, the application's hooks) and the
one commit every flow's writes run in (:meth:`FederationService.one_commit`); each public
method delegates to the module of its flow: ``_begin`` (the authorize URL), ``_finish``
(the callback), ``_native`` (the native hand-over), ``_linking`` (link and unlink) and
``_logout`` (back-channel and RP-initiated logout).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from typing import Any

from flask_authflow import signals
from flask_authflow._clock import Clock
from flask_authflow._core.app_users import AppTransaction, AppUserHooks
from flask_authflow._core.ports import (
    FactorStore,
    IdentityStore,
    LoginRecorder,
    SessionStore,
    UnitOfWork,
)
from flask_authflow._core.session import AuthSession
from flask_authflow.federation._errors import CsrfMismatch
from flask_authflow.federation._linking import IdentityLinked, ProvisionHook
from flask_authflow.federation._links import FederationStore, IdentityLink
from flask_authflow.federation._login import _begin, _finish, _linking, _logout, _native
from flask_authflow.federation._login._begin import OAuthLoginOptions
from flask_authflow.federation._login._identity import ClaimsMapper
from flask_authflow.federation._login._sign_in import FederatedLogin
from flask_authflow.federation._provider import OAuthProvider, ProviderRegistry
from flask_authflow.federation._provider_tokens import ProviderTokens

__all__ = ["AppTransactionSource", "FederationService", "SessionJoin", "UnitSource"]

#: The application's own database transaction, if it has one (Flask-SQLAlchemy's
#: ``db.session``): a callback's writes join it (see :meth:`FederationService.one_commit`).
AppTransactionSource = Callable[[], "AppTransaction | None"]
#: Opens the backend's unit of work (``LoginStore.begin_unit``): every write of a callback,
#: a link or an unlink runs in it and commits once. ``None``: the backend has none.
UnitSource = Callable[[], UnitOfWork] | None
#: Writes the signed-in session in the callback's unit, when the session store is on the
#: backend's database: ``(session, unit) -> after_commit``, or ``None`` when the session
#: was ended meanwhile. ``None`` (Redis, memory): the response writes it after the commit.
SessionJoin = Callable[[AuthSession, UnitOfWork], "Callable[[], None] | None"]


class FederationService:
    """Federated login, back-channel logout and RP-initiated logout for one app."""

    def __init__(
        self,
        registry: ProviderRegistry,
        *,
        links: FederationStore,
        accounts: IdentityStore,
        session_store: SessionStore,
        clock: Clock,
        default_tenant: str,
        claims_mapper: Callable[[], ClaimsMapper | None] = lambda: None,
        sender: object = None,
        factors: FactorStore | None = None,
        provision_user: Callable[[], ProvisionHook | None] = lambda: None,
        app_transaction: AppTransactionSource = lambda: None,
        app_users: AppUserHooks | None = None,
        tokens: ProviderTokens | None = None,
        begin_unit: UnitSource = None,
        session_join: Callable[[], SessionJoin | None] = lambda: None,
    ) -> None:
        self.registry = registry
        self._begin_unit = begin_unit
        self._session_join = session_join
        self.links = links
        self.accounts = accounts
        self.session_store = session_store
        self.clock = clock
        self.default_tenant = default_tenant
        self._claims_mapper = claims_mapper
        self._provision_user = provision_user
        self._app_transaction = app_transaction
        #: runs the application's ``user_created`` hook for an account a sign-in creates.
        self.app_users = app_users
        #: where unlink looks for the user's other ways to sign in (password, passkey).
        self.factors = factors
        #: keeps the tokens of providers with ``store_tokens`` (``None``: the store cannot).
        self.tokens = tokens
        #: what ``session_revoked`` is sent with (the Flask app, as Flask does).
        self.sender = sender if sender is not None else self

    def provider(self, name: str) -> OAuthProvider:
        return self.registry.get(name)

    def claims_mapper(self) -> ClaimsMapper | None:
        """The application's ``claims_mapper`` (``None``: the default mapping)."""
        return self._claims_mapper()

    def provision_hook(self) -> ProvisionHook | None:
        """The application's ``provision_user`` hook, if it registered one."""
        return self._provision_user()

    # --- the one commit -----------------------------------------------------------------------

    @contextmanager
    def one_commit(self, session: AuthSession, *, with_session: bool = False) -> Iterator[None]:
        """Run the block's writes (an account and the application's rows of its hooks, an
        identity link, provider tokens, audit rows and, ``with_session`` on a session store
        of the backend's database, the session: signed in, its ceremony used up) in ONE
        commit, or none of them.

        The application's ``db.session`` is never ended here when it holds work of its own
        (the block then runs in a savepoint of it, the application's commit decides its
        hook rows); when it holds nothing, the flow owns its transaction and the backend's
        unit of work runs in it (on SQLite the unit must not run beside it: one writer).
        On any failure the session is put back as it was when the block began.
        """
        snapshot = session.snapshot()
        transaction = self._app_transaction()
        with ExitStack() as app:
            # login_succeeded, user_created, ...: sent once the commit is done, or never.
            release = app.enter_context(signals.held_until_commit())
            if transaction is not None and transaction.pending():
                app.enter_context(transaction.savepoint())
            elif transaction is not None and not transaction.owned():
                app.enter_context(transaction.own())
            unit = self._open_unit()
            try:
                yield
                written = None
                if unit is not None:
                    join = self._session_join() if with_session else None
                    written = _joined_session(join, session, unit) if join is not None else None
                    held, unit = unit, None
                    held.commit()
            except BaseException:
                if unit is not None:
                    unit.rollback()
                session.restore(snapshot)
                raise
        if written is not None:
            written()
        release()

    def _open_unit(self) -> UnitOfWork | None:
        """The backend's unit of work, or ``None`` (none, or one already open in this
        context: the block's writes join that one, whose owner commits)."""
        if self._begin_unit is None:
            return None
        try:
            return self._begin_unit()
        except RuntimeError:
            return None

    # --- the flows ------------------------------------------------------------------------

    def begin(
        self, session: AuthSession, provider_name: str, options: OAuthLoginOptions | None = None
    ) -> str:
        """Start a federated login on ``session``: the authorize URL to send the browser to.

        :raises UnknownProvider, Discovery, ProviderUnreachable: the provider cannot be used.
        """
        return _begin.begin(self, session, provider_name, options, None)

    def finish(
        self,
        handle: LoginRecorder,
        session: AuthSession,
        provider_name: str,
        code: str | None,
        state: str | None,
        *,
        iss: str | None = None,
        error: str | None = None,
    ) -> FederatedLogin | IdentityLinked:
        """Complete the login from the callback's query (``code``, ``state``, and the RFC 9207
        ``iss`` / the ``error`` parameters when present). The callback of a link ceremony
        (:meth:`begin_link`) links the identity to the signed-in user instead, and returns
        :class:`~flask_authflow.federation._linking.IdentityLinked`.

        :raises OAuthError: the variant names the failed step (the session does not
            transition; the ceremony is cleared either way).
        """
        return _finish.finish(self, handle, session, provider_name, code, state, iss=iss, error=error)

    def begin_native(self, session: AuthSession, provider_name: str, *, tenant: str | None = None) -> str:
        """Start a sign-in whose ID token (or authorization code) an app's native SDK
        obtains from the provider: the nonce the app hands to the SDK, kept in ``session``
        (apart from a redirect login's ceremony) for :meth:`finish_native`.

        :raises UnknownProvider, Discovery, ProviderUnreachable: the provider cannot be used
            (a plain OAuth 2.0 provider has no ID token: unknown here).
        """
        return _native.begin_native(self, session, provider_name, tenant=tenant)

    def finish_native(
        self,
        handle: LoginRecorder,
        session: AuthSession,
        provider_name: str,
        *,
        id_token: str | None = None,
        code: str | None = None,
        code_verifier: str | None = None,
    ) -> FederatedLogin:
        """Complete a native sign-in begun by :meth:`begin_native` with what the app's SDK
        obtained: the provider's ``id_token`` (its claims only: without an access token no
        userinfo is read), or an authorization ``code`` and its PKCE ``code_verifier``
        (exchanged as the callback exchanges its code). The ID token is
        checked exactly as the callback's (issuer, audience, the nonce of
        :meth:`begin_native`, signature through the JWKS cache), then mapped and linked by
        the same rules. Single use: the ceremony is cleared whatever happens.

        :raises OAuthError: the variant names the failed step.
        """
        return _native.finish_native(
            self, handle, session, provider_name, id_token=id_token, code=code, code_verifier=code_verifier
        )

    def begin_link(
        self,
        session: AuthSession,
        provider_name: str,
        *,
        fresh_within: timedelta,
        return_to: str | None = None,
    ) -> str:
        """Start linking ``provider_name`` to the signed-in user: the authorize URL. The
        callback links the provider identity to this user instead of logging in.

        :raises StepUpNeeded: the last authentication is older than ``fresh_within``.
        :raises UnknownProvider, Discovery, ProviderUnreachable: the provider cannot be used.
        """
        return _linking.begin_link(
            self, session, provider_name, fresh_within=fresh_within, return_to=return_to
        )

    def linked_providers(self, tenant: str, user_id: str) -> dict[str, list[IdentityLink]]:
        """The user's links by the name of the provider they came from (providers that
        cannot be reached now are left out)."""
        return _linking.linked_providers(self, tenant, user_id)

    def unlink(
        self, handle: LoginRecorder, session: AuthSession, provider_name: str, *, fresh_within: timedelta
    ) -> int:
        """Unlink every identity of ``provider_name`` from the signed-in user; returns how many.

        :raises StepUpNeeded: the last authentication is older than ``fresh_within``.

        Refuses with ``NotLinked`` when the provider is not linked to the user, and with
        ``LastSignInMethod`` when it is their last way to sign in (no password, no
        passkey, no other linked provider).
        """
        return _linking.unlink(self, handle, session, provider_name, fresh_within=fresh_within)

    def backchannel_logout(
        self,
        handle: LoginRecorder,
        session: AuthSession,
        provider_name: str,
        token: Any,
        *,
        tenant: str | None = None,
    ) -> int:
        """Verify a back-channel logout token and revoke what it names; returns how many
        sessions ended.

        Revokes the sessions of the provider session (``issuer``, ``sid``) and, for ``sub``,
        the sessions of the local user linked to (``issuer``, ``sub``) that came from this
        issuer; ``sub`` is never taken for a local id. A replayed ``jti`` is refused.

        :raises LogoutTokenInvalid: naming the failed check (``jwt_id`` for a replay).
        """
        return _logout.backchannel_logout(self, handle, session, provider_name, token, tenant=tenant)

    def end_session_url(
        self, federation: Mapping[str, str], state: str, *, default_return: str | None = None
    ) -> str | None:
        """Where RP-initiated logout sends the browser, for a session established by
        ``federation`` (``SessionRecord.federation``), or ``None`` when the provider has no
        end-session endpoint or the session is not federated.

        ``default_return`` (the app's own logout-return URL for this provider) is the
        ``post_logout_redirect_uri`` when the provider's configuration names none."""
        return _logout.end_session_url(self, federation, state, default_return=default_return)


def _joined_session(join: SessionJoin, session: AuthSession, unit: UnitOfWork) -> Callable[[], None]:
    """Write the signed-in session in ``unit``; what to run once it committed.

    :raises CsrfMismatch: the session was ended by another request meanwhile."""
    written = join(session, unit)
    if written is None:
        raise CsrfMismatch("this login's session ended in another request")
    return written
