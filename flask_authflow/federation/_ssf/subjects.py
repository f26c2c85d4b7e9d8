"""Who a SET is about: its RFC 9493 subject identifier, resolved to a local account.

* ``iss_sub``: the identity link of (``iss``, ``sub``), as federated login made it; ``sub``
  is never taken for a local user id;
* ``opaque``: the transmitter's own identifier of the user, i.e. the link of (the
  transmitter's issuer, ``id``);
* ``email``: the account of the transmitter's tenant whose **verified** address it is (an
  unverified address proves nothing about who owns the account);
* ``complex`` (Shared Signals): its ``user`` member as above, and a ``session`` member of
  format ``opaque`` names the provider session (its ``sid``) whose sessions end;
* ``aliases``: each identifier resolved; they must all name one account.

Any other format, or an identifier that names no account, is an unknown subject: the
event is acknowledged and audited, and nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from flask_authflow._core.identifiers import normalise_email
from flask_authflow._core.ports import IdentityStore, UserRecord
from flask_authflow.errors import InvalidInput
from flask_authflow.federation._links import FederationStore
from flask_authflow.federation._ssf.settings import Transmitter
from flask_authflow.federation._ssf.verify import SetRefused

__all__ = ["Subject", "resolve_subject"]

_MAX_ALIASES: Final = 10
_MAX_TEXT: Final = 512


@dataclass(frozen=True, slots=True)
class Subject:
    """The local account a SET names (``None``: unknown) and the provider session, if any."""

    user: UserRecord | None
    provider_sid: str | None = None


def _text(subject: Mapping[str, Any], member: str) -> str:
    value = subject.get(member)
    if not isinstance(value, str) or not value or len(value) > _MAX_TEXT:
        raise SetRefused("invalid_request", f"the subject's {member} is missing")
    return value


class _Resolver:
    def __init__(self, transmitter: Transmitter, links: FederationStore, accounts: IdentityStore) -> None:
        self.transmitter = transmitter
        self.links = links
        self.accounts = accounts

    def linked(self, issuer: str, subject: str) -> UserRecord | None:
        link = self.links.find_link(issuer, subject)
        return None if link is None else self.accounts.get_user(link.tenant, link.user_id)

    def by_email(self, address: str) -> UserRecord | None:
        try:
            email = normalise_email(address)
        except InvalidInput:
            raise SetRefused("invalid_request", "the subject's email is not an address") from None
        user = self.accounts.find_user_by_email(self.transmitter.tenant, email)
        return user if user is not None and user.email_verified_at is not None else None

    def user(self, subject: Any) -> UserRecord | None:
        if not isinstance(subject, Mapping):
            raise SetRefused("invalid_request", "a subject identifier is not an object")
        kind = subject.get("format")
        if kind == "iss_sub":
            return self.linked(_text(subject, "iss"), _text(subject, "sub"))
        if kind == "opaque":
            return self.linked(self.transmitter.issuer, _text(subject, "id"))
        if kind == "email":
            return self.by_email(_text(subject, "email"))
        if kind == "aliases":
            return self.aliases(subject.get("identifiers"))
        return None

    def aliases(self, identifiers: Any) -> UserRecord | None:
        if not isinstance(identifiers, list) or not 0 < len(identifiers) <= _MAX_ALIASES:
            raise SetRefused("invalid_request", "aliases must list 1 to 10 identifiers")
        found = {user.user_id: user for user in map(self.user, identifiers) if user is not None}
        if len(found) > 1:
            raise SetRefused("invalid_request", "the aliases name different accounts")
        return next(iter(found.values()), None)


def resolve_subject(
    subject: Mapping[str, Any] | None,
    transmitter: Transmitter,
    *,
    links: FederationStore,
    accounts: IdentityStore,
) -> Subject:
    """The account (and provider session) ``subject`` names; see the module's text.

    :raises SetRefused: ``invalid_request`` for a subject of a known format that lacks its
        members."""
    if subject is None:
        return Subject(None)
    resolver = _Resolver(transmitter, links, accounts)
    if subject.get("format") != "complex":
        return Subject(resolver.user(subject))
    user = resolver.user(subject["user"]) if "user" in subject else None
    session = subject.get("session")
    provider_sid = None
    if isinstance(session, Mapping) and session.get("format") == "opaque":
        provider_sid = _text(session, "id")
    return Subject(user, provider_sid)
