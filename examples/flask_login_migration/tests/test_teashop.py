from urllib.parse import parse_qs, urlsplit

from conftest import PASSWORD, sign_in


def test_a_guest_is_welcomed(client):
    page = client.get("/")
    assert page.status_code == 200
    assert "Welcome, guest." in page.text


def test_orders_need_a_sign_in(client):
    response = client.get("/orders")
    assert response.status_code == 302
    target = urlsplit(response.location)
    assert target.path == "/login"
    assert parse_qs(target.query)["next"][0].startswith("/orders")


def test_signing_in_greets_the_user_and_shows_only_their_orders(client):
    response = sign_in(client, "alice@example.com")
    assert response.status_code == 302 and urlsplit(response.location).path == "/"
    assert "Hello, Alice!" in client.get("/").text
    orders = client.get("/orders")
    assert orders.status_code == 200
    assert "Assam" in orders.text and "Sencha" not in orders.text


def test_the_email_is_not_case_sensitive(client):
    assert sign_in(client, "BOB@example.com", PASSWORD + " too").status_code == 302
    assert "Sencha" in client.get("/orders").text


def test_a_wrong_password_is_refused(client):
    response = sign_in(client, "alice@example.com", "not the password at all")
    assert response.status_code == 401
    assert "Invalid e-mail or password." in response.text
    assert client.get("/orders").status_code == 302


def test_an_unknown_user_gets_the_same_answer(client):
    response = sign_in(client, "mallory@example.com")
    assert response.status_code == 401
    assert "Invalid e-mail or password." in response.text


def test_next_is_followed_on_this_site_only(client):
    assert urlsplit(sign_in(client, "alice@example.com", next_page="/orders").location).path == "/orders"
    other = client.application.test_client()
    assert urlsplit(sign_in(other, "alice@example.com", next_page="//evil.test/").location).netloc == ""


def test_signing_out_ends_the_session(client):
    sign_in(client, "alice@example.com")
    assert client.post("/logout").status_code == 302
    assert "Welcome, guest." in client.get("/").text
    assert client.get("/orders").status_code == 302
