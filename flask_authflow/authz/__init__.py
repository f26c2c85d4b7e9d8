"""Authorization with Cedar policies (the ``[cedar]`` extra): load the policies and their
schema at start-up, decide requests, default deny.

This feature knows nothing of Flask: :mod:`flask_authflow.web.authz` builds the principal
from the current user and session and answers denials.
"""

from __future__ import annotations

from .entities import Entity, PolicyResource, Principal
from .evaluator import Decision, Evaluator
from .policies import LoadedPolicies, load_policies
from .roles import Roles
from .settings import AuthzSettings

__all__ = [
    "AuthzSettings",
    "Decision",
    "Entity",
    "Evaluator",
    "LoadedPolicies",
    "PolicyResource",
    "Principal",
    "Roles",
    "load_policies",
]
