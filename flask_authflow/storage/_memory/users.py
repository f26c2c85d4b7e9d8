"""Users in memory: accounts (tenant, identifier), created, disabled, deleted and found.

Passwords arrive hashed (``create_user(..., password_hash=...)``: hashing is
``login/``'s; tests use :func:`flask_authflow.testing.add_user`); deleting a user
removes what hangs off it in the other aggregates (audit rows stay).
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import replace
from datetime import datetime

from flask_authflow._clock import Clock, utc
from flask_authflow._core.identifiers import check_tenant, normalise_email, normalise_identifier
from flask_authflow._core.ports import FactorConfig, UserRecord
from flask_authflow._outcomes import FactorKind
from flask_authflow.errors import UserExists, UserNotFound
from flask_authflow.storage._memory.api_tokens import MemoryApiTokens
from flask_authflow.storage._memory.factors import MemoryFactors

__all__ = ["MemoryUsers"]


class MemoryUsers(MemoryFactors, MemoryApiTokens):
    """The users of :class:`~flask_authflow.storage._memory.InMemoryBackend`. It builds on the factors (a
    password is a factor; they build on the attempts and account tokens) and the API tokens,
    whose private steps :meth:`delete_user` calls; the other aggregates' rows of a deleted
    user it drops from the shared state directly, as the SQL adapter deletes their rows."""

    def adopt_clock(self, clock: Clock) -> None:
        """Use the app's clock unless one was given at construction (``AuthFlow.init_app``
        calls it, so a backend built at import time follows the app, and a test's
        ``mock_clock``)."""
        if not self._clock_given:
            self.clock = clock

    def create_user(
        self,
        tenant: str,
        identifier: str,
        *,
        password_hash: str | None = None,
        email: str | None = None,
        email_verified_at: datetime | None = None,
    ) -> UserRecord:
        tenant = check_tenant(tenant)
        identifier = normalise_identifier(identifier)
        address = normalise_email(email) if email is not None else None
        now = self.clock.now()
        with self._lock:
            if (tenant, identifier) in self._users or self._email_owner(tenant, address) is not None:
                raise UserExists()
            user = UserRecord(uuid.uuid4().hex, tenant, identifier, now, False, address, email_verified_at)
            self._put(self._users, (tenant, identifier), user)
            self._put(self._users_by_id, user.user_id, user)
            self._put(self._factors, user.user_id, {})
            if password_hash is not None:
                self._store_factor(
                    FactorConfig(
                        user.user_id,
                        FactorKind.PASSWORD,
                        utc(now),
                        password_hash,
                        factor_id=secrets.token_urlsafe(16),
                    )
                )
            return user

    def _email_owner(self, tenant: str, address: str | None) -> UserRecord | None:
        """The user of ``tenant`` with this (normalised) address (caller holds the lock)."""
        if address is None:
            return None
        return next((u for u in self._users.values() if u.tenant == tenant and u.email == address), None)

    def find_user_by_email(self, tenant: str, email: str) -> UserRecord | None:
        address = normalise_email(email)
        with self._lock:
            return self._email_owner(tenant, address)

    def set_email(
        self, tenant: str, user_id: str, email: str | None, *, verified_at: datetime | None
    ) -> UserRecord:
        address = normalise_email(email) if email is not None else None
        with self._lock:
            user = self._users_by_id.get(user_id)
            if user is None or user.tenant != tenant:
                raise UserNotFound()
            owner = self._email_owner(tenant, address)
            if owner is not None and owner.user_id != user_id:
                raise UserExists()
            updated = replace(user, email=address, email_verified_at=verified_at)
            self._put(self._users, (tenant, user.identifier), updated)
            self._put(self._users_by_id, user_id, updated)
            return updated

    def set_identifier(self, tenant: str, user_id: str, identifier: str) -> UserRecord:
        with self._lock:
            user = self._users_by_id.get(user_id)
            if user is None or user.tenant != tenant:
                raise UserNotFound()
            owner = self._users.get((tenant, identifier))
            if owner is not None and owner.user_id != user_id:
                raise UserExists()
            updated = replace(user, identifier=identifier)
            self._remove(self._users, (tenant, user.identifier))
            self._put(self._users, (tenant, identifier), updated)
            self._put(self._users_by_id, user_id, updated)
            return updated

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None:
        with self._lock:
            user = self._users.get((tenant, normalise_identifier(identifier)))
            if user is None:
                raise UserNotFound()
            updated = replace(user, disabled=disabled)
            self._put(self._users, (tenant, user.identifier), updated)
            self._put(self._users_by_id, user.user_id, updated)

    def delete_user(self, tenant: str, identifier: str) -> UserRecord:
        """Remove the user, its factors, its lockout counters and reservations (audit rows stay)."""
        with self._lock:
            user: UserRecord | None = self._remove(self._users, (tenant, normalise_identifier(identifier)))
            if user is None:
                raise UserNotFound()
            self._remove(self._users_by_id, user.user_id)
            for config in list(self._factors.get(user.user_id, {}).values()):
                self._drop_factor(config)
            self._remove(self._factors, user.user_id)
            self._forget_attempts(tenant, user.identifier)
            for link_key in [k for k, link in self._links.items() if link.user_id == user.user_id]:
                self._remove(self._links, link_key)
            self._remove(self._roles.held, (tenant, user.user_id))
            self.void_account_tokens(tenant, user.user_id, None, self.clock.now())
            self._drop_api_tokens(tenant, user.user_id)
            for token_key in [k for k in self._provider_tokens if k[:2] == (tenant, user.user_id)]:
                self._remove(self._provider_tokens, token_key)
                self._remove(self._token_claims, token_key)
            for device_key in [k for k in self._devices if k[:2] == (tenant, user.user_id)]:
                self._remove(self._devices, device_key)
            return user

    def find_user(self, tenant: str, identifier: str) -> UserRecord | None:
        with self._lock:
            return self._users.get((tenant, identifier))

    def get_user(self, tenant: str, user_id: str) -> UserRecord | None:
        with self._lock:
            user = self._users_by_id.get(user_id)
        return user if user is not None and user.tenant == tenant else None

    def list_users(self, tenant: str | None = None) -> list[UserRecord]:
        with self._lock:
            users = list(self._users.values())
        return sorted(
            (u for u in users if tenant is None or u.tenant == tenant), key=lambda u: (u.tenant, u.identifier)
        )
