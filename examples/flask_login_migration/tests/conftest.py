import os
import tempfile

import pytest
from teashop import add_order, add_user, create_app, db

PASSWORD = "correct horse battery staple"


@pytest.fixture
def app():
    # A database file of its own per test, as Flask's tutorial makes one.
    db_fd, db_path = tempfile.mkstemp(suffix=".db")
    app = create_app({"TESTING": True, "SQLALCHEMY_DATABASE_URI": f"sqlite:///{db_path}"})
    with app.app_context():
        db.create_all()
        alice = add_user("alice@example.com", "Alice", PASSWORD)
        add_order(alice, "Assam")
        bob = add_user("Bob@Example.com", "Bob", PASSWORD + " too")
        add_order(bob, "Sencha")
    yield app
    with app.app_context():
        db.engine.dispose()
    os.close(db_fd)
    os.unlink(db_path)


@pytest.fixture
def client(app):
    return app.test_client()


def sign_in(client, email, password=PASSWORD, next_page=None):
    path = "/login" if next_page is None else f"/login?next={next_page}"
    return client.post(path, data={"email": email, "password": password})
