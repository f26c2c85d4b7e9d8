"""The verified identity a callback hands to the claims mapper, and the default mapping:
:class:`FederatedIdentity`, :func:`default_claims_mapper` and linking by verified e-mail
(:func:`email_linked_user`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flask_authflow._core.identifiers import normalise_email, normalise_identifier, provider_identifier
from flask_authflow._core.ports import IdentityStore, UserRecord
from flask_authflow.errors import InvalidInput
from flask_authflow.federation._links import IdentityLink

__all__ = [
    "ClaimsMapper",
    "FederatedIdentity",
    "default_claims_mapper",
    "email_link_key",
    "email_linked_user",
]


@dataclass(frozen=True)
class FederatedIdentity:
    """A provider identity whose ID token passed every check, for the claims mapper."""

    provider: str
    issuer: str
    subject: str
    tenant: str
    claims: Mapping[str, Any] = field(repr=False)
    userinfo: Mapping[str, Any] | None = field(default=None, repr=False)
    #: The existing link of (issuer, subject), if any.
    link: IdentityLink | None = None
    #: The provider allows linking to an existing account by verified e-mail.
    link_by_email: bool = False

    @property
    def local_identifier(self) -> str:
        """``<provider>:<sub>``, the sub's case kept: the identifier the default mapping
        gives the local account it creates (a ``provision_user`` hook may use it too)."""
        return provider_identifier(self.provider, self.subject)

    @property
    def verified_email(self) -> str | None:
        """The e-mail address, only when the provider says it is verified (``email_verified``
        is exactly ``true``); never link accounts by an unverified address."""
        source: Mapping[str, Any] = self.userinfo if self.userinfo is not None else self.claims
        email = source.get("email")
        if isinstance(email, str) and email and source.get("email_verified") is True:
            return email
        return None


def email_link_key(email: str) -> str | None:
    """The form of a provider-verified address that linking by e-mail looks up: the whole
    address lower-cased, as every account's address is stored
    (:func:`~flask_authflow._core.identifiers.normalise_email`); ``None`` (never link) for
    an address outside ASCII, or without exactly one ``@`` between two non-empty parts.

    No Unicode folding: a provider-verified address whose first letter is the fullwidth
    ``a`` (U+FF41) is not the local ``alice@example.com``.
    """
    if not email.isascii() or email.count("@") != 1:
        return None
    local, _, domain = email.partition("@")
    if not local or not domain or any(ch.isspace() or ord(ch) < 0x21 or ord(ch) == 0x7F for ch in email):
        return None
    try:
        return normalise_email(email)
    except InvalidInput:
        return None


#: ``claims_mapper(identity)``: the local user (an id or a ``UserRecord``) to log in, or ``None`` to refuse.
ClaimsMapper = Callable[[FederatedIdentity], str | UserRecord | None]


def default_claims_mapper(
    identity: FederatedIdentity,
    accounts: IdentityStore,
    *,
    create_account: Callable[[FederatedIdentity, str], UserRecord] | None = None,
) -> str:
    """The mapping used when the application registers no ``claims_mapper``.

    1. An identity already linked logs in as its linked user.
    2. With ``link_by_email`` on the provider and an e-mail the provider says is
       verified, the account of the tenant whose own **verified** address it is
       (:func:`email_linked_user`; compared in lower case, never with an identifier). An
       address outside ASCII never links here: an application that wants it decides in
       its own ``claims_mapper``.
    3. Otherwise a new passwordless local account named ``<provider>:<sub>`` (found again
       if it exists), which the caller links; ``create_account(identity, name)`` makes it
       (the service passes one that runs the application's ``user_created`` hook).
    """
    if identity.link is not None:
        return identity.link.user_id
    matched = email_linked_user(identity, accounts)
    if matched is not None:
        return matched
    name = identity.local_identifier
    found = accounts.find_user(identity.tenant, normalise_identifier(name))
    if found is not None:
        return found.user_id
    if create_account is not None:
        return create_account(identity, name).user_id
    return accounts.create_user(identity.tenant, name).user_id


def email_linked_user(identity: FederatedIdentity, accounts: IdentityStore) -> str | None:
    """The existing local account that ``link_by_email`` links the identity to, or ``None``.

    Only an account whose **verified** e-mail address is the provider's verified address
    (compared as :func:`email_link_key` has it) is a match: never an account's identifier,
    which sign-up, an import or an administrator may set to any text, and never an
    address its account has not proved it reads (a sign-up waiting for confirmation, an
    unconfirmed import). Without a match the sign-in goes on as if no account had the
    address."""
    email = identity.verified_email
    key = email_link_key(email) if identity.link_by_email and email is not None else None
    if key is None:
        return None
    existing = accounts.find_user_by_email(identity.tenant, key)
    if existing is None or existing.email != key or existing.email_verified_at is None:
        return None
    return existing.user_id
