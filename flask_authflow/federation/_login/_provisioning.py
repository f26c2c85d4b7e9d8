"""Who signs in: the claims mapper's user, the linked one, the account of a verified
e-mail (``link_by_email``), the ``provision_user`` hook's or the default mapping's; the
identity is linked to it in the callback's one commit."""

from __future__ import annotations

import logging
from functools import partial

from flask_authflow._core.ports import UserRecord
from flask_authflow.errors import AuthFlowError
from flask_authflow.federation._errors import OAuthError, UserNotLinked
from flask_authflow.federation._linking import ProvisionHook, ProvisioningFailed, provisioned_id
from flask_authflow.federation._login._identity import (
    FederatedIdentity,
    default_claims_mapper,
    email_linked_user,
)
from flask_authflow.federation._login._services import FederationServices

__all__ = ["map_and_link"]

log = logging.getLogger("flask_authflow.federation")


def _provisioning_error(exc: BaseException, hook: str, identity: FederatedIdentity) -> BaseException:
    """What a failed provisioning hook answers: its own refusal (an ``OAuthError``), a
    store outage (503) or an interrupt as they are; any other failure as
    :class:`ProvisioningFailed` (logged, never shown to the browser)."""
    kept = isinstance(exc, OAuthError) or (isinstance(exc, AuthFlowError) and exc.status >= 500)
    if kept or not isinstance(exc, Exception):
        return exc
    log.exception("%s failed for a sign-in with %s", hook, identity.provider)
    return ProvisioningFailed()


def map_and_link(svc: FederationServices, identity: FederatedIdentity) -> str:
    """The local user of the identity, linked to it: the claims mapper's, else the
    linked one, else (with ``link_by_email``) the account whose verified address is
    its verified e-mail, else
    the ``provision_user`` hook's (with the link, in one transaction), else the
    default mapping's."""
    hook = svc.provision_hook() if identity.link is None and svc.claims_mapper() is None else None
    if hook is not None:
        matched = email_linked_user(identity, svc.accounts)
        if matched is None:
            return _provision(svc, hook, identity)
        user_id = matched
    else:
        user_id = _map_identity(svc, identity)
    link = identity.link
    if link is None or link.user_id != user_id or link.tenant != identity.tenant:
        svc.links.link_identity(identity.issuer, identity.subject, identity.tenant, user_id)
    return user_id


def _provision(svc: FederationServices, hook: ProvisionHook, identity: FederatedIdentity) -> str:
    """Run the hook and link its user, in the callback's one commit
    (``FederationService.one_commit``: the hook's rows in the application's transaction the flow
    owns, or in a savepoint of the application's own; never committed here)."""
    try:
        user_id = provisioned_id(hook(identity, identity.tenant))
        if user_id is None:
            raise UserNotLinked("the application created no account for this sign-in")
        svc.links.link_identity(identity.issuer, identity.subject, identity.tenant, user_id)
    except BaseException as exc:
        error = _provisioning_error(exc, "provision_user", identity)
        if error is exc:
            raise
        raise error from exc
    return user_id


def _map_identity(svc: FederationServices, identity: FederatedIdentity) -> str:
    mapper = svc.claims_mapper()
    if mapper is not None:
        result = mapper(identity)
    else:
        result = default_claims_mapper(identity, svc.accounts, create_account=partial(_create_account, svc))
    if isinstance(result, UserRecord):
        return result.user_id
    if isinstance(result, str) and result:
        return result
    raise UserNotLinked("no local account for this sign-in")


def _create_account(svc: FederationServices, identity: FederatedIdentity, name: str) -> UserRecord:
    """A passwordless account named ``name`` for the identity, with the application's
    row (its ``user_created`` hook, told the token's claims)."""

    def make() -> UserRecord:
        return svc.accounts.create_user(identity.tenant, name)

    if svc.app_users is None:
        return make()
    try:
        return svc.app_users.create(svc.accounts, make, source="federation", claims=identity.claims)
    except BaseException as exc:
        error = _provisioning_error(exc, "user_created", identity)
        if error is exc:
            raise
        raise error from exc
