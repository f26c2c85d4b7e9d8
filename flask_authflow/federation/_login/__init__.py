"""The federated login ceremony and back-channel logout: :class:`FederationService`.

``begin`` stores a :class:`~flask_authflow.federation._ceremony.Ceremony` in the session
and returns the authorize URL; ``finish`` runs the callback's steps (state, token exchange,
ID-token checks, optional userinfo), maps the validated claims to a local user (the
application's ``claims_mapper``, or the default one), links the provider identity to
that user and establishes the session through the same path as ``login_user``
(audit row with method ``oidc:<provider>``, ``login_succeeded``, id rotation). On any
failure nothing transitions and the ceremony is gone.

Cut by flow, as :mod:`flask_authflow.login` is (all modules private; the names are
imported from here): ``_service`` (the thin service and its one commit), ``_services``
(what the flows use of it), ``_begin``, ``_finish`` (the callback), ``_callback`` (its
checks, shared with linking and the native hand-over), ``_identity`` and
``_provisioning`` (who signs in), ``_sign_in`` (the common end), ``_native``, ``_linking``
and ``_logout``.
"""

from __future__ import annotations

from flask_authflow.federation._login._begin import OAuthLoginOptions
from flask_authflow.federation._login._identity import (
    ClaimsMapper,
    FederatedIdentity,
    default_claims_mapper,
    email_link_key,
    email_linked_user,
)
from flask_authflow.federation._login._service import FederationService
from flask_authflow.federation._login._sign_in import FederatedLogin

__all__ = [
    "ClaimsMapper",
    "FederatedIdentity",
    "FederatedLogin",
    "FederationService",
    "OAuthLoginOptions",
    "default_claims_mapper",
    "email_link_key",
    "email_linked_user",
]
