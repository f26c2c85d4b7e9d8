"""The two public routes of the local issuer: discovery and the JWK set.

Use ``app.register_blueprint(idp.blueprint())`` on its own, or let the AuthFlow
extension mount it (it does whenever an issuer is configured); the standalone views
:func:`openid_configuration` and :func:`jwks`, mounted on routes of the app's own, find the
issuer the blueprint bound to the app either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from flask import Blueprint, Response, current_app, jsonify
from flask.sansio.blueprints import BlueprintSetupState

from flask_authflow._responses import package_headers
from flask_authflow.errors import ConfigurationError

if TYPE_CHECKING:  # the issuer imports this module to make its blueprint
    from flask_authflow.issuer._idp import LocalIdp

__all__ = ["current_issuer", "jwks", "make_blueprint", "openid_configuration"]

_APP_KEY: Final = "authflow_issuer"


def current_issuer() -> LocalIdp:
    """The LocalIdp bound to the current app by its blueprint (the extension registers it
    for a configured issuer)."""
    bound: LocalIdp | None = current_app.extensions.get(_APP_KEY)
    if bound is None:
        raise ConfigurationError(
            "no LocalIdp is configured for this app (register idp.blueprint() or AuthFlow)"
        )
    return bound


def _json(document: dict[str, Any], max_age: int) -> Response:
    response = jsonify(document)
    response.headers["Cache-Control"] = f"public, max-age={max_age}"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def openid_configuration() -> Response:
    """``GET /.well-known/openid-configuration``: RFC 8414 metadata with ``jwks_uri``.

    ``jwks_uri`` comes from the configured base URL, never from request headers.
    """
    issuer = current_issuer()
    return _json(issuer.discovery_document(), int(issuer.jwks_max_age.total_seconds()))


def jwks() -> Response:
    """``GET /jwks.json``: the public keys (current and historical)."""
    issuer = current_issuer()
    return _json(issuer.jwks(), int(issuer.jwks_max_age.total_seconds()))


def make_blueprint(idp: LocalIdp, url_prefix: str | None = None) -> Blueprint:
    """The ``authflow_issuer`` blueprint bound to ``idp``."""
    bp = Blueprint(_APP_KEY, __name__, url_prefix=url_prefix)
    bp.add_url_rule(
        "/.well-known/openid-configuration", "openid_configuration", openid_configuration, methods=["GET"]
    )
    bp.add_url_rule("/jwks.json", "jwks", jwks, methods=["GET"])
    bp.after_request(package_headers)

    def bind(state: BlueprintSetupState) -> None:
        existing = state.app.extensions.get(_APP_KEY)
        if existing is not None and existing is not idp:
            raise ConfigurationError("another LocalIdp is already bound to this app")
        state.app.extensions[_APP_KEY] = idp

    bp.record_once(bind)
    return bp
