from datetime import timedelta

import pytest
from notes import Note, add_person, db


def test_guests_get_the_custom_401_page(authflow_client):
    response = authflow_client.get("/", headers={"Accept": "application/json"})
    assert response.status_code == 401
    assert "Please sign in to read your notes" in response.text


def test_signed_in_user_sees_their_name_and_notes(app, login_client):
    with app.app_context():
        ada = add_person("ada", "analytical engine notes", "Ada Lovelace")
        db.session.add(Note(owner_id=ada.id, text="first program"))
        db.session.commit()
    client = login_client("ada", password="analytical engine notes")
    page = client.get("/")
    assert page.status_code == 200
    assert "Notes of Ada Lovelace" in page.text and "first program" in page.text


@pytest.mark.authflow_wired  # the plugin passes mock_clock (and its fast hasher) to init_app
def test_the_session_expires_with_the_mock_clock(app, login_client, mock_clock):
    with app.app_context():
        add_person("grace", "compiler debugging moth", "Grace Hopper")
    client = login_client("grace", password="compiler debugging moth")
    assert client.get("/").status_code == 200
    mock_clock.advance(timedelta(hours=13))
    assert client.get("/").status_code == 401
