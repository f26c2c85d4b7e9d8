import pytest
from notes import create_app, db


@pytest.fixture
def app():
    app = create_app(
        {"TESTING": True, "SQLALCHEMY_DATABASE_URI": "sqlite://", "AUTHFLOW_SIGNING_KEY": "t" * 32}
    )
    yield app
    with app.app_context():
        db.drop_all()
