"""API authentication: personal API tokens (``afp_...``) and what verifies them.

The web layer (:mod:`flask_authflow._web.api_auth`) reads ``Authorization: Bearer`` on the
views that allow it (``login_required(api=True)``) and the application's
``@authflow.request_loader``; this feature owns the token format
(:mod:`~flask_authflow.api_auth._tokens`), the settings and the service.
"""

from __future__ import annotations

from flask_authflow.api_auth._user_tokens import Tokens

__all__ = [
    "Tokens",
]
