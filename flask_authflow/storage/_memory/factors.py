"""Factors in memory, and the login step's one read of its facts.

Every factor of every user, with the indexes the SQL store has as constraints (factor id,
(kind, lookup), one password per user). The lock is held for each whole step, so each change
is atomic across threads; reads hand out copies of the mutable ``data``.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from flask_authflow._clock import utc
from flask_authflow._core.factor_data import check_factor_config
from flask_authflow._core.ports import FactorConfig, KnownSecret, LoginFacts
from flask_authflow._outcomes import FactorKind
from flask_authflow.errors import UserNotFound
from flask_authflow.storage._memory.account_tokens import MemoryAccountTokens
from flask_authflow.storage._memory.attempts import MemoryAttempts

__all__ = ["MemoryFactors"]


class MemoryFactors(MemoryAttempts, MemoryAccountTokens):
    """The factors of :class:`~flask_authflow.storage._memory.InMemoryBackend`; :meth:`login_facts`
    reads the attempt locks and the account tokens too, under the same hold of the lock."""

    def _owned(self, tenant: str, user_id: str) -> dict[str, FactorConfig] | None:
        """The factors of ``user_id`` if the user belongs to ``tenant`` (caller holds the lock)."""
        user = self._users_by_id.get(user_id)
        if user is None or user.tenant != tenant:
            return None
        factors = self._factors.get(user_id)
        if factors is None:
            factors = {}
            self._put(self._factors, user_id, factors)
        return factors

    def _ordered(self, configs: list[FactorConfig]) -> list[FactorConfig]:
        """Oldest first; factors enrolled at the same instant in enrollment order (caller holds the lock)."""
        ordered = sorted(configs, key=lambda c: (c.created_at, self._factor_seq[c.factor_id]))
        return [replace(c, data=copy.deepcopy(c.data)) for c in ordered]

    def _store_factor(self, config: FactorConfig) -> None:
        """Insert ``config`` in every index (caller holds the lock and made the checks)."""
        factors = self._factors.get(config.user_id)
        if factors is None:
            factors = {}
            self._put(self._factors, config.user_id, factors)
        self._put(factors, config.factor_id, config)
        self._put(self._factor_seq, config.factor_id, next(self._sequence))
        self._put(self._factor_owner, config.factor_id, config.user_id)
        if config.lookup is not None:
            self._put(self._lookups, (config.kind.value, config.lookup), config.factor_id)

    def _drop_factor(self, config: FactorConfig) -> None:
        """Remove ``config`` from every index (caller holds the lock)."""
        self._remove(self._factors.get(config.user_id, {}), config.factor_id)
        self._remove(self._factor_seq, config.factor_id)
        self._remove(self._factor_owner, config.factor_id)
        if config.lookup is not None:
            self._remove(self._lookups, (config.kind.value, config.lookup))

    def _password(self, factors: dict[str, FactorConfig]) -> FactorConfig | None:
        return next((c for c in factors.values() if c.kind is FactorKind.PASSWORD), None)

    def get_password_hash(self, tenant: str, user_id: str) -> str | None:
        with self._lock:
            config = self._password(self._owned(tenant, user_id) or {})
            return config.secret if config is not None and config.confirmed else None

    def set_password_hash(self, tenant: str, user_id: str, password_hash: str) -> None:
        """Set or replace the password (the factor keeps its id and enrollment time)."""
        now = utc(self.clock.now())
        with self._lock:
            factors = self._owned(tenant, user_id)
            if factors is None:
                raise UserNotFound()
            existing = self._password(factors)
            if existing is not None:
                self._put(
                    factors, existing.factor_id, replace(existing, secret=password_hash, confirmed=True)
                )
                return
            self._store_factor(
                FactorConfig(
                    user_id, FactorKind.PASSWORD, now, password_hash, factor_id=secrets.token_urlsafe(16)
                )
            )

    def enroll_factor(self, tenant: str, user_id: str, kind: FactorKind, secret: str) -> None:
        """Enroll a confirmed factor of ``kind`` with ``secret``, replacing the user's
        confirmed factors of that kind (it keeps the enrollment time of the first of them);
        pending enrollments are left alone. The password goes to :meth:`set_password_hash`."""
        kind = FactorKind(kind)
        if kind is FactorKind.PASSWORD:
            self.set_password_hash(tenant, user_id, secret)
            return
        now = utc(self.clock.now())
        with self._lock:
            factors = self._owned(tenant, user_id)
            if factors is None:
                raise UserNotFound()
            replaced = [c for c in factors.values() if c.kind is kind and c.confirmed]
            created = min((c.created_at for c in replaced), default=now)
            for config in replaced:
                self._drop_factor(config)
            self._store_factor(
                FactorConfig(user_id, kind, created, secret, factor_id=secrets.token_urlsafe(16))
            )

    def required_factors(self, tenant: str, user_id: str) -> list[FactorKind]:
        kinds: list[FactorKind] = []
        for config in self.list_factors(tenant, user_id):
            if config.kind not in kinds:
                kinds.append(config.kind)
        if FactorKind.PASSWORD in kinds:
            kinds.remove(FactorKind.PASSWORD)
            kinds.insert(0, FactorKind.PASSWORD)
        return kinds

    def list_factors(self, tenant: str, user_id: str) -> list[FactorConfig]:
        return self.list_user_factors(tenant, user_id)

    def login_facts(
        self,
        tenant: str,
        identifier: str,
        now: datetime,
        *,
        pairs: Sequence[str] = (),
        token_kind: str | None = None,
    ) -> LoginFacts:
        """``find_user``, ``required_factors`` of that user and the latest lock on the
        identifier or its ``pairs``, read under one hold of the lock."""
        with self._lock:
            self._check_available()
            user = self._users.get((tenant, identifier))
            kinds = self.required_factors(tenant, user.user_id) if user is not None else []
            ends = [self._active_lock(tenant, subject, now) for subject in (identifier, *pairs)]
            locked = [end for end in ends if end is not None]
            token = None
            if user is not None and token_kind is not None:
                token = self.live_account_token(tenant, user.user_id, token_kind, now)
            payload = token.payload if token is not None else None
            password = self.get_password_hash(tenant, user.user_id) if user is not None else None
            return LoginFacts(user, kinds, max(locked) if locked else None, payload, KnownSecret(password))

    def add_factor(self, tenant: str, config: FactorConfig) -> None:
        data = check_factor_config(config)
        kind = FactorKind(config.kind)
        with self._lock:
            factors = self._owned(tenant, config.user_id)
            if factors is None:
                raise UserNotFound()
            if config.factor_id in self._factor_owner:
                raise ValueError("this factor id is already used")
            if config.lookup is not None and (kind.value, config.lookup) in self._lookups:
                raise ValueError(f"a {kind.value} factor with this lookup is already enrolled")
            if kind is FactorKind.PASSWORD and self._password(factors) is not None:
                raise ValueError("the user has a password already")
            if not config.confirmed:  # one pending enrollment per kind: the new one replaces it
                for stale in [c for c in factors.values() if c.kind is kind and not c.confirmed]:
                    self._drop_factor(stale)
            self._store_factor(
                replace(
                    config,
                    kind=kind,
                    data=data,
                    created_at=utc(config.created_at),
                    last_used_at=None if config.last_used_at is None else utc(config.last_used_at),
                )
            )

    def get_factor(self, tenant: str, user_id: str, factor_id: str) -> FactorConfig | None:
        with self._lock:
            config = (self._owned(tenant, user_id) or {}).get(factor_id)
            return None if config is None else self._ordered([config])[0]

    def list_user_factors(
        self, tenant: str, user_id: str, *, kind: FactorKind | None = None, include_pending: bool = False
    ) -> list[FactorConfig]:
        with self._lock:
            return self._ordered(
                [
                    c
                    for c in (self._owned(tenant, user_id) or {}).values()
                    if (include_pending or c.confirmed) and (kind is None or c.kind == kind)
                ]
            )

    def find_factor_by_lookup(self, tenant: str, kind: FactorKind, lookup: str) -> FactorConfig | None:
        with self._lock:
            factor_id = self._lookups.get((str(kind), lookup))
            owner = self._factor_owner.get(factor_id) if factor_id is not None else None
            if factor_id is None or owner is None:
                return None
            config = (self._owned(tenant, owner) or {}).get(factor_id)
            return None if config is None or not config.confirmed else self._ordered([config])[0]

    def confirm_factor(self, tenant: str, user_id: str, factor_id: str, *, replace_kind: bool) -> bool:
        with self._lock:
            factors = self._owned(tenant, user_id) or {}
            config = factors.get(factor_id)
            if config is None or config.confirmed:
                return False
            if replace_kind:
                for other in [c for c in factors.values() if c.kind is config.kind and c is not config]:
                    self._drop_factor(other)
            self._put(factors, factor_id, replace(config, confirmed=True))
            return True

    def delete_factor(self, tenant: str, user_id: str, factor_id: str) -> bool:
        with self._lock:
            config = (self._owned(tenant, user_id) or {}).get(factor_id)
            if config is None:
                return False
            if config.kind is FactorKind.PASSWORD:
                raise ValueError("the password is not deleted as a factor: set another one instead")
            self._drop_factor(config)
            return True

    def lock_user(self, tenant: str, user_id: str) -> bool:
        """The unit of work holds the store's lock already: only whether the user exists."""
        with self._lock:
            user = self._users_by_id.get(user_id)
            return user is not None and user.tenant == tenant

    def advance_factor_counter(
        self, tenant: str, user_id: str, factor_id: str, new_counter: int, *, now: datetime
    ) -> bool:
        with self._lock:
            factors = self._owned(tenant, user_id) or {}
            config = factors.get(factor_id)
            if config is None or not config.confirmed or config.counter >= new_counter:
                return False
            self._put(factors, factor_id, replace(config, counter=new_counter, last_used_at=utc(now)))
            return True

    def swap_factor_secret(
        self,
        tenant: str,
        user_id: str,
        factor_id: str,
        *,
        expected_counter: int,
        secret: str,
        now: datetime,
    ) -> bool:
        with self._lock:
            factors = self._owned(tenant, user_id) or {}
            config = factors.get(factor_id)
            if config is None or not config.confirmed or config.counter != expected_counter:
                return False
            self._put(
                factors,
                factor_id,
                replace(config, secret=secret, counter=expected_counter + 1, last_used_at=utc(now)),
            )
            return True
