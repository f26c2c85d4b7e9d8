"""Devices through the ready-made pages: the device cookie, trusted devices, the device
list and "forget this device", the audit rows, and cookies that must be ignored."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient

from flask_authflow._outcomes import FactorKind
from flask_authflow._web.state import get_state
from flask_authflow.errors import ConfigurationError
from flask_authflow.testing._pytest_plugin import Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory, HtmlOutbox
from tests.test_views import PASSWORD, FixedCode, Site, csrf_of, login, make_site

COOKIE = "authflow_device"
FIREFOX = "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"
CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    return make_device_site(app_factory)


def make_device_site(app_factory: AppFactory) -> Site:
    """The views' test site where alice also has a TOTP step (code 123456)."""
    site = make_site(app_factory)
    get_state(site.app).service.register_factor(FixedCode("123456"))
    site.backend.enroll_factor("default", site.user_id(), FactorKind.TOTP, "seed")
    return site


def device_cookie(client: FlaskClient) -> str | None:
    cookie = client.get_cookie(COOKIE)
    return cookie.value if cookie is not None else None


def sign_in(
    client: FlaskClient, *, trust: bool = False, user: str = "alice", password: str = PASSWORD
) -> Any:
    """Password, then (when asked for) the TOTP step; the last response."""
    step = login(client, password=password)
    if step.location is None or not step.location.startswith("/login/factor"):
        return step
    page = client.get("/login/factor")
    form = {"code": "123456", "csrf_token": csrf_of(page.text)}
    if trust:
        form["trust_device"] = "1"
    return client.post("/login/factor", data=form)


def sign_out(client: FlaskClient) -> None:
    page = client.get("/account")
    client.post("/auth/logout", data={"csrf_token": csrf_of(page.text)})
    assert client.get("/account").status_code == 401


def rows(site: Site, event: str) -> list[Any]:
    return [r for r in site.backend.audit_rows if r.event == event]


def test_a_sign_in_records_the_device_and_sets_its_cookie(site: Site) -> None:
    client = site.client(FIREFOX)
    done = sign_in(client)
    assert done.status_code == 302
    header = next(h for h in done.headers.getlist("Set-Cookie") if h.startswith(COOKIE + "="))
    assert "HttpOnly" in header and "SameSite=Lax" in header and "Secure" in header
    assert "Max-Age=31536000" in header
    [device] = site.backend.list_devices("default", site.user_id())
    assert device.label == "Firefox 120 on Ubuntu" and device.trusted_until is None
    assert [r.status for r in rows(site, "device_sign_in")] == ["new"]
    # Every row of the sign-in request carries the device.
    login_rows = [r for r in site.backend.audit_rows if r.event in ("login_begin", "factor_verify")]
    assert login_rows and login_rows[-1].device_id == device.device_id
    sign_out(client)
    site.clock.advance(timedelta(minutes=5))
    sign_in(client)
    [again] = site.backend.list_devices("default", site.user_id())
    assert again.device_id == device.device_id and again.last_seen_at > device.last_seen_at
    assert [r.status for r in rows(site, "device_sign_in")] == ["new"]  # a known device: no row


def test_a_trusted_device_asks_for_the_password_only(site: Site) -> None:
    client = site.client(FIREFOX)
    assert sign_in(client, trust=True).status_code == 302
    [device] = site.backend.list_devices("default", site.user_id())
    assert device.trusted_until == site.clock.now() + timedelta(days=30)
    assert [r.status for r in rows(site, "device_trusted")] == ["success"]
    sign_out(client)
    step = login(client)
    assert step.status_code == 302 and not step.location.startswith("/login/factor")
    assert client.get("/account").status_code == 200
    started = [r for r in rows(site, "login_begin") if r.status == "started"]
    assert started[-1].reason == "trusted_device"
    # Another browser of the same user still needs the second factor.
    other = site.client(CHROME)
    assert login(other).location.startswith("/login/factor")


def test_the_trust_expires(site: Site) -> None:
    client = site.client(FIREFOX)
    sign_in(client, trust=True)
    sign_out(client)
    site.clock.advance(timedelta(days=30))
    assert login(client).location.startswith("/login/factor")


def test_trust_ends_with_a_password_change(site: Site) -> None:
    client = site.client(FIREFOX)
    sign_in(client, trust=True)
    sign_out(client)
    with site.app.test_request_context():
        site.authflow.accounts.set_password("alice", "a brand new long password")
    assert site.backend.list_devices("default", site.user_id())[0].trusted_until is None
    assert login(client, password="a brand new long password").location.startswith("/login/factor")


def test_trust_is_not_given_without_a_second_factor(app_factory: AppFactory) -> None:
    site = make_site(app_factory)  # alice has the password only
    client = site.client(FIREFOX)
    page = client.get("/login")
    client.post(
        "/login",
        data={
            "username": "alice",
            "password": PASSWORD,
            "csrf_token": csrf_of(page.text),
            "trust_device": "1",
        },
    )
    assert site.backend.list_devices("default", site.user_id())[0].trusted_until is None
    assert rows(site, "device_trusted") == []


def test_a_user_agent_change_ignores_the_cookie(site: Site) -> None:
    client = site.client(FIREFOX)
    sign_in(client, trust=True)
    sign_out(client)
    client.environ_base["HTTP_USER_AGENT"] = CHROME
    assert login(client).location.startswith("/login/factor")
    started = [r for r in rows(site, "login_begin") if r.status == "started"]
    assert started[-1].reason == "device_ua_mismatch"


def test_a_forged_cookie_is_ignored_and_audited(site: Site) -> None:
    client = site.client(FIREFOX)
    sign_in(client, trust=True)
    sign_out(client)
    value = device_cookie(client)
    assert value is not None
    for forged in (value[:-2] + ("AA" if not value.endswith("AA") else "BB"), "garbage", "x" * 3000, "é"):
        client.set_cookie(COOKIE, forged)
        step = login(client)
        assert step.status_code == 302 and step.location.startswith("/login/factor")
        started = [r for r in rows(site, "login_begin") if r.status == "started"]
        assert started[-1].reason == "device_forged"
        client.get("/login")  # the unfinished login is simply dropped by the next one


def test_another_users_cookie_is_ignored(site: Site) -> None:
    site.backend.enroll_factor("default", site.user_id("bob"), FactorKind.TOTP, "seed")
    client = site.client(FIREFOX)
    sign_in(client, trust=True)  # alice trusts this browser
    alice_device = device_cookie(client)
    sign_out(client)
    step = login(client, username="bob", password="bob's own password")
    assert step.location.startswith("/login/factor")  # bob is asked for his second factor
    started = [r for r in rows(site, "login_begin") if r.status == "started"]
    assert started[-1].reason == "foreign_device"
    page = client.get("/login/factor")
    client.post("/login/factor", data={"code": "123456", "csrf_token": csrf_of(page.text)})
    [bobs] = site.backend.list_devices("default", site.user_id("bob"))
    [alices] = site.backend.list_devices("default", site.user_id())
    assert bobs.device_id != alices.device_id  # a new device for bob, alice's left alone
    assert device_cookie(client) != alice_device


def test_an_expired_cookie_is_ignored(site: Site) -> None:
    client = site.client(FIREFOX)
    sign_in(client, trust=True)
    sign_out(client)
    value = device_cookie(client)
    app = site.app
    wiring = get_state(app).devices
    assert wiring.cookie.read(value, FIREFOX).claim is not None
    short = type(wiring.cookie)(app.config["AUTHFLOW_SIGNING_KEY"], lifetime=timedelta(seconds=-1))
    assert short.read(value, FIREFOX).refused == "expired"


def test_the_account_page_lists_devices_and_forgets_one(site: Site) -> None:
    client = site.client(FIREFOX)
    sign_in(client, trust=True)
    other = site.client(CHROME)
    sign_in(other)
    page = client.get("/account")
    devices = site.backend.list_devices("default", site.user_id())
    assert len(devices) == 2
    mine = next(d for d in devices if d.label.startswith("Firefox"))
    assert f'id="device-{mine.device_id}" data-device="{mine.device_id}" data-current="true"' in page.text
    assert 'data-trusted="true"' in page.text and "Chrome 131 on Windows" in page.text
    assert page.text.index("Firefox 120 on Ubuntu") < page.text.index(
        "Chrome 131 on Windows"
    )  # this one first
    token = csrf_of(page.text)
    assert client.post(f"/account/devices/{mine.device_id}/forget").status_code == 400  # no token
    done = client.post(f"/account/devices/{mine.device_id}/forget", data={"csrf_token": token})
    assert done.status_code == 302 and done.location == "/account?notice=device_forgotten"
    assert [d.label for d in site.backend.list_devices("default", site.user_id())] == [
        "Chrome 131 on Windows"
    ]
    [row] = rows(site, "device_forgotten")
    assert row.reason == f"device={mine.device_id}" and row.device_id == mine.device_id
    sign_out(client)
    assert login(client).location.startswith("/login/factor")  # forgotten: the TOTP step again


def test_forgetting_refuses_other_users_devices_and_bad_ids(site: Site) -> None:
    bob = site.client(CHROME)
    login(bob, username="bob", password="bob's own password")
    [bobs] = site.backend.list_devices("default", site.user_id("bob"))
    client = site.client(FIREFOX)
    sign_in(client)
    token = csrf_of(client.get("/account").text)
    for device_id in (bobs.device_id, "short", "x" * 80, "a" * 22 + "%00"):
        refused = client.post(f"/account/devices/{device_id}/forget", data={"csrf_token": token})
        assert refused.status_code == 404, device_id
        assert "That device is not one of yours" in refused.text
    assert site.backend.list_devices("default", site.user_id("bob")) == [bobs]
    guest = site.client(FIREFOX)
    assert guest.post(f"/account/devices/{bobs.device_id}/forget").status_code in (302, 400)
    assert site.backend.list_devices("default", site.user_id("bob")) == [bobs]


# --- remember me ------------------------------------------------------------------------------


def stay_active(site: Site, *clients: FlaskClient, hours: int) -> None:
    """Use the sessions every 50 minutes (under the idle timeout) for ``hours``."""
    for _ in range(hours * 60 // 50):
        site.clock.advance(timedelta(minutes=50))
        for client in clients:
            client.get("/private")


def test_remember_me_gives_the_longer_lifetime_and_keeps_the_idle_timeout(site: Site) -> None:
    plain, remembered = site.client(FIREFOX), site.client(CHROME)
    login(plain, username="bob", password="bob's own password")
    login(remembered, username="bob", password="bob's own password", remember="1")
    assert [r.status for r in rows(site, "remember_me")] == ["success"]
    stay_active(site, plain, remembered, hours=13)
    assert plain.get("/private").status_code == 401  # the 12 h lifetime is over
    assert remembered.get("/private").text == "private page"
    site.clock.advance(timedelta(minutes=61))  # idle longer than the idle timeout
    assert remembered.get("/private").status_code == 401


def test_remember_me_survives_the_second_factor_and_ends_at_its_own_lifetime(site: Site) -> None:
    client = site.client(FIREFOX)
    step = login(client, remember="1")
    assert step.location.startswith("/login/factor")
    page = client.get("/login/factor")
    client.post("/login/factor", data={"code": "123456", "csrf_token": csrf_of(page.text)})
    [record] = site.sessions()
    assert record.remember and record.state.value == "authenticated"
    stay_active(site, client, hours=30 * 24 - 1)
    assert client.get("/private").text == "private page"
    stay_active(site, client, hours=2)
    assert client.get("/private").status_code == 401  # 30 days, not more


def test_a_wrong_password_remembers_nothing(site: Site) -> None:
    client = site.client(FIREFOX)
    assert login(client, password="wrong password here", remember="1").status_code == 401
    assert login(client, username="nobody", password="whatever it is", remember="1").status_code == 401
    assert rows(site, "remember_me") == []


def test_remember_me_without_the_idle_timeout(app_factory: AppFactory) -> None:
    site = make_site(app_factory, AUTHFLOW_REMEMBER_ME_IDLE_TIMEOUT=False)
    client = site.client(FIREFOX)
    login(client, remember="1")
    site.clock.advance(timedelta(days=3))  # idle for days: still signed in
    assert client.get("/private").text == "private page"


def test_remember_me_lifetime_is_bounded(app_factory: AppFactory) -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_REMEMBER_ME_TTL over 90 days is refused"):
        make_site(app_factory, AUTHFLOW_REMEMBER_ME_TTL=timedelta(days=91))
    with pytest.raises(
        ConfigurationError, match="AUTHFLOW_REMEMBER_ME_TTL is shorter than AUTHFLOW_SESSION_TTL"
    ):
        make_site(app_factory, AUTHFLOW_REMEMBER_ME_TTL=timedelta(hours=1))


# --- mail on a sign-in from a new device ---------------------------------------------------------


class BrokenSender:
    def send(self, to: str, subject: str, body: str) -> None:
        raise OSError("the mail server is down")


def test_a_new_device_is_mailed_when_the_app_opted_in(app_factory: AppFactory) -> None:
    site = make_site(app_factory, AUTHFLOW_DEVICE_NEW_DEVICE_MAIL=True)
    outbox = Outbox()
    get_state(site.app).mail_sender = outbox
    add_user(site.backend, "default", "carol", "carols long passphrase", email="carol@example.com")
    site.authflow.device_place(lambda request: request.headers.get("X-City"))
    client = site.client(FIREFOX)
    client.environ_base["HTTP_X_CITY"] = "Berlin, DE"
    login(client, username="carol", password="carols long passphrase")
    [message] = outbox.messages
    assert message.to == "carol@example.com" and "new device" in message.subject
    assert (
        "Device: Firefox 120 on Ubuntu" in message.body and "Place:  Berlin, DE (approximate)" in message.body
    )
    sign_out(client)
    login(client, username="carol", password="carols long passphrase")
    assert len(outbox) == 1  # a known device: no mail
    # No address (alice's identifier is not one): nothing sent. A failing sender: the
    # sign-in still succeeds.
    login(site.client(CHROME))
    assert len(outbox) == 1
    get_state(site.app).mail_sender = BrokenSender()
    other = site.client(CHROME)
    assert login(other, username="carol", password="carols long passphrase").status_code == 302
    assert other.get("/private").text == "private page"


def test_no_mail_without_the_opt_in(site: Site) -> None:
    outbox = Outbox()
    get_state(site.app).mail_sender = outbox
    add_user(site.backend, "default", "carol", "carols long passphrase", email="carol@example.com")
    login(site.client(FIREFOX), username="carol", password="carols long passphrase")
    assert outbox.messages == []
    assert [r.status for r in rows(site, "device_sign_in")] == ["new"]


def test_a_failing_place_hook_is_unknown_place(site: Site) -> None:
    def broken(request: Any) -> str:
        raise RuntimeError("no geo database")

    site.authflow.device_place(broken)
    client = site.client(FIREFOX)
    assert login(client, username="bob", password="bob's own password").status_code == 302
    [device] = site.backend.list_devices("default", site.user_id("bob"))
    assert device.place is None


def test_the_new_device_mail_has_an_html_part_when_the_sender_takes_one(app_factory: AppFactory) -> None:
    site = make_site(app_factory, AUTHFLOW_DEVICE_NEW_DEVICE_MAIL=True)
    outbox = HtmlOutbox()
    get_state(site.app).mail_sender = outbox
    add_user(site.backend, "default", "carol", "carols long passphrase", email="carol@example.com")
    site.authflow.device_place(lambda request: "<b>Berlin</b>")
    login(site.client(FIREFOX), username="carol", password="carols long passphrase")
    [message] = outbox.messages
    [html] = outbox.html
    assert "Device: Firefox 120 on Ubuntu" in message.body and "Firefox 120 on Ubuntu" in html
    assert "&lt;b&gt;Berlin&lt;/b&gt;" in html and "<b>Berlin</b>" not in html  # escaped


def test_policies_read_the_trust_of_this_browser(site: Site) -> None:
    from flask_authflow._web.authz import current_principal

    @site.app.get("/trusted")
    def trusted() -> str:
        principal = current_principal()
        return str(principal.device_trusted if principal is not None else None)

    trusting, other = site.client(FIREFOX), site.client(CHROME)
    sign_in(trusting, trust=True)
    sign_in(other)  # the second factor passed, trust not asked
    assert (trusting.get("/trusted").text, other.get("/trusted").text) == ("True", "False")
    site.backend.end_device_trust("default", site.user_id())  # an operator's revoke
    assert trusting.get("/trusted").text == "False"
