"""Authorization with Cedar policies (the ``[cedar]`` extra): load the policies and their
schema at start-up, decide requests, default deny.

This feature knows nothing of Flask: :mod:`flask_authflow._web.authz` builds the principal
from the current user and session and answers denials.
"""

from __future__ import annotations

from flask_authflow.authz._entities import Entity, PolicyResource, Principal
from flask_authflow.authz._evaluator import Decision, Evaluator
from flask_authflow.authz._policies import load_policies
from flask_authflow.authz._roles import Roles
from flask_authflow.authz._settings import AuthzSettings

__all__ = [
    "AuthzSettings",
    "Decision",
    "Entity",
    "Evaluator",
    "PolicyResource",
    "Principal",
    "Roles",
    "load_policies",
]
