"""Settings are read from ``app.config`` once, at ``init_app``, and kept on the app's state:
requests never read them again (docs/config.rst says a change after ``init_app`` is not
supported, as with Flask-Login and Flask-SQLAlchemy). ``AUTHFLOW_WORKFLOW_EXPIRY`` is one of
the keys now (it was read from ``app.config`` at each workflow's start), checked at
``init_app``."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from flask_authflow import AuthFlow, get_state
from flask_authflow.errors import ConfigurationError
from flask_authflow.login._account_settings import AccountSettings


def test_account_settings_are_read_at_init_app_only(
    authflow_memory_app: Callable[..., Flask], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = authflow_memory_app(
        AUTHFLOW_VIEWS=True,
        AUTHFLOW_REGISTRATION=True,
        AUTHFLOW_PASSWORD_RESET=False,
        AUTHFLOW_EXTERNAL_URL="http://localhost",
        AUTHFLOW_MAIL_OUTBOX=str(tmp_path / "outbox"),
    )
    accounts = get_state(app).config.accounts
    assert (accounts.registration, accounts.password_reset) == (True, False)

    def refuse(*args: Any, **kwargs: Any) -> AccountSettings:
        raise AssertionError("AccountSettings read again after init_app")

    monkeypatch.setattr(AccountSettings, "from_config", classmethod(refuse))
    app.config.update(AUTHFLOW_REGISTRATION=False, AUTHFLOW_PASSWORD_RESET=True)  # not supported: no effect
    client = app.test_client()
    assert client.get("/signup").status_code == 200
    assert client.get("/password/forgot").status_code == 404
    assert get_state(app).config.accounts is accounts


def _app(**config: Any) -> Flask:
    app = Flask(__name__)
    app.config.update(
        TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_SESSION_STORE="memory", **config
    )
    return app


def test_workflow_expiry_is_read_at_init_app() -> None:
    app = _app(AUTHFLOW_WORKFLOW_EXPIRY={"signup": 60, "custom": timedelta(hours=2)})
    AuthFlow(app)
    expiry = get_state(app).config.login.workflow_expiry
    assert dict(expiry) == {"signup": timedelta(seconds=60), "custom": timedelta(hours=2)}


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (60, "must map workflow kinds to seconds"),
        ({1: 60}, "must map workflow kinds to seconds"),
        ({"signup": "soon"}, r"AUTHFLOW_WORKFLOW_EXPIRY\['signup'\] must be a timedelta"),
        ({"signup": 0}, r"AUTHFLOW_WORKFLOW_EXPIRY\['signup'\] must be positive"),
        ({"custom": timedelta(days=31)}, r"AUTHFLOW_WORKFLOW_EXPIRY\['custom'\] may not exceed 30 days"),
    ],
)
def test_a_bad_workflow_expiry_is_refused_at_init_app(value: Any, match: str) -> None:
    app = _app(AUTHFLOW_WORKFLOW_EXPIRY=value)
    with pytest.raises(ConfigurationError, match=match):
        AuthFlow(app)
    assert "authflow" not in app.extensions
