"""Notes: a small app built only from flask-authflow's README and docs.

A Flask-SQLAlchemy ``User`` model keyed by flask-authflow's user id, the factory pattern,
the ready-made views (``AUTHFLOW_VIEWS``), ``current_user`` in a template, and a custom
401 page. Its tests (``tests/``) use the pytest plugin's fixtures.
"""

from __future__ import annotations

import os

from flask import Flask, render_template
from flask_sqlalchemy import SQLAlchemy

from flask_authflow import AuthFlow, UserMixin, current_user, login_required
from flask_authflow.storage._sql.backend import SqlAlchemyBackend

db = SQLAlchemy()
authflow = AuthFlow(backend=SqlAlchemyBackend(db))


class User(UserMixin, db.Model):  # type: ignore[name-defined,misc]
    """The application's user: flask-authflow keeps the password, we keep the rest."""

    id = db.Column(db.String(64), primary_key=True)  # flask-authflow's user id
    display_name = db.Column(db.String(100), nullable=False)


class Note(db.Model):  # type: ignore[name-defined,misc]
    id = db.Column(db.Integer, primary_key=True)
    owner_id = db.Column(db.String(64), db.ForeignKey("user.id"), nullable=False)
    text = db.Column(db.String(500), nullable=False)


@authflow.user_loader
def load_user(tenant: str, user_id: str) -> User | None:
    return db.session.get(User, user_id)


def add_person(identifier: str, password: str, display_name: str) -> User:
    """Create the flask-authflow account and our User row with the same id."""
    account = authflow.accounts.create(identifier, password)
    user = User(id=account.user_id, display_name=display_name)
    db.session.add(user)
    db.session.commit()
    return user


def create_app(test_config: dict[str, object] | None = None) -> Flask:
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI="sqlite:///notes.db",  # in the instance folder
        AUTHFLOW_SIGNING_KEY=os.environ.get("NOTES_SIGNING_KEY"),
        AUTHFLOW_VIEWS=True,  # /login, /logout, /step-up, /account
    )
    app.config.update(test_config or {})
    db.init_app(app)
    authflow.init_app(app)
    with app.app_context():
        db.create_all()

    @app.get("/")
    @login_required
    def index() -> str:
        notes = Note.query.filter_by(owner_id=current_user.id).all()
        return render_template("index.html", notes=notes)

    @app.errorhandler(401)
    def unauthorized(error: object) -> tuple[str, int]:
        return render_template("401.html"), 401

    return app
