"""The ready-made pages: the ``authflow_views`` blueprint (see :doc:`/views`).

Opt in with ``AUTHFLOW_VIEWS = True``, ``authflow.views.register(app)`` or
:func:`register_views`. Endpoints: ``authflow_views.login``, ``.factor``,
``.factor_send``, ``.factor_webauthn_options``, ``.passkey_options``, ``.passkey_login``,
``.step_up``, ``.account``, ``.change_password``, ``.revoke_session``,
``.revoke_other_sessions``, and the account's sign-in methods: ``.factors``,
``.enroll_totp``, ``.confirm_totp``, ``.generate_recovery_codes``,
``.confirm_recovery_codes``, ``.enroll_email``, ``.confirm_email``,
``.webauthn_enroll_options``, ``.confirm_webauthn`` and ``.remove_factor``. Templates
``authflow/{base,login,factor,factor_methods,step_up,account,factors,enroll_totp,recovery_codes,
enroll_email,webauthn_script}.html``.

Logging out is the app's one logout route, ``authflow_logout.logout`` (``POST /auth/logout``,
registered by ``AuthFlow(app)``; see :mod:`.logout`), which the account page's "Sign out"
posts to; only when ``AUTHFLOW_LOGOUT_URL_PREFIX`` is ``None`` do the views register that
same view as ``.logout`` at their ``/logout``.
"""

from __future__ import annotations

from flask_authflow._web.csrf import csrf_field_name, csrf_token, rotate_csrf_token
from flask_authflow._web.views.blueprint import (
    TEMPLATE_FOLDER,
    VIEWS_BLUEPRINT,
    build_blueprint,
    register_views,
)

__all__ = [
    "TEMPLATE_FOLDER",
    "VIEWS_BLUEPRINT",
    "build_blueprint",
    "csrf_field_name",
    "csrf_token",
    "register_views",
    "rotate_csrf_token",
]
