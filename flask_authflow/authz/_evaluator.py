"""Deciding: put one request to the policies, answer a :class:`Decision`, log it.

Default deny: no policy, no permitting policy, a request of the wrong shape, an error
while evaluating any policy, a failure inside Cedar: each is a denial (``errors`` says
why), never an exception. Every decision is logged on ``flask_authflow.authz`` with the
ids of the policies that determined it (INFO; WARNING when there were errors).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flask_authflow.authz._entities import (
    BadRequest,
    Principal,
    action_entity,
    entity_json,
    resource_entity,
    to_cedar,
)
from flask_authflow.authz._policies import LoadedPolicies, cedar

__all__ = ["Decision", "Evaluator", "PreparedPrincipal", "log"]

log = logging.getLogger("flask_authflow.authz")


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to one request: ``allowed``, the ``policies`` that determined it (their
    ``@id`` or ``file:line``: the permits of an allow, the forbids of an explicit deny, none
    for a default deny) and the ``errors`` that made it a denial."""

    allowed: bool
    policies: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.allowed


@dataclass(slots=True)
class PreparedPrincipal:
    """A principal with its entities (itself and its roles) built once, for any number of
    decisions about it at one moment (one request): ``Evaluator.prepare``.

    The first decision hands Cedar the entities as they are (one parse, as a bare
    ``cedarpy.is_authorized`` call does); a second one parses them into a Cedar handle,
    kept for every later decision, which then adds only its resource.
    """

    principal: Principal
    #: the principal's uid in Cedar's JSON form.
    uid: dict[str, str]
    #: (type, id) of every entity in ``entity_list``.
    uids: frozenset[tuple[str, str]]
    #: the principal's entities in Cedar's JSON form (never changed once prepared).
    entity_list: tuple[dict[str, Any], ...]
    #: the parsed entities (a ``cedarpy.Entities`` handle), made by the second decision.
    entities: Any = None
    #: whether a decision was made with these entities.
    decided: bool = False

    def entities_for(self, target: dict[str, Any] | None) -> Any:
        """What Cedar gets for one decision: the entities plus ``target`` (a resource that
        is not among them), as a list the first time and through the parsed handle after."""
        if not self.decided:
            self.decided = True
            return [*self.entity_list, target] if target is not None else list(self.entity_list)
        if self.entities is None:
            self.entities = cedar().Entities.from_json_str(json.dumps(self.entity_list))
        if target is None:
            return self.entities
        return self.entities.with_added_json_str(json.dumps([target]))


class Evaluator:
    """Decides requests against ``policies`` (``None``: no policy, so every request is denied).

    The policy set is parsed once, when the policies are loaded; the principal's entities
    are built once per ``prepare`` (the web layer prepares once per request) and parsed by
    Cedar in the first decision, into a handle at the second.
    """

    def __init__(self, policies: LoadedPolicies | None) -> None:
        self.policies = policies

    def prepare(self, principal: Principal, now: datetime) -> PreparedPrincipal:
        """``principal``'s entities, built now (``now`` dates ``auth_age``).

        :raises BadRequest: the principal cannot be put to the policies (a wrong shape).
        """
        if not isinstance(principal, Principal):
            raise BadRequest("the principal must be a flask_authflow.authz.Principal")
        entities = principal.entities(now)
        uids = frozenset((e["uid"]["type"], e["uid"]["id"]) for e in entities)
        return PreparedPrincipal(principal, entities[0]["uid"], uids, tuple(entities))

    def decide(
        self,
        principal: Principal,
        action: Any,
        resource: Any,
        context: Mapping[str, Any] | None = None,
        *,
        now: datetime | None = None,
    ) -> Decision:
        """May ``principal`` do ``action`` (``"edit"`` or ``'Action::"edit"'``) on ``resource``?

        ``context`` holds request facts for ``context.*`` in the policies. ``now`` (default:
        the system clock) dates the session's ``auth_age``.
        """
        try:
            prepared = self.prepare(principal, now or datetime.now(UTC))
        except BadRequest as exc:
            return self._logged(principal, action, resource, Decision(False, (), (str(exc),)))
        return self.decide_prepared(prepared, action, resource, context)

    def decide_prepared(
        self,
        prepared: PreparedPrincipal,
        action: Any,
        resource: Any,
        context: Mapping[str, Any] | None = None,
    ) -> Decision:
        """:meth:`decide` for a principal :meth:`prepare` made: only the resource (when it is
        not the principal or one of its roles) is parsed for this decision."""
        principal = prepared.principal
        try:
            request, target = _request(prepared, action, resource, context)
        except BadRequest as exc:
            return self._logged(principal, action, resource, Decision(False, (), (str(exc),)))
        if self.policies is None:
            return self._logged(principal, action, resource, Decision(False))
        try:
            entities = prepared.entities_for(target)
            result = cedar().is_authorized(request, self.policies.policy_set, entities)
            reasons = tuple(self.policies.label(reason) for reason in result.diagnostics.reasons)
            errors = tuple(self.policies.relabel(str(error)) for error in result.diagnostics.errors)
            allowed = bool(result.allowed) and not errors
        except Exception as exc:  # noqa: BLE001 - Cedar failing is a denial, never a 500
            reasons, errors, allowed = (), (f"the policy engine failed: {exc}",), False
        return self._logged(principal, action, resource, Decision(allowed, reasons, errors))

    @staticmethod
    def _logged(principal: Principal, action: Any, resource: Any, decision: Decision) -> Decision:
        level = logging.WARNING if decision.errors else logging.INFO
        if log.isEnabledFor(level):
            log.log(
                level,
                "authz %s: principal=%s tenant=%s action=%.200r resource=%.200s policies=%s errors=%s",
                "allow" if decision.allowed else "deny",
                principal.id,
                principal.tenant,
                action,
                _describe(resource),
                ",".join(decision.policies) or "-",
                "; ".join(decision.errors) or "-",
            )
        return decision


def _describe(resource: Any) -> str:
    """The resource's uid for the log, control characters escaped (no forged log lines)."""
    try:
        return str(resource_entity(resource))[:200].encode("unicode_escape").decode("ascii")
    except Exception:  # noqa: BLE001 - only for the log line
        return f"<{type(resource).__name__}>"


def _request(
    prepared: PreparedPrincipal, action: Any, resource: Any, context: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Cedar's request for one decision and the resource's entity when the prepared
    entities lack it (:class:`BadRequest` for a wrong shape)."""
    if context is not None and not isinstance(context, Mapping):
        raise BadRequest(f"the context must be a mapping, got {type(context).__name__}")
    action_uid = action_entity(action)
    target = resource_entity(resource)
    missing = None if (target.type, target.id) in prepared.uids else entity_json(target)
    request = {
        "principal": prepared.uid,
        "action": action_uid.uid,
        "resource": target.uid,
        "context": to_cedar(dict(context or {}), "the context"),
    }
    return request, missing
