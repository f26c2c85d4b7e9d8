"""Security notices: the account's owner is mailed when something that guards the account
changed: the e-mail address (both addresses, once confirmed), a second factor added or
removed, a provider linked or unlinked. Each notice is a template of its own, translated,
with its link on the configured origin; it goes out after the change committed; a notice
that cannot be sent is logged and undoes nothing; ``AUTHFLOW_SECURITY_NOTICES`` turns them
off, all or some."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pyotp
import pytest
from flask.testing import FlaskClient

from flask_authflow._outcomes import FactorKind
from flask_authflow._web.state import get_state
from flask_authflow.errors import ConfigurationError
from tests.appfactory import AppFactory, HtmlOutbox
from tests.federation_support import PROVIDER, FederatedApp
from tests.test_federation_linking import _bob, _link, _token
from tests.test_federation_linking import fed as fed  # the fixture, used by name
from tests.test_views import Site, csrf_of, login, make_site

ORIGIN = "https://app.example.com"
ALICE = "alice@example.com"
LINK = re.compile(r"https?://[^\s\"'<>]+")


def notice_site(app_factory: AppFactory, **config: Any) -> tuple[Site, HtmlOutbox]:
    outbox = HtmlOutbox()
    site = make_site(app_factory, mail_sender=outbox, AUTHFLOW_EXTERNAL_URL=ORIGIN, **config)
    site.backend.set_email("default", site.user_id(), ALICE, verified_at=site.clock.now())
    return site, outbox


@pytest.fixture
def site_outbox(app_factory: AppFactory) -> tuple[Site, HtmlOutbox]:
    return notice_site(app_factory)


def signed_in(site: Site) -> FlaskClient:
    client = site.client()
    assert login(client).status_code == 302
    return client


def post(client: FlaskClient, path: str, form: dict[str, str]) -> Any:
    """A form of the factors page, as a browser sends it; the answer is closed (a server
    closes it once sent, which is when notices go out)."""
    page = client.get("/account/factors")
    answer = client.post(path, data={"csrf_token": csrf_of(page.text), **form})
    answer.close()
    return answer


def add_totp(site: Site, client: FlaskClient) -> str:
    """Set up an authenticator app through the pages; its factor id."""
    page = client.get("/account/factors")
    started = client.post("/account/factors/totp", data={"csrf_token": csrf_of(page.text)})
    assert started.status_code == 200, started.text
    secret = re.search(r'id="totp-secret"[^>]*>([A-Z2-7 ]+)<', started.text) or re.search(
        r"secret=([A-Z2-7]+)", started.text
    )
    assert secret is not None
    key = secret.group(1).replace(" ", "")
    factor_id = csrf_of(started.text, "factor_id")
    code = pyotp.TOTP(key).at(site.clock.now())
    done = client.post(
        "/account/factors/totp/confirm",
        data={"csrf_token": csrf_of(started.text), "factor_id": factor_id, "code": code},
    )
    done.close()
    assert done.status_code == 302, done.text
    return factor_id


def notices(outbox: HtmlOutbox, needle: str) -> list[Any]:
    return [m for m in outbox.messages if needle in m.subject]


def links_of(outbox: HtmlOutbox) -> list[str]:
    texts = [m.body for m in outbox.messages] + outbox.html
    return [link for text in texts for link in LINK.findall(text)]


# --- second factors ------------------------------------------------------------------------------


def test_adding_and_removing_an_authenticator_app_mails_the_owner(
    site_outbox: tuple[Site, HtmlOutbox],
) -> None:
    site, outbox = site_outbox
    client = signed_in(site)
    factor_id = add_totp(site, client)
    [added] = notices(outbox, "sign-in method was added")
    assert added.to == ALICE and "Authenticator app" in added.body and "alice" in added.body
    assert f"{ORIGIN}/account/factors" in added.body
    assert all(link.startswith(ORIGIN + "/") for link in links_of(outbox))  # never the request's host
    assert 'id="review-link"' in outbox.html[-1]
    assert [f.kind for f in site.backend.list_factors("default", site.user_id())].count(FactorKind.TOTP) == 1
    removed = post(client, f"/account/factors/{factor_id}/remove", {})
    assert removed.status_code == 302
    [gone] = notices(outbox, "sign-in method was removed")
    assert gone.to == ALICE and "Authenticator app" in gone.body


def test_recovery_codes_are_a_factor_added(site_outbox: tuple[Site, HtmlOutbox]) -> None:
    site, outbox = site_outbox
    client = signed_in(site)
    page = client.get("/account/factors")
    shown = client.post("/account/factors/recovery-codes", data={"csrf_token": csrf_of(page.text)})
    assert shown.status_code == 200
    code = re.search(r"\b([a-z0-9]{5}-[a-z0-9]{5})\b", shown.text)
    assert code is not None
    done = client.post(
        "/account/factors/recovery-codes/confirm",
        data={
            "csrf_token": csrf_of(shown.text),
            "factor_id": csrf_of(shown.text, "factor_id"),
            "code": code.group(1),
        },
    )
    done.close()
    assert done.status_code == 302, done.text
    [added] = notices(outbox, "sign-in method was added")
    assert "Recovery codes" in added.body


def test_a_refused_enrollment_mails_nothing(site_outbox: tuple[Site, HtmlOutbox]) -> None:
    site, outbox = site_outbox
    client = signed_in(site)
    page = client.get("/account/factors")
    started = client.post("/account/factors/totp", data={"csrf_token": csrf_of(page.text)})
    wrong = client.post(
        "/account/factors/totp/confirm",
        data={
            "csrf_token": csrf_of(started.text),
            "factor_id": csrf_of(started.text, "factor_id"),
            "code": "000000",
        },
    )
    wrong.close()
    assert wrong.status_code >= 400
    assert outbox.messages == []


# --- e-mail address ------------------------------------------------------------------------------


def test_a_confirmed_email_change_mails_both_addresses(site_outbox: tuple[Site, HtmlOutbox]) -> None:
    site, outbox = site_outbox
    client = signed_in(site)
    asked = client.post("/account/email", json={"email": "alice.new@example.com"})
    asked.close()
    [verify] = outbox.messages
    token = re.search(r"token=([A-Za-z0-9_-]{43})", verify.body)
    assert token is not None
    done = site.client().post("/account/email/confirm", json={"token": token.group(1)})
    done.close()
    assert done.status_code == 200
    new, old = outbox.messages[1:]
    assert old.to == ALICE and "a***@example.com" in old.body
    assert new.to == "alice.new@example.com" and "now the e-mail address" in new.body
    assert all(link.startswith(ORIGIN + "/") for link in links_of(outbox))


def test_an_unconfirmed_change_mails_no_notice(site_outbox: tuple[Site, HtmlOutbox]) -> None:
    site, outbox = site_outbox
    signed_in(site).post("/account/email", json={"email": "alice.new@example.com"}).close()
    assert [m.to for m in outbox.messages] == ["alice.new@example.com"]  # the link only


# --- providers -----------------------------------------------------------------------------------


def test_linking_and_unlinking_a_provider_mails_the_owner(fed: FederatedApp) -> None:
    outbox = HtmlOutbox()
    get_state(fed.app).mail_sender = outbox
    client = fed.client()
    bob = _bob(fed, client)
    fed.backend.set_email("default", bob, "bob@example.com", verified_at=fed.clock.now())
    linked = _link(fed, client)
    linked.close()
    assert linked.status_code == 302
    [notice] = notices(outbox, "can now sign in")
    assert notice.to == "bob@example.com" and PROVIDER in notice.body
    done = client.post(f"/auth/unlink/{PROVIDER}", data={"csrf_token": _token(client)})
    done.close()
    assert done.status_code == 302
    [gone] = notices(outbox, "no longer signs in")
    assert gone.to == "bob@example.com" and PROVIDER in gone.body
    refused = client.post(f"/auth/unlink/{PROVIDER}", data={"csrf_token": _token(client)})
    refused.close()
    assert refused.status_code == 404 and len(notices(outbox, "no longer signs in")) == 1  # nothing changed


# --- translation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("language", "words"), [("de", "Anmeldemethode"), ("fr", "méthode de connexion")])
def test_the_notice_is_in_the_requests_language(app_factory: AppFactory, language: str, words: str) -> None:
    flask_babel = pytest.importorskip("flask_babel", reason="Flask-Babel is in the [babel] and [dev] extras")
    site, outbox = notice_site(app_factory)
    flask_babel.Babel(site.app)
    client = signed_in(site)
    client.environ_base["HTTP_ACCEPT_LANGUAGE"] = language
    add_totp(site, client)
    [mail] = outbox.messages
    assert words in mail.subject and words in mail.body and words in outbox.html[0]
    assert "Authenticator app" not in mail.body  # the factor's name too


# --- failures and the switch ---------------------------------------------------------------------


class FailingSender(HtmlOutbox):
    def send(self, to: str, subject: str, body: str) -> None:
        raise OSError("the mail server is down")


def test_a_notice_that_cannot_be_sent_is_logged_and_the_change_stays(
    app_factory: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    site, _ = notice_site(app_factory)
    get_state(site.app).mail_sender = FailingSender()
    client = signed_in(site)
    with caplog.at_level(logging.ERROR, logger="flask_authflow.notices"):
        add_totp(site, client)
    kinds = [f.kind for f in site.backend.list_factors("default", site.user_id())]
    assert FactorKind.TOTP in kinds  # committed
    [record] = [r for r in caplog.records if r.name == "flask_authflow.notices"]
    assert "factor_added" in record.getMessage() and site.user_id() in record.getMessage()


def test_without_a_sender_the_missing_notice_is_logged(
    app_factory: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    site = make_site(app_factory)
    site.backend.set_email("default", site.user_id(), ALICE, verified_at=site.clock.now())
    client = signed_in(site)
    with caplog.at_level(logging.INFO, logger="flask_authflow.notices"):
        add_totp(site, client)
    assert any(
        "no mail sender" in r.getMessage() for r in caplog.records if r.name == "flask_authflow.notices"
    )


@pytest.mark.parametrize(
    ("switch", "sent"), [(False, 0), (["factor_removed"], 0), (["factor_added"], 1), ("factor_added", 1)]
)
def test_the_switch_turns_notices_off(app_factory: AppFactory, switch: Any, sent: int) -> None:
    site, outbox = notice_site(app_factory, AUTHFLOW_SECURITY_NOTICES=switch)
    add_totp(site, signed_in(site))
    assert len(notices(outbox, "sign-in method was added")) == sent


@pytest.mark.parametrize("bad", [["factor_added", "no_such_event"], 3, [1]])
def test_a_wrong_switch_is_refused_at_init_app(app_factory: AppFactory, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_SECURITY_NOTICES"):
        make_site(app_factory, AUTHFLOW_SECURITY_NOTICES=bad)


def test_the_password_change_notice_follows_the_switch(app_factory: AppFactory) -> None:
    site, outbox = notice_site(app_factory, AUTHFLOW_SECURITY_NOTICES=["factor_added"])
    client = signed_in(site)
    page = client.get("/account")
    new = "a brand new passphrase 2026"
    answer = client.post(
        "/account/password",
        data={"csrf_token": csrf_of(page.text), "current_password": "correct horse battery",
              "new_password": new, "new_password_confirm": new},
    )  # fmt: skip
    answer.close()
    assert answer.status_code == 302
    assert outbox.messages == []


def test_an_overridden_template_is_used_and_a_broken_one_is_logged(
    app_factory: AppFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "templates" / "authflow" / "mail"
    folder.mkdir(parents=True)
    (folder / "factor_added_notice.txt").write_text(
        "Subject: Our own words\nSomething was added: {{ kind }}\n"
    )
    (folder / "factor_added_notice.html").write_text("<p>{{ kind }}</p>")
    (folder / "factor_removed_notice.txt").write_text("no subject line here\n")
    outbox = HtmlOutbox()
    site = make_site(
        app_factory,
        template_folder=str(tmp_path / "templates"),
        mail_sender=outbox,
        AUTHFLOW_EXTERNAL_URL=ORIGIN,
    )
    site.backend.set_email("default", site.user_id(), ALICE, verified_at=site.clock.now())
    client = signed_in(site)
    factor_id = add_totp(site, client)
    [mail] = outbox.messages
    assert mail.subject == "Our own words" and "Authenticator app" in mail.body
    with caplog.at_level(logging.ERROR, logger="flask_authflow.notices"):
        removed = post(client, f"/account/factors/{factor_id}/remove", {})
    assert removed.status_code == 302  # the removal stands
    assert FactorKind.TOTP not in [f.kind for f in site.backend.list_factors("default", site.user_id())]
    assert any("could not be composed" in r.getMessage() for r in caplog.records)
    assert len(outbox.messages) == 1


def test_an_operators_factor_changes_mail_the_owner_too(site_outbox: tuple[Site, HtmlOutbox]) -> None:
    site, outbox = site_outbox
    runner = site.app.test_cli_runner()
    enrolled = runner.invoke(args=["authflow", "enroll-totp", "alice"])
    assert enrolled.exit_code == 0, enrolled.output
    [added] = notices(outbox, "sign-in method was added")
    assert added.to == ALICE and "Authenticator app" in added.body
    assert f"{ORIGIN}/account/factors" in added.body  # the configured origin, no request at all
    codes = runner.invoke(args=["authflow", "recovery-codes", "regenerate", "alice"])
    assert codes.exit_code == 0, codes.output
    assert "Recovery codes" in notices(outbox, "sign-in method was added")[-1].body
    [totp] = [f for f in site.backend.list_factors("default", site.user_id()) if f.kind is FactorKind.TOTP]
    disabled = runner.invoke(args=["authflow", "factors", "disable", "alice", totp.factor_id])
    assert disabled.exit_code == 0, disabled.output
    [removed] = notices(outbox, "sign-in method was removed")
    assert removed.to == ALICE and "Authenticator app" in removed.body


def test_an_operators_new_password_mails_the_owner_what_ended(site_outbox: tuple[Site, HtmlOutbox]) -> None:
    site, outbox = site_outbox
    signed_in(site)  # one session, which the new password ends
    changed = site.app.test_cli_runner().invoke(
        args=["authflow", "set-password", "alice", "--password-stdin"], input="an operator's new passphrase\n"
    )
    assert changed.exit_code == 0, changed.output
    [notice] = notices(outbox, "was changed")
    assert notice.to == ALICE and "1 signed-in session" in notice.body


def test_the_switch_keeps_an_operators_password_change_quiet(app_factory: AppFactory) -> None:
    site, outbox = notice_site(app_factory, AUTHFLOW_SECURITY_NOTICES=["factor_added"])
    changed = site.app.test_cli_runner().invoke(
        args=["authflow", "set-password", "alice", "--password-stdin"], input="an operator's new passphrase\n"
    )
    assert changed.exit_code == 0, changed.output
    assert outbox.messages == []
