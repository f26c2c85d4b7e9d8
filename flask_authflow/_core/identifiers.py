"""Canonical forms of login identifiers and tenants.

One identifier must map to one account however it is typed: "Alice", "alice" and
"alice" typed in full-width forms are the same user. Normalising before every lookup *and* before
counting failures means the lockout cannot be sidestepped by changing the case.
"""

from __future__ import annotations

import re
import unicodedata

from flask_authflow._i18n import N_
from flask_authflow.errors import InvalidInput

__all__ = [
    "MAX_EMAIL_LENGTH",
    "MAX_IDENTIFIER_LENGTH",
    "MAX_TENANT_LENGTH",
    "check_tenant",
    "normalise_email",
    "normalise_identifier",
    "provider_identifier",
]

#: The longest identifier accepted (an e-mail address is at most 254 characters).
MAX_IDENTIFIER_LENGTH = 254
MAX_TENANT_LENGTH = 128
#: The longest e-mail address stored (RFC 5321's path limit less the angle brackets).
MAX_EMAIL_LENGTH = 254

#: ``<provider>:<subject>``: the identifier of an account a federated sign-in created. The
#: provider name is lower-case ASCII; the subject is printable ASCII without ``@`` and
#: keeps its case (providers such as Microsoft and Apple issue subjects that differ only
#: in case: folding them would give two people one account).
_PROVIDER_IDENTIFIER = re.compile(r"[a-z0-9][a-z0-9_-]{0,25}:[!-?A-~]{1,255}")


def _has_control(value: str) -> bool:
    # Category C: controls (CR, LF, NEL), format characters (zero-width joiners...),
    # surrogates, private use and unassigned code points; Zl and Zp: the line and
    # paragraph separators U+2028 and U+2029, which break lines like LF does. None
    # belongs in an identifier.
    return any((cat := unicodedata.category(ch)).startswith("C") or cat in ("Zl", "Zp") for ch in value)


def provider_identifier(provider: str, subject: str) -> str:
    """The identifier of the local account created for a provider identity,
    ``<provider>:<subject>``, with the subject's case kept (:func:`normalise_identifier`
    leaves it as it is); :class:`InvalidInput` if it is not of that form."""
    value = f"{provider}:{subject}"
    if len(value) > MAX_IDENTIFIER_LENGTH or not _PROVIDER_IDENTIFIER.fullmatch(value):
        raise InvalidInput("the provider identity cannot name a local account")
    return value


def normalise_identifier(value: str) -> str:
    """NFKC, case-folded, stripped; :class:`InvalidInput` if empty, too long or with control characters.

    A provider-derived identifier (:func:`provider_identifier`, ``<provider>:<subject>``
    in ASCII) is kept exactly: its subject is case-sensitive.
    """
    if not isinstance(value, str):
        raise InvalidInput("the identifier must be a string")
    if len(value) > 4 * MAX_IDENTIFIER_LENGTH:  # refuse before normalising absurd input
        raise InvalidInput(N_("the identifier is too long"))
    if len(value) <= MAX_IDENTIFIER_LENGTH and _PROVIDER_IDENTIFIER.fullmatch(value):
        return value
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold()).strip()
    if not folded:
        raise InvalidInput("the identifier is empty")
    if len(folded) > MAX_IDENTIFIER_LENGTH:
        raise InvalidInput(N_("the identifier is too long"))
    if _has_control(folded):
        raise InvalidInput("the identifier contains control characters")
    return folded


def check_tenant(value: str) -> str:
    """Tenants are compared exactly; refuse empty, over-long or control-character values."""
    if not isinstance(value, str) or not value or len(value) > MAX_TENANT_LENGTH or _has_control(value):
        raise InvalidInput("invalid tenant")
    return value


def normalise_email(value: str) -> str:
    """The stored form of an account's e-mail address: stripped, NFC, and lower-cased in
    the whole address (local part and domain); :class:`InvalidInput` if it is not one
    ``@`` between two non-empty parts, too long, or holds spaces or control characters.

    ``Owner2@Example.com`` and ``owner2@example.com`` are one address: for the per-tenant
    uniqueness, for every lookup (sign-up, change of address, reset, linking by e-mail)
    and for where mail goes. Mail systems deliver both to one mailbox in practice, so two
    accounts must never hold them apart.

    NFC makes canonically equivalent spellings one address, as ``email-validator`` does
    (a decomposed ``é``, the Kelvin sign and ``K``). No compatibility folding, and the
    lower-casing never turns a character outside ASCII into ASCII: an address with a
    fullwidth ``a`` (U+FF41) is not ``alice@example.com``, and the dotted ``İ`` stays as
    it is rather than becoming an ``i`` with a combining dot.
    Whether the address is deliverable is the caller's check (sign-up validates with
    ``email-validator``); this is only the canonical form that lookups and the per-tenant
    uniqueness compare.
    """
    if not isinstance(value, str):
        raise InvalidInput("the e-mail address must be a string")
    if len(value) > 4 * MAX_EMAIL_LENGTH:  # refuse before normalising absurd input
        raise InvalidInput(N_("not an e-mail address"))
    address = unicodedata.normalize("NFC", _fold_case(unicodedata.normalize("NFC", value.strip())))
    if len(address) > MAX_EMAIL_LENGTH or address.count("@") != 1:
        raise InvalidInput(N_("not an e-mail address"))
    local, _, domain = address.partition("@")
    if not local or not domain or _has_control(address) or any(ch.isspace() for ch in address):
        raise InvalidInput(N_("not an e-mail address"))
    return address


def _fold_case(address: str) -> str:
    """``address`` lower-cased character by character, except a character outside ASCII
    whose lower case would hold an ASCII one (it stays as it is): the case folding of
    :func:`normalise_email` (which NFC-normalises first). Migration 0009 keeps its own
    copy, as a revision must not change when this does."""
    return "".join(_lower_char(ch) for ch in address)


def _lower_char(ch: str) -> str:
    if ch.isascii():
        return ch.lower()
    lowered = ch.lower()
    return ch if any(c.isascii() for c in lowered) else lowered
