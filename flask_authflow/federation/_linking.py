"""Account linking and provisioning: what a signed-in user's link and unlink need.

A link ceremony is a federated login started by a signed-in user (the session stores
``LINK_KEY`` next to the ceremony, naming that user): its callback links the provider
identity to that user instead of logging in. An identity already linked to another user
is refused (:class:`IdentityLinkedElsewhere`); an unlink that would leave the user no way
to sign in (no password, no passkey, no other link) is refused (:class:`LastSignInMethod`).

Provisioning: the application's ``provision_user(identity, tenant)`` hook creates its own
user row at the first federated sign-in of an identity with no link; a hook that raises
answers :class:`ProvisioningFailed` and leaves no link.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from flask_authflow._core.ports import FactorStore, UserRecord
from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow._outcomes import FactorKind
from flask_authflow.errors import StepUpNeeded
from flask_authflow.federation._errors import OAuthError, UserNotLinked
from flask_authflow.federation._links import FederationStore, IdentityLink

__all__ = [
    "LINK_KEY",
    "IdentityLinked",
    "IdentityLinkedElsewhere",
    "LastSignInMethod",
    "LinkIntent",
    "NotLinked",
    "ProvisionHook",
    "ProvisioningFailed",
    "has_other_way",
    "link_identity_to",
    "provisioned_id",
]

#: The session flow's key of a link ceremony: the user the callback links to.
LINK_KEY = "oauth_link"

#: ``provision_user(identity, tenant)``: the id of the user it created (or its
#: ``UserRecord``, or an object with ``get_id()``), or ``None`` to refuse the sign-in.
ProvisionHook = Callable[[Any, str], Any]


class IdentityLinkedElsewhere(OAuthError):
    """This provider account is already linked to another user."""

    code = "identity_linked_elsewhere"
    status = 409


class LastSignInMethod(OAuthError):
    """This is your last way to sign in: set a password or add a passkey first."""

    code = "last_sign_in_method"
    status = 409


class NotLinked(OAuthError):
    """This provider is not linked to your account."""

    code = "not_linked"
    status = 404


class ProvisioningFailed(OAuthError):
    """Your account could not be created: please try again later."""

    code = "provisioning_failed"
    status = 403


@dataclass(frozen=True)
class LinkIntent:
    """The signed-in user a link ceremony links to."""

    tenant: str
    user_id: str

    @classmethod
    def of_fresh_session(cls, session: AuthSession, now: datetime, fresh_within: timedelta) -> LinkIntent:
        """The signed-in user of ``session``, if they authenticated within ``fresh_within``.

        :raises StepUpNeeded: not signed in, or the last authentication is older."""
        record = session.record
        if record.state is not AuthState.AUTHENTICATED or record.tenant is None or record.user_id is None:
            raise StepUpNeeded("linking a provider needs a signed-in session")
        if record.authenticated_at is None or now - record.authenticated_at > fresh_within:
            raise StepUpNeeded("linking a provider needs a fresh authentication: verify your identity again")
        return cls(record.tenant, record.user_id)

    def to_flow(self) -> dict[str, str]:
        return {"tenant": self.tenant, "user_id": self.user_id}

    @classmethod
    def from_flow(cls, value: Any) -> LinkIntent | None:
        if not isinstance(value, Mapping):
            return None
        tenant, user_id = value.get("tenant"), value.get("user_id")
        if not isinstance(tenant, str) or not isinstance(user_id, str) or not tenant or not user_id:
            return None
        return cls(tenant, user_id)


@dataclass(frozen=True)
class IdentityLinked:
    """The result of a link ceremony's callback: the provider identity now belongs to the user."""

    provider: str
    link: IdentityLink
    return_to: str | None


def provisioned_id(result: Any) -> str | None:
    """The user id a ``provision_user`` hook answered (a string, a ``UserRecord`` or an
    object with ``get_id()``), or ``None`` when it refused."""
    if isinstance(result, UserRecord):
        return result.user_id
    if result is not None and not isinstance(result, str):
        get_id = getattr(result, "get_id", None)
        result = get_id() if callable(get_id) else None
    return result if isinstance(result, str) and result else None


def has_other_way(
    factors: FactorStore, links: FederationStore, tenant: str, user_id: str, without: Collection[IdentityLink]
) -> bool:
    """The user can still sign in once the links ``without`` are gone: a password, a
    passkey or another linked provider identity."""
    gone = {(link.issuer, link.subject) for link in without}
    if factors.get_password_hash(tenant, user_id) is not None:
        return True
    for config in factors.list_factors(tenant, user_id):
        if config.kind is FactorKind.WEBAUTHN and (config.data or {}).get("passkey") is True:
            return True
    return any((link.issuer, link.subject) not in gone for link in links.links_of_user(tenant, user_id))


def link_identity_to(
    links: FederationStore,
    intent: LinkIntent,
    issuer: str,
    subject: str,
    tenant: str,
    existing: IdentityLink | None,
) -> IdentityLink:
    """Link the provider identity (``issuer``, ``subject``) of ``tenant``, whose link is
    ``existing``, to the user of ``intent``; a link to that user already is kept as it is.

    :raises IdentityLinkedElsewhere: it is linked to another user.
    :raises UserNotLinked: the provider signs in to another tenant than the user's."""
    if existing is not None and (existing.tenant, existing.user_id) == (intent.tenant, intent.user_id):
        return existing  # linked already: nothing changes
    if existing is not None:
        raise IdentityLinkedElsewhere()
    if tenant != intent.tenant:
        raise UserNotLinked("this provider signs in to another tenant")
    return links.link_identity(issuer, subject, intent.tenant, intent.user_id)
