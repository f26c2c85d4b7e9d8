"""The package's mails are composed from templates compiled once per app, each app with its
own overrides."""

from __future__ import annotations

from pathlib import Path

from flask import Flask

from flask_authflow._web import outgoing_mail
from tests.appfactory import AppFactory


def _override(root: Path, subject: str) -> str:
    folder = root / "authflow" / "mail"
    folder.mkdir(parents=True)
    (folder / "factor_added_notice.txt").write_text(f"Subject: {subject}\nAdded: {{{{ kind }}}}\n")
    (folder / "factor_added_notice.html").write_text("<p>{{ kind }}</p>")
    return str(root)


def _compose(app: Flask) -> tuple[str, str, str]:
    with app.test_request_context("/"):
        return outgoing_mail.compose_mail("factor_added_notice", kind="TOTP")


def _template(app: Flask) -> object:
    with app.test_request_context("/"):
        return outgoing_mail._environment().get_template("authflow/mail/factor_added_notice.txt")


def test_a_mail_template_is_compiled_once_per_app(app_factory: AppFactory, tmp_path: Path) -> None:
    app = app_factory(template_folder=_override(tmp_path / "one", "First words"))
    first = _template(app)
    assert _compose(app)[0] == "First words"
    assert _compose(app)[1].strip() == "Added: TOTP"
    assert _template(app) is first  # the same compiled template, not one per mail


def test_each_app_keeps_its_own_overrides(app_factory: AppFactory, tmp_path: Path) -> None:
    one = app_factory(template_folder=_override(tmp_path / "one", "First words"))
    two = app_factory(template_folder=_override(tmp_path / "two", "Second words"))
    plain = app_factory(template_folder=None)
    assert _compose(one)[0] == "First words"
    assert _compose(two)[0] == "Second words"
    assert _compose(plain)[0] not in {"First words", "Second words", ""}  # the package's own
