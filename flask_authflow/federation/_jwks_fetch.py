"""One fetch of a provider's key set, parsed: the usable keys (hostile and unusable ones
skipped, see :mod:`~flask_authflow.federation._jwks_cache`) and the answer's lifetime."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from flask_authflow.federation._errors import OAuthError, ProviderUnreachable
from flask_authflow.federation._http import HttpClient
from flask_authflow.jose._keys import VerificationKey, parse_public_jwk

__all__ = ["PRIVATE_MEMBERS", "Fetched", "cache_max_age", "fetch_jwks"]

log = logging.getLogger("flask_authflow.federation")

_ACCEPT: Final = {"Accept": "application/jwk-set+json, application/json"}
#: JWK members that only a private (or symmetric) key has: a set publishing one is leaking it.
PRIVATE_MEMBERS: Final = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


def cache_max_age(cache_control: str | None) -> timedelta | None:
    """The lifetime a ``Cache-Control`` value grants: ``max-age=N`` seconds, ``0`` for
    ``no-store``/``no-cache``, ``None`` when it says nothing (or nothing readable).

    Several ``max-age`` directives: the smallest wins.
    """
    if not cache_control:
        return None
    ages: list[int] = []
    for directive in cache_control.split(","):
        name, _, value = directive.strip().partition("=")
        name = name.strip().lower()
        if name in ("no-store", "no-cache"):
            return timedelta(0)
        if name == "max-age":
            value = value.strip().strip('"')
            if value.isascii() and value.isdigit():
                ages.append(int(value[:12]))  # absurd values end up at the cap anyway
    return timedelta(seconds=min(ages)) if ages else None


@dataclass(frozen=True, slots=True)
class Fetched:
    """The outcome of one fetch: the usable keys, or why there are none."""

    keys: tuple[VerificationKey, ...] = ()
    skipped: int = 0
    max_age: timedelta | None = None
    error: str | None = None


def fetch_jwks(http: HttpClient, jwks_uri: str, *, require_alg: bool) -> Fetched:
    """One request to ``jwks_uri``, parsed (the key cache runs it outside its lock)."""
    try:
        response = http.get(jwks_uri, headers=_ACCEPT)
    except OAuthError as exc:
        return Fetched(error=exc.message)
    if response.status != 200:
        return Fetched(error=f"the JWKS answered HTTP {response.status}")
    try:
        document = response.json_object()
    except ProviderUnreachable as exc:
        return Fetched(error=exc.message)
    entries = document.get("keys")
    if not isinstance(entries, list):
        return Fetched(error='the JWKS has no "keys" list')
    keys, skipped, without_alg = _usable_keys(entries, jwks_uri, require_alg)
    if not keys:
        hint = (
            f"; {without_alg} without alg (set jwks_require_alg=False to use them)"
            if without_alg
            else "; a key needs an alg we verify or none at all"
        )
        return Fetched(
            skipped=skipped, error=f"the JWKS has no usable signature key ({skipped} skipped{hint})"
        )
    return Fetched(tuple(keys), skipped, cache_max_age(response.headers.get("cache-control")))


def _usable_keys(
    entries: list[object], jwks_uri: str, require_alg: bool
) -> tuple[list[VerificationKey], int, int]:
    """The usable keys of ``entries``, how many were skipped, and how many of those lacked ``alg``."""
    kids: dict[str, int] = {}
    for entry in entries:
        kid = entry.get("kid") if isinstance(entry, dict) else None
        if isinstance(kid, str):
            kids[kid] = kids.get(kid, 0) + 1
    keys: list[VerificationKey] = []
    skipped = without_alg = 0
    for entry in entries:
        if isinstance(entry, dict) and PRIVATE_MEMBERS.intersection(entry):
            log.warning("JWKS from %s: key %r publishes private members: skipped", jwks_uri, entry.get("kid"))
            skipped += 1
            continue
        kid = entry.get("kid") if isinstance(entry, dict) else None
        if isinstance(kid, str) and kids[kid] > 1:
            log.warning("JWKS from %s: kid %r is shared by several keys: refused", jwks_uri, kid)
            skipped += 1
            continue
        try:
            key = parse_public_jwk(entry)  # type: ignore[arg-type]
        except ValueError:
            skipped += 1  # use=enc, unknown kty or curve, malformed: RFC 7517 §5 says ignore
            continue
        if require_alg and key.alg is None:
            skipped += 1
            without_alg += 1
            continue
        keys.append(key)
    return keys, skipped, without_alg
