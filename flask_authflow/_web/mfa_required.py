"""``AUTHFLOW_MFA_REQUIRED`` in an app: the requirement composed at ``init_app`` (the roles
in the store, or the Cedar policies), and what a held session meets on a protected route.

A user who must have a second factor and has none is held in the required enrollment
after the first factor of any sign-in (:mod:`flask_authflow.login._required_enrollment`);
the rule itself is :mod:`flask_authflow.login._mfa_policy`.
"""

from __future__ import annotations

from typing import Any

from flask import Flask

from flask_authflow._core.factors import Enrollment
from flask_authflow._outcomes import FactorKind
from flask_authflow._web.authz import AUTHZ_KEY
from flask_authflow._web.current_user import load_user
from flask_authflow._web.state import AuthFlowState, get_state
from flask_authflow.authz import Entity, Evaluator, Principal
from flask_authflow.authz._entities import PRINCIPAL_TYPE, BadRequest, action_entity
from flask_authflow.errors import ConfigurationError
from flask_authflow.login._mfa_policy import Decide, MfaRequiredSettings, MfaRequirement

__all__ = ["install_mfa_requirement"]


def install_mfa_requirement(app: Flask, state: AuthFlowState) -> None:
    """Give the login service the app's requirement (after ``authz.install``: a Cedar action
    is checked against the loaded policies).

    :raises ConfigurationError: the policies do not name the action, or no factor of the
        counting kinds can be set up on this app."""
    settings = MfaRequiredSettings.from_config(app.config)
    action = settings.action
    policy = _policy(app, action) if action is not None else None
    requirement = MfaRequirement.of(settings, state.backend.roles_of, policy)
    if requirement is not None:
        service = state.service
        usable = [k for k in requirement.kinds if isinstance(service.factor(FactorKind(k)), Enrollment)]
        if not usable:
            raise ConfigurationError(
                "AUTHFLOW_MFA_REQUIRED: no factor of AUTHFLOW_MFA_REQUIRED_KINDS "
                f"({', '.join(requirement.kinds)}) can be set up on this app; for "
                "'phishing_resistant' set AUTHFLOW_WEBAUTHN_RP_ID and AUTHFLOW_WEBAUTHN_ORIGINS, "
                "or count other kinds"
            )
    state.service.mfa_requirement = requirement


def _named_actions(evaluator: Evaluator) -> set[tuple[str, str]]:
    """``(type, id)`` of every action a policy names in its scope (``==`` or ``in``)."""
    policies = evaluator.policies
    if policies is None:
        return set()
    from cedarpy import pst  # loaded policies mean the optional cedarpy is installed

    named: set[tuple[str, str]] = set()
    for policy in policies.policy_set.to_pst().static_policies.values():
        scope = policy.action
        if isinstance(scope, pst.ActionEq):
            uids: tuple[Any, ...] = (scope.entity,)
        elif isinstance(scope, pst.ActionIn):
            uids = tuple(scope.entities)
        else:  # any action: names none
            continue
        named.update(("::".join((*uid.type.namespace, uid.type.basename)), uid.id) for uid in uids)
    return named


def _policy(app: Flask, action: str) -> Decide:
    """``decide`` for a Cedar action: required when the policies permit ``action`` on the user
    (a decision with errors counts as required: fail closed)."""
    try:
        entity = action_entity(action)
    except BadRequest as exc:
        raise ConfigurationError(f"AUTHFLOW_MFA_REQUIRED: {exc}") from None
    authz = app.extensions[AUTHZ_KEY]
    evaluator: Evaluator = authz.evaluator
    if (entity.type, entity.id) not in _named_actions(evaluator):
        raise ConfigurationError(
            f"AUTHFLOW_MFA_REQUIRED names the Cedar action {entity}, which no policy of "
            f'AUTHFLOW_AUTHZ_POLICIES names: add one such as permit(principal in Role::"admin", '
            f"action == {entity}, resource); or set AUTHFLOW_MFA_REQUIRED to True or a list of roles"
        )

    def decide(tenant: str, user_id: str, passed: tuple[str, ...]) -> bool:
        state = get_state(app)
        hooks = authz.hooks
        user: Any = load_user(state, tenant, user_id) if hooks.roles or hooks.attributes else None
        if hooks.roles is not None and user is not None:
            roles = frozenset(hooks.roles(user))
        else:
            roles = frozenset(state.backend.roles_of(tenant, user_id))
        attributes = dict(hooks.attributes(user)) if hooks.attributes is not None and user is not None else {}
        principal = Principal(id=user_id, tenant=tenant, roles=roles, attributes=attributes, factors=passed)
        resource = Entity(PRINCIPAL_TYPE, user_id)
        decision = evaluator.decide(principal, str(entity), resource, now=state.clock.now())
        return decision.allowed or bool(decision.errors)

    return decide
