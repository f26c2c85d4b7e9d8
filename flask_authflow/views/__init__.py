"""The ready-made pages: the ``authflow_views`` blueprint (see :doc:`/views`).

Opt in with ``AUTHFLOW_VIEWS = True``, ``authflow.views.register(app)`` or
:func:`register_views`. Endpoints: ``authflow_views.login``, ``.factor``, ``.logout``,
``.step_up``, ``.account``, ``.change_password``, ``.revoke_session`` and
``.revoke_other_sessions``; templates ``authflow/{base,login,factor,step_up,account}.html``.
"""

from __future__ import annotations

from .blueprint import TEMPLATE_FOLDER, VIEWS_BLUEPRINT, build_blueprint, register_views
from .csrf import csrf_field_name, csrf_token, rotate_csrf_token

__all__ = [
    "TEMPLATE_FOLDER",
    "VIEWS_BLUEPRINT",
    "build_blueprint",
    "csrf_field_name",
    "csrf_token",
    "register_views",
    "rotate_csrf_token",
]
