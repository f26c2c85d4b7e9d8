"""Carry out a plan (:mod:`.plan`): roles first, then each user in one unit of work.

A user's account, hash, disabled state, roles, factors, required enrollment and (for an
unverified address) the pending sign-up verification are written together: a failure at
any write leaves nothing of that user, and a second run finds the user present and leaves
it as it is. With the application's ``user_created`` hook, the hook runs with source
``"import"`` and the source's attributes (``fs_uniquifier``...) as its ``claims``, so the
application can link its existing row instead of creating one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError

from flask_authflow._cli.importing.links import LinkStore, write_links
from flask_authflow._cli.importing.model import (
    EmailFactor,
    ImportedFactor,
    ImportedRole,
    RecoveryCodes,
    TotpFactor,
    WebAuthnCredential,
    WebAuthnUse,
)
from flask_authflow._cli.importing.plan import Refused, UserPlan
from flask_authflow._core.app_users import AppUserHooks
from flask_authflow._core.ports import (
    AccountTokenStore,
    FactorConfig,
    FactorRecordStore,
    IdentityStore,
    RoleStore,
    UnitOfWork,
    UserRecord,
)
from flask_authflow._core.roles import check_description, check_name
from flask_authflow._outcomes import FactorKind
from flask_authflow.errors import AuthFlowError, InvalidInput, RoleExists, UserExists
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login import _required_enrollment as required_enrollment
from flask_authflow.login import _verification as verification
from flask_authflow.mfa._email_otp import imported_address
from flask_authflow.mfa._recovery import imported_code_set
from flask_authflow.mfa._sealing import FactorSealer
from flask_authflow.mfa._totp import imported_key
from flask_authflow.mfa._webauthn_record import imported_credential

__all__ = ["ImportStore", "WriteTarget", "write_roles", "write_user"]


class ImportStore(IdentityStore, FactorRecordStore, RoleStore, AccountTokenStore, LinkStore, Protocol):
    """What an import writes to (both backends are one)."""

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None: ...

    def begin_unit(self) -> UnitOfWork: ...


@dataclass(frozen=True, slots=True)
class WriteTarget:
    """Where a plan is written: the store, the sealer of factor secrets, the time stamped on
    what is written, the application's hooks (``None``: none), and how long the pending
    verification of an unverified address lives."""

    store: ImportStore
    sealer: FactorSealer | None
    now: datetime
    verification_ttl: timedelta
    app_users: AppUserHooks | None = None


def _in_unit(store: ImportStore, write: Callable[[], UserRecord]) -> UserRecord:
    unit = store.begin_unit()
    try:
        user = write()
    except BaseException:
        unit.rollback()
        raise
    unit.commit()
    return user


def write_roles(store: ImportStore, tenants: Iterable[str], roles: Sequence[ImportedRole]) -> list[str]:
    """Create the source's roles with their permissions in each tenant (one unit per tenant;
    roles already there get the missing permissions). Returns the names not carried."""
    refused: list[str] = []
    usable = []
    for role in roles:
        try:
            check_name(role.name)
            check_description(role.description or "")
            for permission in role.permissions:
                check_name(permission, "permission")
        except InvalidInput:
            refused.append(role.name)
            continue
        usable.append(role)
    for tenant in sorted(set(tenants)):
        unit = store.begin_unit()
        try:
            for role in usable:
                _ensure_role(store, tenant, role)
        except BaseException:
            unit.rollback()
            raise
        unit.commit()
    return refused


def _ensure_role(store: ImportStore, tenant: str, role: ImportedRole) -> None:
    try:
        store.create_role(tenant, role.name, role.description or "")
    except RoleExists:
        pass
    for permission in role.permissions:
        store.grant_permission(tenant, role.name, permission)


def write_user(target: WriteTarget, plan: UserPlan, roles: frozenset[str]) -> bool:
    """Write one planned user; ``False`` if the identifier is taken in the tenant already.

    :raises Refused: the address belongs to another user, or the application's hook failed."""
    store, tenant = target.store, plan.tenant
    if store.find_user(tenant, plan.identifier) is not None:
        return False
    if plan.email is not None and store.find_user_by_email(tenant, plan.email) is not None:
        raise Refused("the e-mail address belongs to another user already")

    def make() -> UserRecord:
        return _write(target, plan, roles)

    try:
        if target.app_users is None:
            _in_unit(store, make)
        else:  # with the application's hook, in the same unit: a refusal keeps nothing
            _with_hook(target.app_users, store, make, plan)
    except UserExists:
        if store.find_user(tenant, plan.identifier) is not None:
            return False  # a parallel import made it
        raise Refused("the e-mail address belongs to another user already") from None
    return True


def _with_hook(
    app_users: AppUserHooks, store: ImportStore, make: Callable[[], UserRecord], plan: UserPlan
) -> None:
    """``make()`` and the ``user_created`` hook (the source's attributes as ``claims``) in one
    unit of work; a failure of the application's own code refuses the user, while the library's and the
    database's errors end the import."""
    claims = dict(plan.user.attributes) if plan.user is not None else {}
    try:
        # The unit runs in the application's transaction when the library may own it
        # (nothing of the application's is pending), so the hook's rows and the account
        # commit once; a refusing hook rolls both back.
        with app_users.owned():
            _in_unit(store, lambda: app_users.create(store, make, source="import", claims=claims))
    except (AuthFlowError, SQLAlchemyError, OSError):
        raise
    except Exception as error:  # noqa: BLE001 - the application's hook: reported per user
        raise Refused(f"the application's user_created hook failed ({type(error).__name__})") from None


def _write(target: WriteTarget, plan: UserPlan, roles: frozenset[str]) -> UserRecord:
    """Everything of one user (the caller keeps it in one unit of work)."""
    store, tenant, now = target.store, plan.tenant, target.now
    assert plan.user is not None
    verified_at = now if plan.email is not None and plan.email_verified else None
    user = store.create_user(tenant, plan.identifier, email=plan.email, email_verified_at=verified_at)
    if plan.user.password_hash is not None:  # None: a linked user without a password
        store.set_password_hash(tenant, user.user_id, plan.user.password_hash)
    if plan.user.disabled:
        store.set_disabled(tenant, plan.identifier, True)
    for name in plan.user.roles:
        if name in roles:
            store.add_user_role(tenant, user.user_id, name)
    taken = write_links(store, tenant, user.user_id, plan.links)
    plan.not_carried.extend(f"identity link {issuer} (another account's already)" for issuer in taken)
    for factor in plan.factors:
        store.add_factor(tenant, _config(target, user, plan, factor))
    if plan.required:
        required_enrollment.require(store, tenant, user.user_id, plan.required, now, "import")
    if plan.email is not None and not plan.email_verified:  # the sign-up gate: confirm it first
        account_tokens.issue(
            store,
            kind=verification.KIND,
            tenant=tenant,
            user_id=user.user_id,
            now=now,
            ttl=target.verification_ttl,
        )
    return user


def _config(target: WriteTarget, user: UserRecord, plan: UserPlan, factor: ImportedFactor) -> FactorConfig:
    """The stored factor for an imported one (the plan checked that each can be made)."""
    now, sealer = target.now, target.sealer
    if isinstance(factor, EmailFactor):
        return imported_address(user.user_id, factor.address or str(plan.email), now)
    if isinstance(factor, WebAuthnCredential):
        return _credential(user, factor, now)
    if sealer is None:  # the plan carries no sealed factor without a sealer
        raise Refused("the app has no factor sealer for the user's secrets")
    if isinstance(factor, TotpFactor):
        return imported_key(sealer, user.user_id, FactorKind.TOTP, factor.secret, now)
    if isinstance(factor, RecoveryCodes):
        return imported_code_set(sealer, user.user_id, list(factor.codes), now)
    return imported_key(sealer, user.user_id, FactorKind.HOTP, factor.secret, now, factor.counter)


def _credential(user: UserRecord, factor: WebAuthnCredential, now: datetime) -> FactorConfig:
    passkey = factor.use is WebAuthnUse.FIRST
    return imported_credential(
        user.user_id,
        credential_id=factor.credential_id,
        public_key=factor.public_key,
        sign_count=factor.sign_count,
        transports=factor.transports,
        passkey=passkey,
        label=factor.label or ("Passkey" if passkey else "Security key"),
        now=now,
        user_handle=factor.user_handle,
        backup_eligible=factor.backup_eligible,
        backed_up=factor.backed_up,
    )
