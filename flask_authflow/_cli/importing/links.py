"""Identity links an import carries: a source's federated identity (``provider`` + ``subject``,
e.g. django-allauth's ``socialaccount_socialaccount``) becomes a link to OUR provider of the
same name, so the user's next "Sign in with ..." lands in the imported account.

The plan resolves each provider name to the issuer our provider verifies (a name we do not
have, or a multi-tenant issuer, is not carried and the plan says so); the writer links inside
the user's unit of work, and leaves alone an identity that already belongs to another account
(never moving a link away from its owner, decided by one statement, so also against a
federated sign-in or another import at the same moment).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from flask_authflow._cli.importing.model import IdentityLink
from flask_authflow.errors import AuthFlowError
from flask_authflow.federation._links import IdentityLink as StoredLink

__all__ = ["LinkStore", "issuer_resolver", "plan_links", "write_links"]


class LinkStore(Protocol):
    """The part of the store links are written to (both backends are one)."""

    def claim_identity(self, issuer: str, subject: str, tenant: str, user_id: str) -> StoredLink:
        """Link the identity unless it is linked already; the link in force (never replaced)."""
        ...


def issuer_resolver(federation: Any) -> Callable[[str], str | None]:
    """The issuer of each of the app's providers by name (``None``: no such provider, or its
    issuer cannot be known, such as a multi-tenant one). ``federation`` is the app's
    :class:`~flask_authflow.federation._login.FederationService` (``None``: no providers)."""
    known: dict[str, str | None] = {}

    def issuer_of(name: str) -> str | None:
        if name not in known:
            known[name] = _issuer(federation, name)
        return known[name]

    return issuer_of


def _issuer(federation: Any, name: str) -> str | None:
    if federation is None or name not in federation.registry:
        return None
    try:
        provider = federation.provider(name)
    except AuthFlowError:  # a multi-tenant provider, or its discovery failed
        return None
    return str(provider.issuer)


def plan_links(
    links: Sequence[IdentityLink], issuer_of: Callable[[str], str | None]
) -> tuple[list[tuple[str, str]], list[str]]:
    """``([(issuer, subject) carried], [what is not carried, said for the report])``."""
    carried: list[tuple[str, str]] = []
    not_carried: list[str] = []
    for link in links:
        issuer = issuer_of(link.provider) if link.subject else None
        if issuer is None:
            not_carried.append(f"identity link {link.provider} (no provider of that name in this app)")
        elif (issuer, link.subject) not in carried:
            carried.append((issuer, link.subject))
    return carried, not_carried


def write_links(store: LinkStore, tenant: str, user_id: str, links: Sequence[tuple[str, str]]) -> list[str]:
    """Link the planned identities to the new account (in the caller's unit of work). Returns
    the issuers left alone because the identity belongs to another account already."""
    taken = []
    for issuer, subject in links:
        held = store.claim_identity(issuer, subject, tenant, user_id)  # one statement decides
        if (held.tenant, held.user_id) != (tenant, user_id):
            taken.append(issuer)
    return taken
