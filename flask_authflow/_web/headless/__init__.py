"""The headless JSON API: versioned routes (``/auth/api/v1/...``) for single-page apps
(``browser`` clients: the session cookie, CSRF by header) and mobile apps (``app``
clients: ``Authorization: Session <token>``, no cookie), with typed JSON errors and an
OpenAPI 3.1 document built from the route declarations. See :doc:`/headless`.

How a flow adds its routes: :mod:`.routes` (the declaration) and :mod:`.blueprint`
(its ``FLOWS``).
"""

from flask_authflow._web.headless.blueprint import (
    API_BLUEPRINT,
    FLOWS,
    all_routes,
    api_document,
    register_api,
)
from flask_authflow._web.headless.clients import APP, BROWSER, CLIENT_HEADER, TOKEN_HEADER, TOKEN_SCHEME

__all__ = [
    "API_BLUEPRINT",
    "APP",
    "BROWSER",
    "CLIENT_HEADER",
    "FLOWS",
    "TOKEN_HEADER",
    "TOKEN_SCHEME",
    "all_routes",
    "api_document",
    "register_api",
]
