"""Factors in SQL: passwords, enrolled factors and their records (counters, secrets)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Row,
    Text,
    and_,
    bindparam,
    case,
    delete,
    exists,
    false,
    func,
    insert,
    literal,
    select,
    true,
    update,
)
from sqlalchemy.exc import IntegrityError

from flask_authflow._clock import utc
from flask_authflow._core.factor_data import check_factor_config, dump_factor_data, load_factor_data
from flask_authflow._core.ports import FactorConfig, KnownSecret, LoginFacts
from flask_authflow._outcomes import FactorKind
from flask_authflow.errors import StoreUnavailable, UserNotFound
from flask_authflow.storage._sql.schema import (
    UTCDateTime,
    account_tokens_table,
    aware,
    factors_table,
    lockouts_table,
    users_table,
)
from flask_authflow.storage._sql.uow import SqlConnections
from flask_authflow.storage._sql.users import GET_USER, user_record

__all__ = ["SqlFactors"]


def _factor(row: Row[Any]) -> FactorConfig | None:
    """The factor of a row; ``None`` for a kind this process has not registered (it cannot
    be verified, so it is as good as absent)."""
    try:
        kind = FactorKind(row.kind)
    except ValueError:
        return None
    return FactorConfig(
        user_id=row.user_id,
        kind=kind,
        created_at=utc(row.created_at),
        secret=row.secret,
        factor_id=row.factor_id,
        counter=int(row.counter),
        data=load_factor_data(row.data),
        lookup=row.lookup,
        confirmed=bool(row.confirmed),
        last_used_at=aware(row.last_used_at),
    )


def _factors(rows: Sequence[Row[Any]]) -> list[FactorConfig]:
    return [config for config in map(_factor, rows) if config is not None]


def _factor_key(tenant: str, user_id: str, factor_id: str = "") -> dict[str, Any]:
    """The parameters naming one factor in the statements that write factors (named
    ``key_*``: SQLAlchemy keeps column names for the SET and VALUES clauses)."""
    return {"key_tenant": tenant, "key_user_id": user_id, "key_factor_id": factor_id}


def _kinds(names: Sequence[str]) -> list[FactorKind]:
    """The distinct known kinds among ``names``, in their order, the password first."""
    kinds: list[FactorKind] = []
    for name in names:
        try:
            kind = FactorKind(name)
        except ValueError:
            continue
        if kind not in kinds:
            kinds.append(kind)
    if FactorKind.PASSWORD in kinds:
        kinds.remove(FactorKind.PASSWORD)
        kinds.insert(0, FactorKind.PASSWORD)
    return kinds


# A user's factors (only when the user is in the tenant), oldest first; confirmed ones
# only unless pending ones are asked for.
_ALL_USER_FACTORS = (
    select(factors_table)
    .join(users_table, users_table.c.user_id == factors_table.c.user_id)
    .where(users_table.c.tenant == bindparam("tenant"), factors_table.c.user_id == bindparam("user_id"))
    .order_by(factors_table.c.created_at, factors_table.c.id)
)
_CONFIRMED = factors_table.c.confirmed == true()
_USER_FACTORS = _ALL_USER_FACTORS.where(_CONFIRMED)
_FACTOR_KINDS = _USER_FACTORS.with_only_columns(factors_table.c.kind)
_PASSWORD_HASH = _USER_FACTORS.where(factors_table.c.kind == FactorKind.PASSWORD.value)
_OF_KIND = factors_table.c.kind == bindparam("kind")
#: list_user_factors: (filtered by kind, pending included) -> statement.
_LIST_FACTORS = {
    (False, False): _USER_FACTORS,
    (True, False): _USER_FACTORS.where(_OF_KIND),
    (False, True): _ALL_USER_FACTORS,
    (True, True): _ALL_USER_FACTORS.where(_OF_KIND),
}
_GET_FACTOR = _ALL_USER_FACTORS.where(factors_table.c.factor_id == bindparam("factor_id"))
_FIND_FACTOR_BY_LOOKUP = (
    select(factors_table)
    .join(users_table, users_table.c.user_id == factors_table.c.user_id)
    .where(
        users_table.c.tenant == bindparam("tenant"),
        factors_table.c.kind == bindparam("kind"),
        factors_table.c.lookup == bindparam("lookup"),
        _CONFIRMED,
    )
)
_FACTOR_COLUMNS = (
    "factor_id",
    "kind",
    "secret",
    "created_at",
    "counter",
    "data",
    "lookup",
    "confirmed",
    "last_used_at",
)
# INSERT ... SELECT from the user's row: nothing is inserted (no row returned) when the
# user is not in the tenant, in the same statement as the insert.
_ADD_FACTOR = (
    insert(factors_table)
    .from_select(
        ["user_id", *_FACTOR_COLUMNS],
        select(
            users_table.c.user_id,
            *(bindparam(f"new_{name}", type_=factors_table.c[name].type) for name in _FACTOR_COLUMNS),
        ).where(
            users_table.c.tenant == bindparam("key_tenant"), users_table.c.user_id == bindparam("key_user_id")
        ),
    )
    .returning(factors_table.c.id)
)
# The user's row, locked until the transaction ends (PostgreSQL; on SQLite the first
# write takes the database lock): factor changes that replace others run one at a time.
_LOCK_USER = (
    select(users_table.c.user_id)
    .where(users_table.c.tenant == bindparam("key_tenant"), users_table.c.user_id == bindparam("key_user_id"))
    .with_for_update()
)
# One factor of a user who is in the tenant (correlated: still one statement).
_IN_TENANT = (
    exists()
    .where(users_table.c.user_id == factors_table.c.user_id, users_table.c.tenant == bindparam("key_tenant"))
    .correlate(factors_table)
)
_OF_FACTOR = and_(
    factors_table.c.factor_id == bindparam("key_factor_id"),
    factors_table.c.user_id == bindparam("key_user_id"),
    _IN_TENANT,
)
_USED_AT = bindparam("used_at", type_=UTCDateTime())
_ADVANCE_COUNTER = (
    update(factors_table)
    .where(_OF_FACTOR, _CONFIRMED, factors_table.c.counter < bindparam("new_counter", type_=BigInteger()))
    .values(counter=bindparam("new_counter", type_=BigInteger()), last_used_at=_USED_AT)
)
_EXPECTED_COUNTER = bindparam("expected_counter", type_=BigInteger())
_SWAP_SECRET = (
    update(factors_table)
    .where(_OF_FACTOR, _CONFIRMED, factors_table.c.counter == _EXPECTED_COUNTER)
    .values(
        secret=bindparam("new_secret", type_=Text()), counter=_EXPECTED_COUNTER + 1, last_used_at=_USED_AT
    )
)
_CONFIRM_FACTOR = (
    update(factors_table)
    .where(
        factors_table.c.factor_id == bindparam("key_factor_id"),
        factors_table.c.user_id == bindparam("key_user_id"),
        factors_table.c.confirmed == false(),
    )
    .values(confirmed=True)
    .returning(factors_table.c.kind)
)
_DELETE_OTHERS_OF_KIND = delete(factors_table).where(
    factors_table.c.user_id == bindparam("key_user_id"),
    factors_table.c.kind == bindparam("key_kind"),
    factors_table.c.factor_id != bindparam("key_factor_id"),
)
_DELETE_FACTOR = delete(factors_table).where(_OF_FACTOR, factors_table.c.kind != FactorKind.PASSWORD.value)
# The user's pending enrollments of a kind: a new one replaces them.
_DELETE_PENDING_OF_KIND = delete(factors_table).where(
    factors_table.c.user_id == bindparam("key_user_id"),
    factors_table.c.kind == bindparam("new_kind"),
    factors_table.c.confirmed == false(),
)
_CONFIRMED_OF_KIND = and_(
    factors_table.c.user_id == bindparam("key_user_id"),
    factors_table.c.kind == bindparam("key_kind"),
    _CONFIRMED,
)
_FIRST_ENROLLED_OF_KIND = select(func.min(factors_table.c.created_at)).where(_CONFIRMED_OF_KIND)
_DELETE_CONFIRMED_OF_KIND = delete(factors_table).where(_CONFIRMED_OF_KIND)
_INSERT_FACTOR = insert(factors_table)
_SET_PASSWORD = (
    update(factors_table)
    .where(
        factors_table.c.user_id == bindparam("key_user_id"),
        factors_table.c.kind == FactorKind.PASSWORD.value,
    )
    .values(secret=bindparam("password_hash", type_=Text()), confirmed=True)
)

# begin_login's three reads in one statement (find_user, required_factors, locked_until):
# one row per confirmed factor of the user, oldest first, each carrying the user's columns
# and the identifier's active lock; a single row of NULLs but the lock when there is no
# such user (or no factor). The anchor row makes the lock come back without a user.
_ANCHOR = select(literal(1).label("anchor")).subquery("anchor")
#: The latest active lock on the identifier or its (identifier, host / network) pairs.
_FACTS_LOCK = select(func.max(lockouts_table.c.locked_until)).where(
    lockouts_table.c.tenant == bindparam("tenant"),
    lockouts_table.c.subject.in_(bindparam("subjects", expanding=True)),
    lockouts_table.c.locked_until > bindparam("now", type_=UTCDateTime()),
)
#: The payload of the user's newest live account token of a kind (a required enrollment).
_FACTS_TOKEN = (
    select(account_tokens_table.c.payload)
    .where(
        account_tokens_table.c.tenant == bindparam("tenant"),
        account_tokens_table.c.user_id == users_table.c.user_id,
        account_tokens_table.c.kind == bindparam("token_kind"),
        account_tokens_table.c.used_at.is_(None),
        account_tokens_table.c.expires_at > bindparam("now", type_=UTCDateTime()),
    )
    .order_by(account_tokens_table.c.created_at.desc())
    .limit(1)
)
_LOGIN_FACTS: Any = (  # Any: its rows go to _user, typed for whole-table rows
    select(
        _FACTS_LOCK.scalar_subquery().label("locked_until"),
        _FACTS_TOKEN.scalar_subquery().label("token_payload"),
        *users_table.c,
        factors_table.c.kind,
        # The password's hash (its row only): the password step needs no read of its own.
        case((factors_table.c.kind == FactorKind.PASSWORD.value, factors_table.c.secret)).label(
            "password_hash"
        ),
    )
    .select_from(
        _ANCHOR.outerjoin(
            users_table,
            and_(
                users_table.c.tenant == bindparam("tenant"),
                users_table.c.identifier == bindparam("identifier"),
            ),
        ).outerjoin(factors_table, and_(factors_table.c.user_id == users_table.c.user_id, _CONFIRMED))
    )
    .order_by(factors_table.c.created_at, factors_table.c.id)
)


class SqlFactors(SqlConnections):
    """The factors of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`."""

    def get_password_hash(self, tenant: str, user_id: str) -> str | None:
        params = {"tenant": tenant, "user_id": user_id}
        row = self._fetch(lambda conn: conn.execute(_PASSWORD_HASH, params).first())
        return str(row.secret) if row is not None else None

    def set_password_hash(self, tenant: str, user_id: str, password_hash: str) -> None:
        """Set or replace the password (the factor keeps its id and enrollment time)."""
        now = utc(self.clock.now())
        params = {
            "tenant": tenant,
            "user_id": user_id,
            "key_user_id": user_id,
            "password_hash": password_hash,
        }
        for _ in range(2):  # a concurrent first insert wins the unique index; then we update
            try:
                with self._tx() as conn:
                    if conn.execute(GET_USER, params).first() is None:
                        raise UserNotFound()
                    if conn.execute(_SET_PASSWORD, params).rowcount == 0:
                        conn.execute(
                            _INSERT_FACTOR,
                            {
                                "user_id": user_id,
                                "kind": FactorKind.PASSWORD.value,
                                "secret": password_hash,
                                "created_at": now,
                                "factor_id": secrets.token_urlsafe(16),
                            },
                        )
                return
            except IntegrityError:
                continue
        raise StoreUnavailable("could not store the password hash")

    def enroll_factor(self, tenant: str, user_id: str, kind: FactorKind, secret: str) -> None:
        """Enroll a confirmed factor of ``kind`` with ``secret``, replacing the user's
        confirmed factors of that kind in one transaction (it keeps the enrollment time of
        the first of them); pending enrollments are left alone. The password goes to
        :meth:`set_password_hash`. :class:`UserNotFound` if the user is not in ``tenant``."""
        kind = FactorKind(kind)
        if kind is FactorKind.PASSWORD:
            self.set_password_hash(tenant, user_id, secret)
            return
        params = {**_factor_key(tenant, user_id), "key_kind": kind.value}
        with self._account_tx() as conn:
            # The user's row lock makes parallel re-enrollments take turns (each leaves one).
            if conn.execute(_LOCK_USER, params).first() is None:
                raise UserNotFound()
            first = aware(conn.execute(_FIRST_ENROLLED_OF_KIND, params).scalar())
            conn.execute(_DELETE_CONFIRMED_OF_KIND, params)
            conn.execute(
                _INSERT_FACTOR,
                {
                    "user_id": user_id,
                    "kind": kind.value,
                    "secret": secret,
                    "created_at": first or utc(self.clock.now()),
                    "factor_id": secrets.token_urlsafe(16),
                },
            )

    def list_factors(self, tenant: str, user_id: str) -> list[FactorConfig]:
        params = {"tenant": tenant, "user_id": user_id}
        return _factors(self._fetch(lambda conn: conn.execute(_USER_FACTORS, params).all()))

    def required_factors(self, tenant: str, user_id: str) -> list[FactorKind]:
        params = {"tenant": tenant, "user_id": user_id}
        return _kinds(self._fetch(lambda conn: conn.execute(_FACTOR_KINDS, params).scalars().all()))

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
        identifier or its ``pairs`` in one statement (see
        :meth:`~flask_authflow._core.ports.LoginStore.login_facts`): one round trip for
        ``begin_login`` instead of four, whether the user exists or not."""
        subjects = [identifier, *pairs]
        params = {
            "tenant": tenant,
            "identifier": identifier,
            "subjects": subjects,
            "now": utc(now),
            "token_kind": token_kind,
        }
        rows = self._fetch(lambda conn: conn.execute(_LOGIN_FACTS, params).all())
        first = rows[0]  # the anchor row makes one row at least
        user = user_record(first) if first.user_id is not None else None
        kinds = _kinds([row.kind for row in rows if row.kind is not None])
        payload = json.loads(first.token_payload) if first.token_payload is not None else None
        hashes = [str(row.password_hash) for row in rows if row.password_hash is not None]
        password = KnownSecret(hashes[0] if user is not None and hashes else None)
        return LoginFacts(
            user, kinds if user is not None else [], aware(first.locked_until), payload, password
        )

    # --- factor records (FactorRecordStore) --------------------------------------------------

    def add_factor(self, tenant: str, config: FactorConfig) -> None:
        data = check_factor_config(config)
        kind = FactorKind(config.kind)
        params: dict[str, Any] = {
            **_factor_key(tenant, config.user_id),
            "new_factor_id": config.factor_id,
            "new_kind": kind.value,
            "new_secret": config.secret,
            "new_created_at": utc(config.created_at),
            "new_counter": config.counter,
            "new_data": dump_factor_data(data),
            "new_lookup": config.lookup,
            "new_confirmed": config.confirmed,
            "new_last_used_at": aware(config.last_used_at),
        }
        try:
            with self._account_tx() as conn:
                if not config.confirmed:
                    # Under the user's row lock (the database lock on SQLite): of parallel
                    # starts, each replaces the one before it, so one pending factor is left.
                    if conn.execute(_LOCK_USER, params).first() is None:
                        raise UserNotFound()
                    conn.execute(_DELETE_PENDING_OF_KIND, params)
                inserted = conn.execute(_ADD_FACTOR, params).first() is not None
        except IntegrityError as exc:
            raise ValueError(
                "this factor id is already used, or the lookup (or the user's password) is enrolled already"
            ) from exc
        if not inserted:
            raise UserNotFound()

    def get_factor(self, tenant: str, user_id: str, factor_id: str) -> FactorConfig | None:
        params = {"tenant": tenant, "user_id": user_id, "factor_id": factor_id}
        row = self._fetch(lambda conn: conn.execute(_GET_FACTOR, params).first())
        return None if row is None else _factor(row)

    def list_user_factors(
        self, tenant: str, user_id: str, *, kind: FactorKind | None = None, include_pending: bool = False
    ) -> list[FactorConfig]:
        statement = _LIST_FACTORS[(kind is not None, include_pending)]
        params = {"tenant": tenant, "user_id": user_id, "kind": None if kind is None else str(kind)}
        return _factors(self._fetch(lambda conn: conn.execute(statement, params).all()))

    def find_factor_by_lookup(self, tenant: str, kind: FactorKind, lookup: str) -> FactorConfig | None:
        params = {"tenant": tenant, "kind": str(kind), "lookup": lookup}
        row = self._fetch(lambda conn: conn.execute(_FIND_FACTOR_BY_LOOKUP, params).first())
        return None if row is None else _factor(row)

    def confirm_factor(self, tenant: str, user_id: str, factor_id: str, *, replace_kind: bool) -> bool:
        """One transaction under the user's row lock (PostgreSQL; the database lock on
        SQLite): of two parallel confirmations that replace the kind, the second finds its
        pending factor deleted by the first, so exactly one factor of the kind is left."""
        params = _factor_key(tenant, user_id, factor_id)
        with self._tx() as conn:
            if conn.execute(_LOCK_USER, params).first() is None:
                return False
            kind = conn.execute(_CONFIRM_FACTOR, params).scalar()
            if kind is None:
                return False
            if replace_kind:
                conn.execute(_DELETE_OTHERS_OF_KIND, {**params, "key_kind": kind})
        return True

    def lock_user(self, tenant: str, user_id: str) -> bool:
        """``SELECT ... FOR UPDATE`` of the user's row in the open unit (SQLite's unit holds
        the database lock already, and ignores the clause)."""
        with self._tx() as conn:
            return conn.execute(_LOCK_USER, _factor_key(tenant, user_id)).first() is not None

    def delete_factor(self, tenant: str, user_id: str, factor_id: str) -> bool:
        if self._write_one(_DELETE_FACTOR, _factor_key(tenant, user_id, factor_id)) == 1:
            return True
        params = {"tenant": tenant, "user_id": user_id, "factor_id": factor_id}
        row = self._fetch(lambda conn: conn.execute(_GET_FACTOR, params).first())
        if row is not None and row.kind == FactorKind.PASSWORD.value:
            raise ValueError("the password is not deleted as a factor: set another one instead")
        return False

    def advance_factor_counter(
        self, tenant: str, user_id: str, factor_id: str, new_counter: int, *, now: datetime
    ) -> bool:
        params = {
            **_factor_key(tenant, user_id, factor_id),
            "new_counter": new_counter,
            "used_at": utc(now),
        }
        return self._write_one(_ADVANCE_COUNTER, params) == 1

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
        params = {
            **_factor_key(tenant, user_id, factor_id),
            "expected_counter": expected_counter,
            "new_secret": secret,
            "used_at": utc(now),
        }
        return self._write_one(_SWAP_SECRET, params) == 1
