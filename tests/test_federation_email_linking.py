"""Linking by e-mail links only to proven addresses (docs/security.rst, "Linking only to proven
addresses"): the pre-account takeover of the attack review, one test per variant.

The attacker prepares an account before the victim's first "Sign in with the provider"
(``link_by_email`` on). In every variant the victim's sign-in must not land in the
attacker's account, and the victim's own account with her verified address still links.
Each runs on the in-memory store and on SQLite, through the real views, the command line
and the in-process test provider.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from flask_authflow import AuthFlow, current_session, current_user, get_state, login_required
from flask_authflow._core.ports import UserRecord
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._login import FederatedIdentity
from flask_authflow.testing._provider import TestOpenIDProvider
from flask_authflow.testing._pytest_plugin import Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.federation_support import CLIENT_ID, CLIENT_SECRET, PROVIDER, REDIRECT_URI, FederatedApp

STORES = ["memory", pytest.param("sqlite", marks=pytest.mark.authflow_stores("sql"))]
PASSWORD = "a long enough passphrase 42"
VICTIM = "victim@gmail.example"
ATTACKER = "attacker@evil.example"
VICTIM_SUB = "victim-sub"


@dataclass
class World:
    """An app with sign-up, the command line and the test provider (``link_by_email`` on)."""

    fed: FederatedApp
    outbox: Outbox
    #: The dashboard the last sign-in of the victim landed on (``None``: it was refused).
    landed: str | None = None

    @property
    def app(self) -> Flask:
        return self.fed.app

    @property
    def backend(self) -> Any:
        return self.fed.backend

    def victim_signs_in(self, email: str = VICTIM, **claims: Any) -> Any:
        """The victim's federated sign-in; returns the callback response."""
        self.fed.provider.login_as(VICTIM_SUB, email=email, **{"email_verified": True, **claims})
        client = self.fed.client()
        response = self.fed.sign_in(client)
        self.landed = client.get("/dashboard").text if response.status_code == 302 else None
        return response

    def linked_user(self) -> str | None:
        link = self.backend.find_link(self.fed.provider.issuer, VICTIM_SUB)
        return None if link is None else str(link.user_id)

    def sign_up(self, username: str, email: str) -> Any:
        body = {"username": username, "email": email, "password": PASSWORD}
        answer = self.fed.client().post("/signup", json=body)
        answer.close()  # delivers the mail, as a server does once the answer went out
        return answer

    def user(self, identifier: str) -> UserRecord:
        found = self.backend.find_user("default", identifier)
        assert found is not None, identifier
        return found  # type: ignore[no-any-return]

    def cli(self, *args: str, input: str | None = None) -> Any:
        return self.app.test_cli_runner().invoke(args=["authflow", *args], input=input)


def build(
    app_factory: AppFactory, tmp_path: Path, store: str, provider: TestOpenIDProvider, **settings: Any
) -> World:
    provider.register_client(CLIENT_ID, CLIENT_SECRET, [REDIRECT_URI])
    oauth = {
        "discovery_url": provider.discovery_url,
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uri": REDIRECT_URI,
        "post_login_redirect": "/dashboard",
        "link_by_email": True,
        **settings,
    }
    config: dict[str, Any] = {"AUTHFLOW_VIEWS": True, "AUTHFLOW_REGISTRATION": True}
    if store == "sqlite":
        config["AUTHFLOW_DATABASE_URL"] = f"sqlite:///{tmp_path / 'authflow.db'}"
    authflow = AuthFlow()
    app = app_factory(
        authflow=authflow,
        import_name=__name__,
        instance_path=tmp_path / f"instance-{store}",
        http_client=RequestsHttpClient(adapters=provider.http_adapters()),
        SERVER_NAME="localhost",
        AUTHFLOW_OAUTH_PROVIDERS={PROVIDER: oauth},
        **config,
    )
    state = get_state(app)
    outbox = Outbox()
    state.mail_sender = outbox

    @app.get("/dashboard")
    @login_required
    def dashboard() -> str:
        return f"dashboard of {current_user.identifier} via {current_session.record.auth_method}"

    fed = FederatedApp(app, authflow, state.backend, state.session_store, provider, state.clock)  # type: ignore[arg-type]
    return World(fed, outbox)


@pytest.fixture(params=STORES)
def world(
    request: pytest.FixtureRequest, app_factory: AppFactory, tmp_path: Path, oidc_provider: TestOpenIDProvider
) -> World:
    return build(app_factory, tmp_path, request.param, oidc_provider)


def assert_not_in(world: World, account: UserRecord, response: Any) -> None:
    """The victim's sign-in worked, in a new account of her own, and not in ``account``."""
    assert response.status_code == 302, response.text
    assert world.linked_user() not in (None, account.user_id)
    assert world.landed == f"dashboard of {PROVIDER}:{VICTIM_SUB} via oidc:{PROVIDER}"
    assert world.backend.links_of_user("default", account.user_id) == []


def verified_victim(world: World) -> UserRecord:
    """The victim's own account: signed up, and her address confirmed from the mail."""
    assert world.sign_up("victim", VICTIM).status_code == 202
    token = re.search(r"token=([A-Za-z0-9_-]{43})", world.outbox.messages[-1].body)
    assert token is not None
    confirmed = world.fed.client().post("/signup/verify", json={"token": token.group(1)})
    assert confirmed.status_code == 200, confirmed.text
    victim = world.user("victim")
    assert victim.email == VICTIM and victim.email_verified_at is not None
    return victim


def assert_links_to(world: World, account: UserRecord, response: Any) -> None:
    assert response.status_code == 302, response.text
    assert world.linked_user() == account.user_id
    assert world.landed == f"dashboard of {account.identifier} via oidc:{PROVIDER}"


# --- the legitimate case ----------------------------------------------------------------------------


def test_the_victims_own_verified_account_links(world: World) -> None:
    victim = verified_victim(world)
    assert_links_to(world, victim, world.victim_signs_in())
    assert len(world.backend.list_users("default")) == 1


def test_without_link_by_email_her_own_account_does_not_link(
    app_factory: AppFactory, tmp_path: Path, oidc_provider: TestOpenIDProvider
) -> None:
    world = build(app_factory, tmp_path, "memory", oidc_provider, link_by_email=False)
    victim = verified_victim(world)
    assert_not_in(world, victim, world.victim_signs_in())


# --- variant 1: the identifier is the victim's address, the account's own e-mail the attacker's ----


def test_an_identifier_that_is_the_victims_address_is_never_a_link_target(world: World) -> None:
    # The attack of the review: a username that is her address, and his own address verified.
    attacker = add_user(
        world.backend, "default", VICTIM, PASSWORD, email=ATTACKER, email_verified_at=world.fed.clock.now()
    )
    assert_not_in(world, attacker, world.victim_signs_in())
    # His password still opens his account only: nothing of hers is in it.
    assert world.backend.links_of_user("default", attacker.user_id) == []


def test_sign_up_refuses_the_victims_address_as_a_username(world: World) -> None:
    for username in (VICTIM, VICTIM.upper(), f"  {VICTIM}  "):
        refused = world.sign_up(username, ATTACKER)
        assert refused.status_code == 400
        assert refused.json["error"] == "identifier_not_own_address"
        assert "@" in refused.json["message"]
    assert world.backend.list_users("default") == [] and world.outbox.messages == []
    assert world.victim_signs_in().status_code == 302
    assert world.landed == f"dashboard of {PROVIDER}:{VICTIM_SUB} via oidc:{PROVIDER}"


def test_a_username_that_is_her_own_address_is_fine_and_links_once_verified(world: World) -> None:
    assert world.sign_up("Victim@Gmail.example", VICTIM.upper()).status_code == 202
    victim = world.user(VICTIM)
    assert victim.email == VICTIM and victim.email_verified_at is None
    # Not verified yet: not a link target, even with her own address as the username.
    assert_not_in(world, victim, world.victim_signs_in())
    token = re.search(r"token=([A-Za-z0-9_-]{43})", world.outbox.messages[-1].body)
    assert token is not None
    assert world.fed.client().post("/signup/verify", json={"token": token.group(1)}).status_code == 200
    world.backend.unlink_identity(world.fed.provider.issuer, VICTIM_SUB)
    assert_links_to(world, world.user(VICTIM), world.victim_signs_in())


# --- variant 2: the account's e-mail is the victim's address, never verified ------------------------


def test_an_unverified_address_is_never_a_link_target(world: World) -> None:
    # Signing up with her address works (no enumeration), but he cannot confirm it: the
    # link goes to her mailbox.
    assert world.sign_up("mallory", VICTIM).status_code == 202
    squatter = world.user("mallory")
    assert squatter.email == VICTIM and squatter.email_verified_at is None
    assert [mail.to for mail in world.outbox.messages] == [VICTIM]
    assert_not_in(world, squatter, world.victim_signs_in())


def test_an_unverified_address_with_a_provisioning_hook_runs_the_hook(
    app_factory: AppFactory, tmp_path: Path, oidc_provider: TestOpenIDProvider
) -> None:
    world = build(app_factory, tmp_path, "memory", oidc_provider)
    squatter = add_user(world.backend, "default", "mallory", PASSWORD, email=VICTIM)
    seen: list[FederatedIdentity] = []

    @world.fed.authflow.provision_user
    def refuse(identity: FederatedIdentity, tenant: str) -> None:
        seen.append(identity)  # the application's rule decides, as for no match at all

    refused = world.victim_signs_in()
    assert refused.status_code == 403 and "no account" in refused.text
    assert [identity.verified_email for identity in seen] == [VICTIM]
    assert world.linked_user() is None
    assert world.backend.links_of_user("default", squatter.user_id) == []


# --- variant 3: case variants -------------------------------------------------------------------------


def test_an_address_in_another_case_is_the_same_address(world: World) -> None:
    victim = verified_victim(world)
    # A second sign-up with her address in another case is the address that has an
    # account: its owner gets a notice, and there is no second account.
    answer = world.sign_up("mallory", "Victim@Gmail.EXAMPLE")
    assert answer.status_code == 202
    assert world.backend.find_user("default", "mallory") is None
    assert world.outbox.messages[-1].to == VICTIM and "tried to create" in world.outbox.messages[-1].body
    # A username that is her address in another case is refused.
    refused = world.sign_up("VICTIM@gmail.example", ATTACKER)
    assert refused.status_code == 400 and refused.json["error"] == "identifier_not_own_address"
    # Her provider spells the address in another case: still hers.
    assert_links_to(world, victim, world.victim_signs_in(email="ViCtIm@GMAIL.example"))


def test_an_unverified_address_in_another_case_is_no_link_target(world: World) -> None:
    squatter = add_user(world.backend, "default", "mallory", PASSWORD, email="VICTIM@gmail.example")
    assert squatter.email == VICTIM  # stored in lower case
    assert_not_in(world, squatter, world.victim_signs_in())


# --- variant 4: accounts made by the command line ---------------------------------------------------


def test_an_imported_account_whose_identifier_is_an_address_is_no_link_target(
    world: World, tmp_path: Path
) -> None:
    hashed = get_state(world.app).hasher.hash(PASSWORD)
    rows = [
        {"identifier": VICTIM, "hash": hashed},  # no e-mail at all
        {"identifier": "Victim2@gmail.example", "hash": hashed, "email": "victim2@gmail.example"},
        {"identifier": "victim3", "hash": hashed, "email": "victim3@gmail.example", "confirmed": "no"},
    ]
    source = tmp_path / "users.json"
    source.write_text(json.dumps(rows), encoding="utf-8")
    result = world.cli("users", "import", str(source))
    assert result.exit_code == 0, result.output
    for identifier, email in (
        (VICTIM, VICTIM),
        ("victim2@gmail.example", "victim2@gmail.example"),
        ("victim3", "victim3@gmail.example"),
    ):
        imported = world.user(identifier)
        assert imported.email_verified_at is None
        world.backend.unlink_identity(world.fed.provider.issuer, VICTIM_SUB)
        assert_not_in(world, imported, world.victim_signs_in(email=email))


def test_an_account_the_command_line_created_links_only_by_its_confirmed_email(world: World) -> None:
    made = world.cli("create-user", VICTIM, "--password-stdin", input=f"{PASSWORD}\n")
    assert made.exit_code == 0, made.output
    by_name = world.user(VICTIM)
    assert by_name.email is None
    assert_not_in(world, by_name, world.victim_signs_in())
    # An operator who gives --email vouches for it (stored as verified): that account links.
    vouched = world.cli(
        "create-user", "carol", "--email", "Carol@Example.com", "--password-stdin", input=f"{PASSWORD}\n"
    )
    assert vouched.exit_code == 0, vouched.output
    carol = world.user("carol")
    world.fed.provider.login_as("carol-sub", email="carol@example.com", email_verified=True)
    client = world.fed.client()
    assert world.fed.sign_in(client).status_code == 302
    assert client.get("/dashboard").text == f"dashboard of carol via oidc:{PROVIDER}"
    assert world.backend.find_link(world.fed.provider.issuer, "carol-sub").user_id == carol.user_id


# --- variant 5: the provider does not vouch for the address -------------------------------------------


@pytest.mark.parametrize("claim", [False, "true", None])
def test_an_address_the_provider_did_not_verify_never_links(world: World, claim: Any) -> None:
    victim = verified_victim(world)
    # Anyone can put her address in an account at a provider that does not check it.
    assert_not_in(world, victim, world.victim_signs_in(email_verified=claim))
