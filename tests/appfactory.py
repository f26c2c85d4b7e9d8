"""The suite's one base configuration and one app factory.

``make_app(**overrides)`` returns a Flask app on :data:`BASE_CONFIG` (plus a fresh signing
key) with flask-authflow initialised on it; a test states what differs from the base as
keyword arguments, at the call site. The ``app_factory`` fixture (``tests/conftest.py``) is
``make_app`` bound to the test's instance folder (under ``tmp_path``), ``mock_clock`` and
fast hasher; any of them can be overridden per call.

With the plugin's wiring on (the default), an app built without ``backend=`` and
``session_store=`` runs on in-memory stores; tests of the SQL stores are marked
``@pytest.mark.authflow_stores("sql")`` and configure ``AUTHFLOW_DATABASE_URL``.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Protocol

from flask import Flask

from flask_authflow import AuthFlow
from flask_authflow.testing import Outbox

__all__ = ["BASE_CONFIG", "AppFactory", "base_app", "make_app"]

#: What every app of the suite shares. ``AUTHFLOW_SIGNING_KEY`` is added per app (a fresh key).
BASE_CONFIG: Final[Mapping[str, Any]] = MappingProxyType({"TESTING": True})


def base_app(
    *,
    import_name: str = __name__,
    instance_path: Path | str | None = None,
    template_folder: str | None = "templates",
    **config: Any,
) -> Flask:
    """A Flask app on :data:`BASE_CONFIG` and ``config``, flask-authflow not yet initialised
    (for tests of ``init_app`` itself)."""
    app = Flask(
        import_name,
        instance_path=str(instance_path) if instance_path is not None else None,
        template_folder=template_folder,
    )
    app.config.update(BASE_CONFIG)
    app.config["AUTHFLOW_SIGNING_KEY"] = secrets.token_bytes(32)
    app.config.update(config)
    return app


def make_app(
    *,
    authflow: AuthFlow | None = None,
    clock: Any = None,
    hasher: Any = None,
    backend: Any = None,
    session_store: Any = None,
    http_client: Any = None,
    mail_sender: Any = None,
    import_name: str = __name__,
    instance_path: Path | str | None = None,
    template_folder: str | None = "templates",
    **config: Any,
) -> Flask:
    """:func:`base_app` with flask-authflow initialised (by ``authflow``, if given, so the
    test can keep the extension); the adapters go to ``init_app``."""
    app = base_app(
        import_name=import_name, instance_path=instance_path, template_folder=template_folder, **config
    )
    extension = authflow if authflow is not None else AuthFlow()
    extension.init_app(
        app,
        clock=clock,
        hasher=hasher,
        backend=backend,
        session_store=session_store,
        http_client=http_client,
        mail_sender=mail_sender,
    )
    return app


class AppFactory(Protocol):
    """:func:`make_app` bound to a test's folder, clock and hasher (the ``app_factory`` fixture)."""

    def __call__(self, **overrides: Any) -> Flask: ...


class HtmlOutbox(Outbox):
    """An outbox that also keeps each mail's HTML part, as the SMTP sender sends it."""

    def __init__(self) -> None:
        super().__init__()
        self.html: list[str] = []

    def send_html(self, to: str, subject: str, body: str, html: str) -> None:
        self.send(to, subject, body)
        self.html.append(html)
