"""Teashop, after the migration: the Flask-Login app of ``../before`` on flask-authflow.

The integer-keyed ``User`` table stays, with its ids and the ``Order`` rows that point at
them; it gains one column, ``authflow_id``, the link to flask-authflow's account. The loader
finds a user by it; the ``user_created`` hook links an imported account to the existing row
by its e-mail address and makes a new row for any other new account. flask-authflow keeps the
passwords (the old Werkzeug hashes, imported, replaced by Argon2id at each user's next
sign-in). Start it with ``flask --app examples/flask_login_migration/after/teashop run``; the
steps that move a database over are in ``../README.rst`` (``flask teashop ...``).
"""

from __future__ import annotations

import csv
import os
import secrets
from urllib.parse import urlsplit

import click
from flask import Blueprint, Flask, redirect, render_template_string, request, url_for
from flask.cli import AppGroup
from flask.typing import ResponseReturnValue
from flask_sqlalchemy import SQLAlchemy

from flask_authflow import Authenticated, AuthFlow, UserMixin, current_user, login_required
from flask_authflow.login import NewAccount
from flask_authflow.storage import SqlAlchemyBackend

db = SQLAlchemy()
authflow = AuthFlow(backend=SqlAlchemyBackend(db))  # its tables join db.metadata
site = Blueprint("site", __name__)


class User(UserMixin, db.Model):  # type: ignore[name-defined,misc]
    id = db.Column(db.Integer, primary_key=True)
    email = db.Column(db.String(254), unique=True, nullable=False)
    name = db.Column(db.String(100), nullable=False)
    # The link to flask-authflow's account (its user id); the password lives there now.
    authflow_id = db.Column(db.String(64), unique=True, nullable=True)


class Order(db.Model):  # type: ignore[name-defined,misc]
    id = db.Column(db.Integer, primary_key=True)
    user_id = db.Column(db.Integer, db.ForeignKey(User.id), nullable=False)
    tea = db.Column(db.String(100), nullable=False)


def _user_by(**column: str) -> User | None:
    return db.session.execute(db.select(User).filter_by(**column)).scalar_one_or_none()


@authflow.user_loader
def load_user(tenant: str, user_id: str) -> User | None:
    return _user_by(authflow_id=user_id)


@authflow.user_created
def link_or_create(new: NewAccount) -> None:
    """An imported account (``flask authflow users import``: an operator's file of existing
    users) is linked to the row with its e-mail address; every other new account (sign-up,
    ``flask authflow create-user``, add_user) is a new person and gets a new row, so an
    address typed into a sign-up form never takes over an existing row."""
    email = new.account.identifier  # the address, as flask-authflow normalised it
    if new.source == "import":
        user = _user_by(email=email)
        if user is None or user.authflow_id is not None:
            raise LookupError(f"no unlinked teashop user has the address {email!r}")
        user.authflow_id = new.account.user_id
    else:
        db.session.add(User(email=email, name=email.partition("@")[0], authflow_id=new.account.user_id))


def add_user(email: str, name: str, password: str) -> User:
    account = authflow.accounts.create(email, password)  # the hook adds the row
    user = _user_by(authflow_id=account.user_id)
    assert user is not None
    user.name = name
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
    outcome = authflow.login.password(request.form.get("email", ""), request.form.get("password", ""))
    if not isinstance(outcome, Authenticated):
        return render_template_string(PAGE, form=True, error="Invalid e-mail or password."), 401
    return redirect(_safe_next(request.args.get("next")))


@site.post("/logout")
def logout() -> ResponseReturnValue:
    authflow.login.logout()
    return redirect(url_for("site.index"))


@site.get("/orders")
@login_required
def orders() -> ResponseReturnValue:
    mine = db.session.execute(db.select(Order).filter_by(user_id=current_user.id)).scalars().all()
    return render_template_string(PAGE, form=False, orders=mine)


@authflow.unauthorized_handler
def sign_in_first() -> ResponseReturnValue:
    """As Flask-Login's ``login_view``: every request without a sign-in goes to the form."""
    return redirect(url_for("site.login", next=request.full_path.rstrip("?")))


@click.command("add-user")
@click.argument("email")
@click.argument("name")
@click.password_option()
def add_user_command(email: str, name: str, password: str) -> None:
    """Add a user who signs in with EMAIL."""
    add_user(email, name, password)


# --- moving a database of ../before over (../README.rst, in this order) --------------------------

migration = AppGroup("teashop", help="Move a database of the Flask-Login teashop to flask-authflow.")


def _columns() -> set[str]:
    return {column["name"] for column in db.inspect(db.engine).get_columns("user")}


@migration.command("link-column")
def link_column() -> None:
    """Add User.authflow_id (unique) and create flask-authflow's tables."""
    with db.engine.begin() as connection:
        if "authflow_id" not in _columns():
            connection.execute(db.text('ALTER TABLE "user" ADD COLUMN authflow_id VARCHAR(64)'))
            connection.execute(db.text('CREATE UNIQUE INDEX ix_user_authflow_id ON "user" (authflow_id)'))
    db.create_all()  # flask-authflow's tables are in db.metadata; existing tables are left alone


@migration.command("export-users")
@click.argument("path", type=click.Path(dir_okay=False, writable=True))
def export_users(path: str) -> None:
    """Write the users not linked yet, with their Werkzeug hashes, as a CSV file for
    ``flask authflow users import``."""
    query = db.text('SELECT email, password_hash FROM "user" WHERE authflow_id IS NULL ORDER BY id')
    with db.engine.connect() as connection, open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["identifier", "hash"])
        writer.writerows(connection.execute(query).all())


@migration.command("drop-old-hashes")
def drop_old_hashes() -> None:
    """Drop User.password_hash once every user is linked (flask-authflow has the hashes)."""
    unlinked = db.session.execute(
        db.select(db.func.count()).select_from(User).where(User.authflow_id.is_(None))
    ).scalar_one()
    if unlinked:
        raise click.ClickException(f"{unlinked} user(s) are not linked yet: import them first")
    if "password_hash" in _columns():
        with db.engine.begin() as connection:
            connection.execute(db.text('ALTER TABLE "user" DROP COLUMN password_hash'))


def create_app(test_config: dict[str, object] | None = None) -> Flask:
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI="sqlite:///teashop.db",  # in the instance folder
        # Flask's SECRET_KEY is not needed any more: the session is flask-authflow's. Its key
        # comes from your secrets store; without one, a fresh key per start (sign-ins end then).
        AUTHFLOW_SIGNING_KEY=os.environ.get("TEASHOP_SIGNING_KEY") or secrets.token_urlsafe(48),
        # The imported Werkzeug hashes verify until each user has signed in once.
        AUTHFLOW_LEGACY_PASSWORD_SCHEMES=["werkzeug"],
    )
    app.config.update(test_config or {})
    db.init_app(app)
    authflow.init_app(app)
    app.register_blueprint(site)
    app.cli.add_command(add_user_command)
    app.cli.add_command(migration)
    return app
