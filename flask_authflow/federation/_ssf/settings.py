"""The transmitters a Shared Signals receiver listens to (``AUTHFLOW_SSF_TRANSMITTERS``).

Each entry names one transmitter: an OpenID provider, or any issuer that publishes a JWKS.
Every value that a SET is checked against is configured, never read from the SET:

* ``issuer``: the exact ``iss`` of its SETs;
* ``jwks_uri``: where its signing keys are (https, http only on loopback);
* ``audience``: the ``aud`` its SETs must name (this receiver, as registered at the
  transmitter);
* ``algorithms``: the signature algorithms accepted (default ``RS256``, ``PS256``,
  ``ES256``; asymmetric ones only, never ``none`` or ``HS*``);
* ``delivery``: ``"push"`` (RFC 8935, the default) or ``"poll"`` (RFC 8936);
* for push: ``push_token``, the bearer secret the transmitter sends in ``Authorization``
  (at least 32 characters), or ``"unauthenticated_push": True`` to accept pushes without
  one (the SET's signature is then the only check: say so explicitly);
* for poll: ``poll_endpoint`` and ``poll_token`` (our bearer token at the transmitter);
* ``tenant``: where its subjects' accounts are (default ``AUTHFLOW_DEFAULT_TENANT``);
* ``provider``: the name of the OAuth provider it is, if any (``tokens-revoked`` then drops
  that provider's stored tokens only; without it, every stored provider token of the user);
* ``max_age`` (default 10 minutes) and ``leeway`` (default 60 s): how old a SET's ``iat``
  may be, and how far in the future.

An unsafe or incomplete entry is refused at ``init_app`` with what to set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from flask_authflow._core.identifiers import check_tenant
from flask_authflow.errors import ConfigurationError, InvalidInput
from flask_authflow.federation._http import check_provider_url
from flask_authflow.federation._tokens import ID_TOKEN_ALGORITHMS

__all__ = ["SET_ALGORITHMS", "Transmitter", "transmitters"]

#: The algorithms a transmitter may be configured with (asymmetric signatures only).
SET_ALGORITHMS: Final = ID_TOKEN_ALGORITHMS
_DEFAULT_ALGORITHMS: Final = ("RS256", "PS256", "ES256")
_MIN_SECRET: Final = 32
_KNOWN: Final = frozenset(
    {
        "issuer",
        "jwks_uri",
        "audience",
        "algorithms",
        "delivery",
        "push_token",
        "unauthenticated_push",
        "poll_endpoint",
        "poll_token",
        "tenant",
        "provider",
        "max_age",
        "leeway",
    }
)


@dataclass(frozen=True, slots=True)
class Transmitter:
    """One configured transmitter (see the module's text for each member)."""

    name: str
    issuer: str
    jwks_uri: str
    audience: str
    algorithms: tuple[str, ...]
    delivery: str
    tenant: str
    push_token: str | None = None
    poll_endpoint: str | None = None
    poll_token: str | None = None
    provider: str | None = None
    max_age: timedelta = timedelta(minutes=10)
    leeway: timedelta = timedelta(seconds=60)

    def __repr__(self) -> str:  # the secrets stay out of logs
        return f"<Transmitter {self.name!r} issuer={self.issuer!r} delivery={self.delivery}>"


def _text(entry: Mapping[str, Any], key: str, what: str, *, required: bool = True) -> str | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise ConfigurationError(f"{what}[{key!r}] must be a non-empty string without surrounding spaces")
    return value


def _duration(entry: Mapping[str, Any], key: str, what: str, default: timedelta, cap: timedelta) -> timedelta:
    value = entry.get(key, default)
    if not isinstance(value, timedelta) or not timedelta(0) < value <= cap:
        raise ConfigurationError(f"{what}[{key!r}] must be a timedelta above 0 and at most {cap}")
    return value


def _algorithms(entry: Mapping[str, Any], what: str) -> tuple[str, ...]:
    value = entry.get("algorithms", _DEFAULT_ALGORITHMS)
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
        raise ConfigurationError(f"{what}['algorithms'] must be a non-empty list of algorithm names")
    refused = sorted(str(alg) for alg in value if alg not in SET_ALGORITHMS)
    if refused:
        raise ConfigurationError(
            f"{what}['algorithms']: {refused} refused (never none or HS*); choose from "
            f"{sorted(SET_ALGORITHMS)}"
        )
    return tuple(dict.fromkeys(value))


def _push_token(entry: Mapping[str, Any], what: str) -> str | None:
    token = _text(entry, "push_token", what, required=False)
    unauthenticated = entry.get("unauthenticated_push", False)
    if not isinstance(unauthenticated, bool):
        raise ConfigurationError(f"{what}['unauthenticated_push'] must be True or False")
    if token is None and not unauthenticated:
        raise ConfigurationError(
            f"{what} pushes SETs: set 'push_token' (a secret of at least {_MIN_SECRET} characters the "
            "transmitter sends as a bearer token), or 'unauthenticated_push': True to accept pushes "
            "checked by their signature only"
        )
    if token is not None and unauthenticated:
        raise ConfigurationError(f"{what}: 'push_token' and 'unauthenticated_push' exclude each other")
    if token is not None and len(token) < _MIN_SECRET:
        raise ConfigurationError(f"{what}['push_token'] must be at least {_MIN_SECRET} characters")
    return token


def _delivery(entry: Mapping[str, Any], what: str) -> dict[str, Any]:
    delivery = entry.get("delivery", "push")
    if delivery == "push":
        if entry.get("poll_endpoint") is not None or entry.get("poll_token") is not None:
            raise ConfigurationError(f"{what}: poll_endpoint and poll_token are for 'delivery': 'poll'")
        return {"delivery": "push", "push_token": _push_token(entry, what)}
    if delivery != "poll":
        raise ConfigurationError(f"{what}['delivery'] must be 'push' (default) or 'poll'")
    if entry.get("push_token") is not None or entry.get("unauthenticated_push"):
        raise ConfigurationError(f"{what}: push_token and unauthenticated_push are for 'delivery': 'push'")
    endpoint = _text(entry, "poll_endpoint", what)
    check_provider_url(str(endpoint), f"{what}['poll_endpoint']", error=ConfigurationError)
    return {"delivery": "poll", "poll_endpoint": endpoint, "poll_token": _text(entry, "poll_token", what)}


def transmitter(name: str, entry: Mapping[str, Any], default_tenant: str) -> Transmitter:
    """The checked :class:`Transmitter` of one entry of ``AUTHFLOW_SSF_TRANSMITTERS``.

    :raises ConfigurationError: naming the entry and what to set."""
    what = f"AUTHFLOW_SSF_TRANSMITTERS[{name!r}]"
    if not name or not name.replace("-", "").replace("_", "").isalnum() or len(name) > 64:
        raise ConfigurationError(f"{what}: a transmitter name is letters, digits, - and _ (at most 64)")
    unknown = sorted(set(entry) - _KNOWN)
    if unknown:
        raise ConfigurationError(f"{what}: unknown setting(s) {unknown}; known: {sorted(_KNOWN)}")
    jwks_uri = str(_text(entry, "jwks_uri", what))
    check_provider_url(jwks_uri, f"{what}['jwks_uri']", error=ConfigurationError)
    tenant = entry.get("tenant", default_tenant)
    try:
        check_tenant(tenant)
    except InvalidInput:
        raise ConfigurationError(f"{what}['tenant'] is not a valid tenant") from None
    return Transmitter(
        name=name,
        issuer=str(_text(entry, "issuer", what)),
        jwks_uri=jwks_uri,
        audience=str(_text(entry, "audience", what)),
        algorithms=_algorithms(entry, what),
        tenant=tenant,
        provider=_text(entry, "provider", what, required=False),
        max_age=_duration(entry, "max_age", what, timedelta(minutes=10), timedelta(days=1)),
        leeway=_duration(entry, "leeway", what, timedelta(seconds=60), timedelta(minutes=5)),
        **_delivery(entry, what),
    )


def transmitters(config: Mapping[str, Mapping[str, Any]], default_tenant: str) -> dict[str, Transmitter]:
    """Every configured transmitter, checked; two with one issuer are refused (which one a
    SET came from would be a guess)."""
    checked = {name: transmitter(name, entry, default_tenant) for name, entry in config.items()}
    issuers = [t.issuer for t in checked.values()]
    if len(set(issuers)) != len(issuers):
        raise ConfigurationError("AUTHFLOW_SSF_TRANSMITTERS: two transmitters share one issuer")
    return checked
