"""Teashop, before the migration: a Flask-Login app as many are written.

An integer-keyed ``User`` table (``Order`` rows point at it), Werkzeug password hashes, its
own sign-in and sign-out views, ``@login_required`` pages. Start it with
``flask --app examples/flask_login_migration/before/teashop run``; ``flask add-user`` makes
a user. ``../after/teashop`` is the same app on flask-authflow (see ``../README.rst``).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import click
from flask import Blueprint, Flask, redirect, render_template_string, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import LoginManager, UserMixin, current_user, login_required, login_user, logout_user
from flask_sqlalchemy import SQLAlchemy
from werkzeug.security import check_password_hash, generate_password_hash

db = SQLAlchemy()
login_manager = LoginManager()
login_manager.login_view = "site.login"
site = Blueprint("site", __name__)


class User(UserMixin, db.Model):  # type: ignore[name-defined,misc]
    id = db.Column(db.Integer, primary_key=True)
    email = db.Column(db.String(254), unique=True, nullable=False)
    name = db.Column(db.String(100), nullable=False)
    password_hash = db.Column(db.String(256), nullable=False)


class Order(db.Model):  # type: ignore[name-defined,misc]
    id = db.Column(db.Integer, primary_key=True)
    user_id = db.Column(db.Integer, db.ForeignKey(User.id), nullable=False)
    tea = db.Column(db.String(100), nullable=False)


@login_manager.user_loader
def load_user(user_id: str) -> User | None:
    return db.session.get(User, int(user_id))


def add_user(email: str, name: str, password: str) -> User:
    user = User(email=email.lower(), name=name, password_hash=generate_password_hash(password))
    db.session.add(user)
    db.session.commit()
    return user


def add_order(user: User, tea: str) -> Order:
    order = Order(user_id=user.id, tea=tea)
    db.session.add(order)
    db.session.commit()
    return order


def _safe_next(target: str | None) -> str:
    parts = urlsplit(target or "")
    if target and target.startswith("/") and not target.startswith("//") and not parts.netloc:
        return target
    return url_for("site.index")


PAGE = """<!doctype html><title>Teashop</title>
{% if current_user.is_authenticated %}<p>Hello, {{ current_user.name }}!</p>
<form method="post" action="{{ url_for('site.logout') }}"><button>Sign out</button></form>
{% else %}<p>Welcome, guest. <a href="{{ url_for('site.login') }}">Sign in</a></p>{% endif %}
{% if error %}<p class="error">{{ error }}</p>{% endif %}
{% if orders is defined %}<ul>{% for order in orders %}<li>{{ order.tea }}</li>{% endfor %}</ul>{% endif %}
{% if form %}<form method="post"><input name="email"><input name="password" type="password">
<button>Sign in</button></form>{% endif %}"""


@site.get("/")
def index() -> ResponseReturnValue:
    return render_template_string(PAGE, form=False)


@site.route("/login", methods=["GET", "POST"])
def login() -> ResponseReturnValue:
    if request.method == "GET":
        return render_template_string(PAGE, form=True)
    user = db.session.execute(
        db.select(User).filter_by(email=request.form.get("email", "").lower())
    ).scalar_one_or_none()
    if user is None or not check_password_hash(user.password_hash, request.form.get("password", "")):
        return render_template_string(PAGE, form=True, error="Invalid e-mail or password."), 401
    login_user(user)
    return redirect(_safe_next(request.args.get("next")))


@site.post("/logout")
def logout() -> ResponseReturnValue:
    logout_user()
    return redirect(url_for("site.index"))


@site.get("/orders")
@login_required
def orders() -> ResponseReturnValue:
    mine = db.session.execute(db.select(Order).filter_by(user_id=current_user.id)).scalars().all()
    return render_template_string(PAGE, form=False, orders=mine)


@click.command("add-user")
@click.argument("email")
@click.argument("name")
@click.password_option()
def add_user_command(email: str, name: str, password: str) -> None:
    """Add a user who signs in with EMAIL."""
    add_user(email, name, password)


def create_app(test_config: dict[str, object] | None = None) -> Flask:
    app = Flask(__name__)
    app.config.update(
        SECRET_KEY=os.environ.get("TEASHOP_SECRET_KEY", "dev"),
        SQLALCHEMY_DATABASE_URI="sqlite:///teashop.db",  # in the instance folder
    )
    app.config.update(test_config or {})
    db.init_app(app)
    login_manager.init_app(app)
    app.register_blueprint(site)
    app.cli.add_command(add_user_command)
    return app
