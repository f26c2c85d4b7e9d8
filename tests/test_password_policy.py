"""The password policy (NIST SP 800-63B-4): what it refuses when a password is set, NFKC
before hashing, and that logins (and hashes made before the policy) are never checked."""

from __future__ import annotations

import importlib.util
import sys
import unicodedata
from pathlib import Path
from typing import Any

import argon2
import pytest
from flask import Flask

import flask_authflow
from flask_authflow import AuthFlow, FactorKind, get_state, login_required
from flask_authflow._web.config import load_config
from flask_authflow._web.state import account_admin
from flask_authflow.errors import (
    ConfigurationError,
    InvalidInput,
    MissingExtraError,
    PasswordTooLong,
    WeakPassword,
)
from flask_authflow.login._accounts import AccountAdmin
from flask_authflow.login._password import PasswordHasher, PasswordMatch
from flask_authflow.login._password_policy import (
    MAX_PASSWORD_BYTES,
    PasswordPolicy,
    common_passwords,
    normalise_password,
)
from flask_authflow.login._settings import PasswordPolicySettings
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import login_test_client
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory, base_app
from tests.parts import missing_part

#: Fifteen characters that break no other rule.
GOOD_15 = "quiet lamp oven"
STRONG = "plum tuesday kettle orbit"
CAFE_NFC = unicodedata.normalize("NFC", "crème brûlée au café")
CAFE_NFD = unicodedata.normalize("NFD", CAFE_NFC)


def refusal(policy: PasswordPolicy, password: str, **context: Any) -> WeakPassword:
    context.setdefault("username", "alice")
    context.setdefault("tenant", "acme")
    with pytest.raises(WeakPassword) as caught:
        policy.check(password, **context)
    return caught.value


def accepted(policy: PasswordPolicy, password: str, **context: Any) -> None:
    context.setdefault("username", "alice")
    context.setdefault("tenant", "acme")
    policy.check(password, **context)


# --- length -------------------------------------------------------------------------------------


def test_defaults_follow_nist() -> None:
    policy = PasswordPolicy()
    assert (policy.min_length, policy.min_length_with_second_factor, policy.max_bytes) == (15, 8, 1024)
    assert policy.zxcvbn_min_score is None
    assert policy.required_length(has_second_factor=False) == 15
    assert policy.required_length(has_second_factor=True) == 8


def test_password_only_needs_15_characters() -> None:
    policy = PasswordPolicy()
    accepted(policy, GOOD_15)
    error = refusal(policy, GOOD_15[:-1])
    assert error.reason == "too_short"
    assert error.code == "weak_password" and error.status == 400
    assert "at least 15 characters" in error.message and "this one has 14" in error.message
    assert error.to_dict() == {"error": "weak_password", "message": error.message}


def test_second_factor_lowers_the_minimum_to_8() -> None:
    policy = PasswordPolicy()
    accepted(policy, "vxqjmwkz", has_second_factor=True)
    error = refusal(policy, "vxqjmwk", has_second_factor=True)
    assert error.reason == "too_short" and "at least 8 characters" in error.message
    # The same 8 characters are too short when the password is the only factor.
    assert refusal(policy, "vxqjmwkz").reason == "too_short"


def test_both_minimums_are_configurable() -> None:
    policy = PasswordPolicy(min_length=20, min_length_with_second_factor=12)
    accepted(policy, "quiet lamp oven tulip")
    assert refusal(policy, "quiet lamp oven tul").reason == "too_short"
    accepted(policy, "quiet lamp o", has_second_factor=True)
    assert refusal(policy, "quiet lamp ", has_second_factor=True).reason == "too_short"


def test_length_counts_code_points_after_nfkc() -> None:
    policy = PasswordPolicy()
    # 14 characters typed in NFD are 17 code points, but NFKC makes them 14 again.
    nfd = unicodedata.normalize("NFD", "été à la plage")
    assert len(nfd) > 15 and len(normalise_password(nfd)) == 14
    assert refusal(policy, nfd).reason == "too_short"
    # The ligature U+FB01 is two characters once normalised: 14 typed, 15 counted.
    ligature = "quiet lamp \ufb01sh"
    assert len(ligature) == 14
    accepted(policy, ligature)
    # Characters, not bytes: 15 three-byte characters are enough.
    accepted(policy, "日本語のパスワードは長い方が良い")


def test_no_composition_rules() -> None:
    policy = PasswordPolicy()
    for password in (
        "all lower case words",
        "ALL UPPER CASE WORDS",
        "spaces are fine here",
        "ünïcödé wörds ärë fïnë",
    ):
        accepted(policy, password)


def test_over_1024_bytes_is_refused() -> None:
    policy = PasswordPolicy()
    words = " ".join(f"w{n}" for n in range(400))
    exactly = words[:MAX_PASSWORD_BYTES]
    assert len(exactly.encode()) == 1024
    accepted(policy, exactly)
    error = refusal(policy, words[: MAX_PASSWORD_BYTES + 1])
    assert error.reason == "too_long" and "1024 bytes" in error.message
    # Counted in UTF-8 bytes: 342 euro signs are 342 characters but 1026 bytes.
    assert refusal(policy, "€" * 342).reason == "too_long"
    # ... and after normalisation: U+FDFA is 3 bytes typed and 33 bytes in NFKC.
    expanding = "\ufdfa" * 40
    assert len(expanding.encode()) <= 1024 < len(normalise_password(expanding).encode())
    assert refusal(policy, expanding).reason == "too_long"


def test_text_that_is_not_unicode_is_refused() -> None:
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        PasswordPolicy().check("quiet lamp oven \ud800", username="alice", tenant="acme")


# --- blocklist ------------------------------------------------------------------------------------


def test_bundled_list_is_package_data_of_a_few_thousand() -> None:
    words = common_passwords()
    assert 4000 < len(words) < 10000
    assert {"password", "qwerty", "iloveyou", "1qaz2wsx3edc4rfv"} <= words


@pytest.mark.parametrize("password", ["1qaz2wsx3edc4rfv", "1QAZ2WSX3EDC4RFV", "qazwsxedcrfvtgb"])
def test_common_password_is_refused(password: str) -> None:
    error = refusal(PasswordPolicy(), password)
    assert error.reason == "blocklisted"
    assert error.message == "This password is too common; choose another."


@pytest.mark.parametrize("password", ["baseball", "BaseBall", "iloveyou", "i love you", "Base-Ball!"])
def test_common_password_is_refused_with_a_second_factor(password: str) -> None:
    assert refusal(PasswordPolicy(), password, has_second_factor=True).reason == "blocklisted"


@pytest.mark.parametrize(
    "password", ["password123456789", "Password2024!", "2024password", "baseball1111", "iloveyou1234"]
)
def test_common_word_with_trivial_digits_is_refused(password: str) -> None:
    assert refusal(PasswordPolicy(), password, has_second_factor=True).reason == "blocklisted"


@pytest.mark.parametrize(
    "password",
    ["aaaaaaaaaaaaaaa", "abcdefghijklmno", "zyxwvutsrqponml", "123456789012345", "abcabcabcabcabc", " " * 15],
)
def test_repeated_or_sequential_patterns_are_refused(password: str) -> None:
    error = refusal(PasswordPolicy(), password)
    assert error.reason == "blocklisted" and "pattern" in error.message


@pytest.mark.parametrize(
    "password",
    [STRONG, "monkey 837492016 tree", "password manager generated Xk9mQ2vL5nR8", "baseball837492016"],
)
def test_a_common_word_inside_a_longer_password_is_fine(password: str) -> None:
    accepted(PasswordPolicy(), password)


def test_extra_blocklist_words() -> None:
    policy = PasswordPolicy(blocklist=["Rocketship", "launch pad"])
    for password in ("rocketship", "ROCKETSHIP2024", "rocket-ship!", "launchpad1234", "Launch Pad"):
        error = refusal(policy, password, has_second_factor=True)
        assert error.reason == "blocklisted" and "not allowed on this site" in error.message
    accepted(policy, "rocketship of the monsoon", has_second_factor=True)
    accepted(PasswordPolicy(), "rocketship", has_second_factor=True)  # not a word of the bundled list


# --- context words --------------------------------------------------------------------------------


@pytest.mark.parametrize("password", ["alexander.hamilton", "Alexander Hamilton", "ALEXANDERHAMILTON2024"])
def test_the_username_is_refused_case_insensitively(password: str) -> None:
    error = refusal(PasswordPolicy(), password, username="alexander.hamilton", has_second_factor=True)
    assert error.reason == "context" and "your username" in error.message


def test_the_local_part_of_an_email_username_is_refused() -> None:
    policy = PasswordPolicy()
    username = "alexander.hamilton@example.com"
    assert refusal(policy, username, username=username).reason == "context"
    assert refusal(policy, "Alexander-Hamilton-1", username=username).reason == "context"
    assert refusal(policy, "alice1234", username="ALICE", has_second_factor=True).reason == "context"
    assert refusal(policy, "alicealice", username="alice", has_second_factor=True).reason == "context"


def test_the_tenant_is_refused() -> None:
    error = refusal(PasswordPolicy(), "Northwind Traders", tenant="northwind-traders")
    assert error.reason == "context" and "tenant" in error.message


def test_the_site_name_is_refused() -> None:
    policy = PasswordPolicy(site_name="Acme Notes Online")
    for password in ("acmenotesonline", "ACME NOTES ONLINE", "Acme-Notes-Online-2024"):
        error = refusal(policy, password)
        assert error.reason == "context" and "name of this site" in error.message
    accepted(PasswordPolicy(), "acmenotesonline")  # without a site name it is just a password


def test_a_passphrase_that_contains_the_username_is_fine() -> None:
    accepted(PasswordPolicy(site_name="Acme"), "alice likes green tea at acme", username="alice")


def test_no_context_given_checks_no_context() -> None:
    PasswordPolicy().check("alexander.hamilton", username=None, tenant=None)


# --- zxcvbn -----------------------------------------------------------------------------------------


def _zxcvbn_installed() -> bool:
    return importlib.util.find_spec("zxcvbn") is not None


@pytest.fixture
def zxcvbn_installed() -> None:
    if not _zxcvbn_installed():
        missing_part("the zxcvbn extra is not installed (pip install -e '.[dev]')")


@pytest.mark.usefixtures("zxcvbn_installed")
def test_zxcvbn_score_is_enforced_when_asked_for() -> None:
    policy = PasswordPolicy(zxcvbn_min_score=3)
    error = refusal(policy, "soccerfootball1")
    assert error.reason == "too_guessable"
    assert "too easy to guess" in error.message and "commonly used" in error.message
    accepted(policy, STRONG)
    accepted(PasswordPolicy(), "soccerfootball1")  # off by default
    # Scored on its first 72 characters (zxcvbn's limit): a long password is no error.
    accepted(policy, f"{STRONG} and a walrus named {' '.join(f'gerald{n}' for n in range(60))}")


@pytest.mark.usefixtures("zxcvbn_installed")
def test_zxcvbn_gets_the_context_words() -> None:
    # Containing the site name is allowed by the policy's own rules, but zxcvbn knows the
    # name is a guess an attacker makes first.
    accepted(PasswordPolicy(zxcvbn_min_score=3), "quetzalcoatl ventures team")
    policy = PasswordPolicy(zxcvbn_min_score=3, site_name="Quetzalcoatl Ventures")
    assert refusal(policy, "quetzalcoatl ventures team").reason == "too_guessable"
    assert refusal(policy, "quetzalcoatl ventures team", username="quetzalcoatl").reason == "too_guessable"
    # Each word of the site name counts too.
    accepted(PasswordPolicy(zxcvbn_min_score=4), "quetzalcoatl rocks")
    strict = PasswordPolicy(zxcvbn_min_score=4, site_name="Quetzalcoatl Ventures")
    assert refusal(strict, "quetzalcoatl rocks").reason == "too_guessable"


def test_zxcvbn_missing_is_refused_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "zxcvbn", None)  # an import of zxcvbn now fails
    with pytest.raises(MissingExtraError, match=r"flask-authflow\[zxcvbn\]") as caught:
        PasswordPolicy(zxcvbn_min_score=2)
    assert caught.value.extra == "zxcvbn"
    PasswordPolicy()  # not needed without a score
    with pytest.raises(MissingExtraError, match=r"flask-authflow\[zxcvbn\]"):
        _load(AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE=2)


# --- construction and configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_length": 7},
        {"min_length_with_second_factor": 6},
        {"min_length": 65},
        {"min_length": True},
        {"max_bytes": 2048},
        {"max_bytes": 100},
        {"zxcvbn_min_score": 5},
        {"zxcvbn_min_score": -1},
        {"blocklist": "password"},
    ],
)
def test_unsafe_policy_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="PasswordPolicy"):
        PasswordPolicy(**kwargs)


def test_policy_is_frozen_and_compares_by_value() -> None:
    policy = PasswordPolicy(blocklist=["a", "b"])
    assert policy == PasswordPolicy(blocklist=("a", "b"))
    with pytest.raises(AttributeError):
        policy.min_length = 8  # type: ignore[misc]


def _load(**overrides: object) -> dict[str, object]:
    """``app.config`` after ``init_app``'s checks: defaults applied, every value checked."""
    config: dict[str, object] = {"AUTHFLOW_SIGNING_KEY": "k" * 32, **overrides}
    load_config(config, debug=False, testing=True)
    return config


def test_config_defaults_and_from_config() -> None:
    config = _load()
    settings = PasswordPolicySettings.from_config(config)
    assert (settings.min_length, settings.min_length_with_second_factor) == (15, 8)
    assert settings.blocklist == () and settings.zxcvbn_min_score is None
    assert settings.site_name is None
    assert PasswordPolicy.from_config(config) == PasswordPolicy()


def test_config_values_from_the_environment() -> None:
    config = _load(
        AUTHFLOW_PASSWORD_MIN_LENGTH="16",
        AUTHFLOW_PASSWORD_MIN_LENGTH_WITH_SECOND_FACTOR="10",
        AUTHFLOW_PASSWORD_BLOCKLIST="rocketship, launchpad",
        AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE="3" if _zxcvbn_installed() else None,
        AUTHFLOW_SITE_NAME="Acme Notes",
    )
    policy = PasswordPolicy.from_config(config)
    assert (policy.min_length, policy.min_length_with_second_factor) == (16, 10)
    assert policy.blocklist == ("rocketship", "launchpad")
    assert policy.site_name == "Acme Notes"
    assert policy.zxcvbn_min_score == (3 if _zxcvbn_installed() else None)
    assert refusal(policy, "launchpad-2024", has_second_factor=True).reason == "blocklisted"
    assert refusal(policy, "acme notes 2024", has_second_factor=True).reason == "context"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("AUTHFLOW_PASSWORD_MIN_LENGTH", 7),
        ("AUTHFLOW_PASSWORD_MIN_LENGTH", 0),
        ("AUTHFLOW_PASSWORD_MIN_LENGTH", "six"),
        ("AUTHFLOW_PASSWORD_MIN_LENGTH", 65),
        ("AUTHFLOW_PASSWORD_MIN_LENGTH_WITH_SECOND_FACTOR", 6),
        ("AUTHFLOW_PASSWORD_BLOCKLIST", [1, 2]),
        ("AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE", 5),
        ("AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE", -1),
        ("AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE", "high"),
        ("AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE", True),
        ("AUTHFLOW_SITE_NAME", 42),
    ],
)
def test_unsafe_config_is_refused_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=key):
        _load(**{key: value})


def test_init_app_refuses_a_minimum_below_nist() -> None:
    app = base_app(AUTHFLOW_SESSION_STORE="memory", AUTHFLOW_PASSWORD_MIN_LENGTH=6)
    with pytest.raises(ConfigurationError, match=r"AUTHFLOW_PASSWORD_MIN_LENGTH=6 .*NIST"):
        AuthFlow(app, backend=InMemoryBackend())


def test_public_names() -> None:
    assert flask_authflow.login._password_policy.PasswordPolicy is PasswordPolicy
    assert flask_authflow.errors.WeakPassword is WeakPassword
    assert issubclass(WeakPassword, InvalidInput)


# --- NFKC before hashing -------------------------------------------------------------------------------


class _Counting:
    """Wraps argon2's hasher (it has slots) to count verifications."""

    def __init__(self, inner: argon2.PasswordHasher) -> None:
        self.inner = inner
        self.verifies = 0

    def hash(self, password: bytes) -> str:
        return self.inner.hash(password)

    def verify(self, hash: str, password: bytes) -> bool:
        self.verifies += 1
        return self.inner.verify(hash, password)

    def check_needs_rehash(self, hash: str) -> bool:
        return self.inner.check_needs_rehash(hash)


@pytest.fixture
def hasher() -> PasswordHasher:
    return PasswordHasher.fast_for_tests()


def test_nfc_and_nfd_spellings_are_one_password(hasher: PasswordHasher) -> None:
    assert CAFE_NFC != CAFE_NFD
    for stored, typed in ((CAFE_NFC, CAFE_NFD), (CAFE_NFD, CAFE_NFC), (CAFE_NFC, CAFE_NFC)):
        assert hasher.match(hasher.hash(stored), typed) is PasswordMatch.NORMALISED
    assert hasher.verify(hasher.hash("\uff21\uff22\uff23 quiet lamp"), "ABC quiet lamp")  # full-width forms
    assert not hasher.verify(hasher.hash(CAFE_NFC), CAFE_NFC.replace("é", "e"))
    assert not hasher.verify(hasher.hash(CAFE_NFD), "creme brulee au cafe")


def test_a_hash_made_before_normalisation_still_verifies(hasher: PasswordHasher) -> None:
    legacy = hasher._argon.hash(CAFE_NFD.encode())  # what hash() stored before NFKC
    assert hasher.match(legacy, CAFE_NFD) is PasswordMatch.AS_TYPED
    assert hasher.verify(legacy, CAFE_NFD)
    assert not hasher.verify(legacy, unicodedata.normalize("NFD", "crème brûlée au thé"))
    # The fallback is the password as typed, not any other spelling.
    assert not hasher.verify(hasher._argon.hash(b"not the password"), CAFE_NFD)


def test_ascii_never_costs_a_second_argon2(hasher: PasswordHasher, monkeypatch: pytest.MonkeyPatch) -> None:
    stored = hasher.hash(STRONG)
    spy = _Counting(hasher._argon)
    monkeypatch.setattr(hasher, "_argon", spy)
    assert not hasher.verify(stored, "wrong password")
    assert spy.verifies == 1
    assert not hasher.verify(stored, CAFE_NFC)  # non-ASCII but already NFKC: one form only
    assert spy.verifies == 2
    assert not hasher.verify(stored, CAFE_NFD)  # differs once normalised: both forms tried
    assert spy.verifies == 4


def test_unknown_users_cost_as_many_argon2_as_known_ones(
    hasher: PasswordHasher, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = hasher.hash(STRONG)
    spy = _Counting(hasher._argon)
    monkeypatch.setattr(hasher, "_argon", spy)
    for typed in ("wrong password", CAFE_NFD):
        before = spy.verifies
        hasher.verify(stored, typed)
        known = spy.verifies - before
        hasher.dummy_verify(typed)
        assert spy.verifies - before - known == known
        hasher.verify("not a hash", typed)
        assert spy.verifies - before == 3 * known


def test_hash_refuses_a_password_over_1024_bytes_once_normalised(hasher: PasswordHasher) -> None:
    with pytest.raises(PasswordTooLong):
        hasher.hash("\ufdfa" * 40)


# --- applied by account administration, never at login ----------------------------------------------------


@pytest.fixture(params=["memory", pytest.param("sqlite", marks=pytest.mark.authflow_stores("sql"))])
def app(request: pytest.FixtureRequest, tmp_path: Path, app_factory: AppFactory) -> Flask:
    policy = {"AUTHFLOW_SITE_NAME": "Acme Notes", "AUTHFLOW_PASSWORD_BLOCKLIST": ["rocketship"]}
    if request.param == "memory":
        app = app_factory(**policy)
    else:
        app = app_factory(AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'authflow.db'}", **policy)
    assert isinstance(get_state(app).backend, InMemoryBackend) is (request.param == "memory")

    @app.get("/dashboard")
    @login_required
    def dashboard() -> str:
        return "dashboard"

    return app


def test_create_user_applies_the_policy(app: Flask) -> None:
    backend = get_state(app).backend
    with app.app_context():
        admin = account_admin()
        for password, reason in [
            ("short pass", "too_short"),
            ("1qaz2wsx3edc4rfv", "blocklisted"),
            ("rocketship-2024", "blocklisted"),
            ("Barnaby Fitzgerald", "context"),
            ("acme notes 2024!", "context"),
            ("default123456789", "context"),  # the tenant
        ]:
            with pytest.raises(WeakPassword) as caught:
                admin.create_user("default", "Barnaby.Fitzgerald", password)
            assert caught.value.reason == reason, password
            assert backend.find_user("default", "barnaby.fitzgerald") is None
        admin.create_user("default", "Barnaby.Fitzgerald", STRONG)
        admin.create_user("default", "passwordless")  # no password, nothing to check
    assert login_test_client(app, "barnaby.fitzgerald", password=STRONG).get("/dashboard").status_code == 200


def test_set_password_applies_the_policy_and_changes_nothing_on_refusal(app: Flask) -> None:
    client = login_test_client(app, "alice", password=STRONG)
    with app.app_context():
        with pytest.raises(WeakPassword) as caught:
            account_admin().set_password("default", "alice", "Alice2024")
        assert caught.value.reason == "too_short"
        with pytest.raises(WeakPassword) as caught:
            account_admin().set_password("default", "alice", "alice 1234567890")
        assert caught.value.reason == "context"
    assert client.get("/dashboard").status_code == 200  # no session was revoked
    login_test_client(app, "alice", password=STRONG)  # the old password still works
    with pytest.raises(RuntimeError, match="failed"):
        login_test_client(app, "alice", password="alice 1234567890")


def test_a_second_factor_allows_8_characters(app: Flask) -> None:
    state = get_state(app)
    login_test_client(app, "alice", password=STRONG)
    with app.app_context():
        user = state.backend.find_user("default", "alice")
        assert user is not None
        with pytest.raises(WeakPassword, match="at least 15 characters"):
            account_admin().set_password("default", "alice", "vxqjmwkz")
        backend: Any = state.backend
        backend.enroll_factor("default", user.user_id, FactorKind.TOTP, "JBSWY3DPEHPK3PXP")
        assert account_admin().has_second_factor(user)
        with pytest.raises(WeakPassword, match="at least 8 characters"):
            account_admin().set_password("default", "alice", "vxqjmwk")
        with pytest.raises(WeakPassword) as caught:
            account_admin().set_password("default", "alice", "baseball")
        assert caught.value.reason == "blocklisted"
        assert account_admin().set_password("default", "alice", "vxqjmwkz") >= 0
        assert state.hasher.verify(state.backend.get_password_hash("default", user.user_id) or "", "vxqjmwkz")


def test_a_policy_on_the_state_replaces_the_configured_one(app: Flask) -> None:
    with app.app_context():
        assert account_admin().policy == PasswordPolicy(site_name="Acme Notes", blocklist=["rocketship"])
        get_state(app).password_policy = PasswordPolicy(min_length=20)
        with pytest.raises(WeakPassword, match="at least 20 characters"):
            account_admin().create_user("default", "bob", GOOD_15)
        account_admin().create_user("default", "bob", "quiet lamp oven tulip")


def test_account_admin_without_a_policy_checks_nothing() -> None:
    backend = InMemoryBackend()
    AccountAdmin(backend, MemorySessionStore(), hasher=PasswordHasher.fast_for_tests()).create_user(
        "acme", "alice", "pw"
    )
    assert backend.find_user("acme", "alice") is not None


def test_nfd_login_after_an_nfc_password_was_set(app: Flask) -> None:
    with app.app_context():
        account_admin().create_user("default", "alice", CAFE_NFC)
    assert login_test_client(app, "alice", password=CAFE_NFD).get("/dashboard").status_code == 200
    assert login_test_client(app, "alice", password=CAFE_NFC).get("/dashboard").status_code == 200
    with pytest.raises(RuntimeError, match="failed"):
        login_test_client(app, "alice", password="creme brulee au cafe")


def test_existing_hashes_log_in_without_the_policy(app: Flask) -> None:
    state = get_state(app)
    with app.app_context():
        # Set through the low-level store, as before the policy: short and common.
        add_user(state.backend, "default", "old-timer", "password")
        user = state.backend.create_user("default", "legacy")
        legacy_hash = state.hasher._argon.hash(CAFE_NFD.encode())  # before NFKC
        state.backend.set_password_hash("default", user.user_id, legacy_hash)
    assert login_test_client(app, "old-timer", password="password").get("/dashboard").status_code == 200
    # The legacy NFD hash logs in as typed; the login rehashes it in NFKC, so now the NFC
    # spelling works too.
    with pytest.raises(RuntimeError, match="failed"):
        login_test_client(app, "legacy", password=CAFE_NFC)
    assert login_test_client(app, "legacy", password=CAFE_NFD).get("/dashboard").status_code == 200
    with app.app_context():
        assert state.backend.get_password_hash("default", user.user_id) != legacy_hash
    assert login_test_client(app, "legacy", password=CAFE_NFC).get("/dashboard").status_code == 200


def test_the_cli_shows_the_refusal(app: Flask) -> None:
    runner = app.test_cli_runner()
    result = runner.invoke(args=["authflow", "create-user", "dora", "--password-stdin"], input="dora2024\n")
    assert result.exit_code != 0
    assert "at least 15 characters" in result.output
    assert "Traceback" not in result.output
    with app.app_context():
        assert get_state(app).backend.find_user("default", "dora") is None
    result = runner.invoke(args=["authflow", "create-user", "dora", "--password-stdin"], input=f"{STRONG}\n")
    assert result.exit_code == 0, result.output
