import pytest
from notes import create_app, db


@pytest.fixture
def app():
    app = create_app(
        {
            "TESTING": True,
            "SQLALCHEMY_DATABASE_URI": "sqlite://",
            "AUTHFLOW_SIGNING_KEY": "t" * 32,
            # cheap Argon2id for tests (allowed with TESTING only)
            "AUTHFLOW_ARGON2_TIME_COST": 1,
            "AUTHFLOW_ARGON2_MEMORY_COST": 8,
            "AUTHFLOW_ARGON2_PARALLELISM": 1,
        }
    )
    yield app
    with app.app_context():
        db.drop_all()
