"""What a policy decision is about: the principal, entities and their Cedar JSON form.

The principal is a ``User`` entity whose parents are its ``Role`` entities (so both
``principal in Role::"editor"`` and ``principal.roles.contains("editor")`` work) and whose
attributes are ``id``, ``tenant``, ``roles``, ``session`` (``authenticated_at`` and
``auth_age`` in seconds, ``factors``, ``phishing_resistant``, ``device_trusted``) and the
application's own. ``phishing_resistant`` is true when this sign-in (or a step-up since)
passed a WebAuthn factor: a security key, or a passkey that signed in alone (``factors``
then holds ``"passkey"``), which a passkey-only account always does.
A resource is an entity uid (``'Document::"42"'``), an :class:`Entity`, or any object with
a ``policy_entity()`` method returning one (:class:`PolicyResource`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "PHISHING_RESISTANT_FACTORS",
    "PRINCIPAL_TYPE",
    "RESERVED_ATTRIBUTES",
    "ROLE_TYPE",
    "BadRequest",
    "Entity",
    "PolicyResource",
    "Principal",
    "action_entity",
    "parse_uid",
    "resource_entity",
    "to_cedar",
]

PRINCIPAL_TYPE = "User"
ROLE_TYPE = "Role"
ACTION_TYPE = "Action"
#: Principal attributes the library sets; the application's attributes may not use them.
RESERVED_ATTRIBUTES = frozenset({"id", "tenant", "roles", "session"})
#: The factors passed that make a session phishing-resistant: a WebAuthn assertion, as a
#: second factor (``webauthn``) or as a passkey sign-in (``passkey``); both are bound to
#: the site's origin by the browser.
PHISHING_RESISTANT_FACTORS = frozenset({"webauthn", "passkey"})
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_UID = re.compile(rf'^({_NAME}(?:::{_NAME})*)::"((?:[^"\\]|\\["\\])*)"$')
_MAX_ID = 1024
_LONG = (-(2**63), 2**63 - 1)


class BadRequest(ValueError):
    """The request cannot be put to the policies (a wrong type or shape); the decision is a denial."""


@dataclass(frozen=True, slots=True)
class Entity:
    """A Cedar entity: ``Type::"id"`` with attributes and parent uids (``'Folder::"7"'``)."""

    type: str
    id: str
    attributes: Mapping[str, Any] = field(default_factory=dict)
    parents: tuple[str, ...] = ()

    @property
    def uid(self) -> dict[str, str]:
        return {"type": self.type, "id": self.id}

    def __str__(self) -> str:
        escaped = self.id.replace("\\", "\\\\").replace('"', '\\"')
        return f'{self.type}::"{escaped}"'


@runtime_checkable
class PolicyResource(Protocol):
    """An application object that policies can be asked about: it describes itself as an
    :class:`Entity` (type, id, attributes such as ``tenant``, parents)."""

    def policy_entity(self) -> Entity: ...


@dataclass(frozen=True, slots=True)
class Principal:
    """The signed-in user as the policies see them."""

    id: str
    tenant: str
    roles: frozenset[str] = frozenset()
    attributes: Mapping[str, Any] = field(default_factory=dict)
    authenticated_at: datetime | None = None
    factors: tuple[str, ...] = ()
    #: Whether this browser's device is one the user trusts (see the manual's "Devices" page).
    device_trusted: bool = False

    def entities(self, now: datetime) -> list[dict[str, Any]]:
        """The principal's entity and its role entities, in Cedar's JSON form."""
        if not all(isinstance(role, str) for role in self.roles):
            raise BadRequest("roles must be strings")
        reserved = RESERVED_ATTRIBUTES & set(self.attributes)
        if reserved:
            raise BadRequest(f"principal attributes may not be named {sorted(reserved)}")
        session: dict[str, Any] = {
            "factors": list(self.factors),
            "phishing_resistant": bool(PHISHING_RESISTANT_FACTORS & set(self.factors)),
            "device_trusted": self.device_trusted,
        }
        if self.authenticated_at is not None:
            session["authenticated_at"] = int(self.authenticated_at.timestamp())
            session["auth_age"] = max(0, int((now - self.authenticated_at).total_seconds()))
        attributes = {
            **to_cedar(dict(self.attributes), "principal attributes"),
            "id": self.id,
            "tenant": self.tenant,
            "roles": sorted(self.roles),
            "session": session,
        }
        roles = [{"type": ROLE_TYPE, "id": role} for role in sorted(self.roles)]
        principal = {
            "uid": {"type": PRINCIPAL_TYPE, "id": self.id},
            "attrs": attributes,
            "parents": roles,
        }
        return [principal, *({"uid": role, "attrs": {}, "parents": []} for role in roles)]


def parse_uid(text: Any, what: str) -> Entity:
    """The entity named by ``'Type::"id"'``."""
    if not isinstance(text, str) or len(text) > _MAX_ID:
        raise BadRequest(f"{what} must be an entity uid such as 'Document::\"42\"'")
    match = _UID.match(text)
    if match is None:
        raise BadRequest(f"{what} must be an entity uid such as 'Document::\"42\"', got {text[:80]!r}")
    raw = match.group(2)
    return Entity(match.group(1), re.sub(r'\\(["\\])', r"\1", raw))


def action_entity(action: Any) -> Entity:
    """``"edit"`` is ``Action::"edit"``; a full uid (``'Docs::Action::"edit"'``) is taken as it is."""
    if not isinstance(action, str) or not action or len(action) > _MAX_ID:
        raise BadRequest(f"the action must be a non-empty string, got {type(action).__name__}")
    if "::" in action:
        entity = parse_uid(action, "the action")
        if entity.type.split("::")[-1] != ACTION_TYPE:
            raise BadRequest(f"the action's type must be Action, got {entity.type}")
        return entity
    return Entity(ACTION_TYPE, action)


def resource_entity(resource: Any) -> Entity:
    """The resource as an :class:`Entity` (see the module docstring for what it may be)."""
    if isinstance(resource, Entity):
        entity = resource
    elif isinstance(resource, str):
        entity = parse_uid(resource, "the resource")
    elif isinstance(resource, PolicyResource):
        entity = resource.policy_entity()
    else:
        raise BadRequest(
            "the resource must be an entity uid ('Document::\"42\"'), an Entity or an object with "
            f"policy_entity(), got {type(resource).__name__}"
        )
    if not isinstance(entity, Entity) or not isinstance(entity.type, str) or not isinstance(entity.id, str):
        raise BadRequest("policy_entity() must return a flask_authflow.authz.Entity")
    if not _UID.match(f'{entity.type}::""') or len(entity.id) > _MAX_ID:
        raise BadRequest(f"the resource's entity type {entity.type!r} is not a Cedar name")
    return entity


def entity_json(entity: Entity) -> dict[str, Any]:
    """``entity`` in Cedar's JSON entity form."""
    if not isinstance(entity.attributes, Mapping):
        raise BadRequest("an entity's attributes must be a mapping")
    return {
        "uid": entity.uid,
        "attrs": to_cedar(dict(entity.attributes), f"{entity} attributes"),
        "parents": [parse_uid(parent, f"a parent of {entity}").uid for parent in entity.parents],
    }


def to_cedar(value: Any, where: str) -> Any:
    """``value`` as a Cedar JSON value: booleans, 64-bit integers, strings, sets (lists,
    tuples, sets), records (mappings with string keys), entities and aware datetimes
    (seconds since the epoch). Anything else is a :class:`BadRequest`."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not _LONG[0] <= value <= _LONG[1]:
            raise BadRequest(f"{where}: {value} does not fit a Cedar Long")
        return value
    if isinstance(value, Entity):
        return {"__entity": value.uid}
    if isinstance(value, datetime) and value.tzinfo is not None:
        return int(value.timestamp())
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise BadRequest(f"{where}: record keys must be strings")
        return {key: to_cedar(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [to_cedar(item, where) for item in items]
    raise BadRequest(f"{where}: a {type(value).__name__} cannot be a Cedar value")
