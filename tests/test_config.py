"""Configuration: defaults, coercion, and refusal of unsafe settings at init_app."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask

from flask_authflow._web.config import DEFAULTS, load_config
from flask_authflow.errors import ConfigurationError
from tests.appfactory import AppFactory, base_app

KEY = "k" * 32


def _load(debug: bool = False, testing: bool = False, **overrides: object):
    config: dict[str, object] = {"AUTHFLOW_SIGNING_KEY": KEY, **overrides}
    return load_config(config, debug=debug, testing=testing), config


def test_defaults_are_applied_with_setdefault() -> None:
    cfg, raw = _load()
    assert cfg.session.ttl == timedelta(hours=12)
    assert cfg.session.idle_timeout == timedelta(hours=1)
    assert cfg.session.cookie_name == "authflow_session"
    assert cfg.session.cookie_secure is True
    assert cfg.session.cookie_samesite == "Lax"
    assert cfg.lockout.max_failures == 5
    assert cfg.lockout.duration == timedelta(minutes=15)
    assert set(DEFAULTS) <= set(raw)  # written back into app.config, as setdefault does


def test_existing_values_win_over_defaults() -> None:
    cfg, _ = _load(AUTHFLOW_SESSION_TTL=timedelta(hours=2), AUTHFLOW_SESSION_IDLE_TIMEOUT=600)
    assert cfg.session.ttl == timedelta(hours=2)
    assert cfg.session.idle_timeout == timedelta(minutes=10)


def test_environment_strings_are_coerced() -> None:
    cfg, _ = _load(
        AUTHFLOW_SESSION_TTL="7200",
        AUTHFLOW_COOKIE_SECURE="true",
        AUTHFLOW_TRUSTED_PROXIES="10.0.0.0/8, 192.168.0.0/16",
        AUTHFLOW_LOCKOUT_MAX_FAILURES="3",
    )
    assert cfg.session.ttl == timedelta(hours=2)
    assert cfg.audit.trusted_proxies == ("10.0.0.0/8", "192.168.0.0/16")
    assert cfg.lockout.max_failures == 3


def test_text_key_counts_in_bytes() -> None:
    cfg, _ = _load()
    assert cfg.session.signing_key == KEY.encode()
    assert "kkkk" not in repr(cfg)


@pytest.mark.parametrize("key", [None, "", "short", "x" * 31, b"\x00" * 31])
def test_short_or_missing_signing_key_is_refused(key: object) -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_SIGNING_KEY"):
        load_config({"AUTHFLOW_SIGNING_KEY": key}, debug=False, testing=False)


def test_signing_key_of_wrong_type_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_SIGNING_KEY"):
        load_config({"AUTHFLOW_SIGNING_KEY": 12345678901234567890123456789012345}, debug=False, testing=False)


def test_short_previous_key_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_PREVIOUS_SIGNING_KEYS"):
        _load(AUTHFLOW_PREVIOUS_SIGNING_KEYS=["x" * 10])


def test_insecure_cookie_refused_outside_debug_and_testing() -> None:
    with pytest.raises(
        ConfigurationError, match=r"AUTHFLOW_COOKIE_SECURE=False.*AUTHFLOW_ALLOW_INSECURE_LOOPBACK"
    ):
        _load(AUTHFLOW_COOKIE_SECURE=False)


@pytest.mark.parametrize(
    ("debug", "testing", "loopback"), [(True, False, False), (False, True, False), (False, False, True)]
)
def test_insecure_cookie_allowed_in_debug_testing_or_loopback_opt_out(
    debug: bool, testing: bool, loopback: bool
) -> None:
    cfg, _ = _load(
        debug=debug, testing=testing, AUTHFLOW_COOKIE_SECURE=False, AUTHFLOW_ALLOW_INSECURE_LOOPBACK=loopback
    )
    assert cfg.session.cookie_secure is False


def test_unknown_prefixed_key_is_refused_as_typo() -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_SESION_TTL"):
        _load(AUTHFLOW_SESION_TTL=5)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("AUTHFLOW_COOKIE_SAMESITE", "lax", "SAMESITE"),
        ("AUTHFLOW_SESSION_TTL", "soon", "timedelta"),
        ("AUTHFLOW_SESSION_TTL", timedelta(0), "positive"),
        ("AUTHFLOW_SESSION_IDLE_TIMEOUT", timedelta(days=2), "IDLE_TIMEOUT"),
        ("AUTHFLOW_LOCKOUT_MAX_FAILURES", "many", "integer"),
        ("AUTHFLOW_LOCKOUT_MAX_FAILURES", True, "integer"),
        ("AUTHFLOW_COOKIE_SECURE", "perhaps", "True or False"),
        ("AUTHFLOW_SESSION_STORE", "redis", "SESSION_STORE"),
        ("AUTHFLOW_CUSTOM_DATA_LIMIT", 100_000, "65536"),
        ("AUTHFLOW_ARGON2_MEMORY_COST", 1024, "OWASP"),
        ("AUTHFLOW_SESSION_ENCRYPTION_KEY", "x" * 16, "32 bytes"),
        ("AUTHFLOW_PREVIOUS_SESSION_ENCRYPTION_KEYS", ["x" * 16], "32 bytes"),
        ("AUTHFLOW_ISSUER_ALGORITHM", "HS256", "ES256"),
        ("AUTHFLOW_ISSUER_MAX_LIFETIME", timedelta(days=2), "1 day"),
        ("AUTHFLOW_TRUSTED_PROXIES", 42, "list"),
    ],
)
def test_invalid_values_name_the_key(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _load(**{key: value})


def test_samesite_none_requires_secure() -> None:
    with pytest.raises(ConfigurationError, match="requires AUTHFLOW_COOKIE_SECURE"):
        _load(debug=True, AUTHFLOW_COOKIE_SAMESITE="None", AUTHFLOW_COOKIE_SECURE=False)


def test_weak_argon2_allowed_only_when_testing() -> None:
    cfg, _ = _load(testing=True, AUTHFLOW_ARGON2_MEMORY_COST=8)
    assert cfg.hashing.memory_cost == 8


def test_init_app_refuses_unsafe_config_with_message() -> None:
    from flask_authflow import AuthFlow

    app = base_app(TESTING=False, AUTHFLOW_SIGNING_KEY="too-short")
    with pytest.raises(ConfigurationError, match="at least 32"):
        AuthFlow(app)
    assert "authflow" not in app.extensions


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"AUTHFLOW_COOKIE_NAME": "__Host-authflow", "AUTHFLOW_COOKIE_PATH": "/app"},
            "AUTHFLOW_COOKIE_PATH='/'",
        ),
        (
            {"AUTHFLOW_COOKIE_NAME": "__Host-authflow", "AUTHFLOW_COOKIE_DOMAIN": "example.com"},
            "no AUTHFLOW_COOKIE_DOMAIN",
        ),
        (
            {"AUTHFLOW_COOKIE_NAME": "__Host-authflow", "AUTHFLOW_COOKIE_SECURE": False},
            "AUTHFLOW_COOKIE_SECURE=True",
        ),
        (
            {"AUTHFLOW_COOKIE_NAME": "__Secure-authflow", "AUTHFLOW_COOKIE_SECURE": False},
            "AUTHFLOW_COOKIE_SECURE=True",
        ),
    ],
)
def test_cookie_name_prefixes_keep_their_browser_rules(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _load(debug=True, **settings)


def test_host_prefixed_cookie_is_accepted_and_set_host_only(app_factory: AppFactory) -> None:
    from flask_authflow import current_session

    cfg, _ = _load(AUTHFLOW_COOKIE_NAME="__Host-authflow")
    session = cfg.session
    assert (
        session.cookie_name == "__Host-authflow"
        and session.cookie_path == "/"
        and session.cookie_domain is None
    )
    app = app_factory(AUTHFLOW_COOKIE_NAME="__Host-authflow")

    @app.get("/put")
    def put() -> str:
        current_session["x"] = 1
        return "ok"

    header = app.test_client().get("/put", base_url="https://localhost").headers["Set-Cookie"]
    assert header.startswith("__Host-authflow=") and "Secure" in header and "Path=/" in header
    assert "Domain" not in header


@pytest.mark.parametrize(
    "proxies", ["0.0.0.0/0", "::/0", "::ffff:0:0/96", "0.0.0.0/1, 128.0.0.0/1", ["10.0.0.0/8", "::/0"]]
)
def test_trusted_proxies_that_cover_everything_are_refused(proxies: object) -> None:
    from flask_authflow import AuthFlow
    from flask_authflow.sessions._stores import MemorySessionStore
    from flask_authflow.storage._memory import InMemoryBackend

    app = base_app(AUTHFLOW_TRUSTED_PROXIES=proxies)
    with pytest.raises(ConfigurationError, match=r"AUTHFLOW_TRUSTED_PROXIES: .*cover every IPv"):
        AuthFlow(app, backend=InMemoryBackend(), session_store=MemorySessionStore())
    assert "authflow" not in app.extensions


# --- the key table and the settings of each feature ---------------------------------------------

SETTINGS_CLASSES = [
    "flask_authflow.sessions._settings:SessionSettings",
    "flask_authflow.audit._settings:AuditSettings",
    "flask_authflow.login._settings:LoginSettings",
    "flask_authflow.login._settings:LockoutSettings",
    "flask_authflow.login._settings:HashingSettings",
    "flask_authflow.login._settings:PasswordPolicySettings",
    "flask_authflow.mfa._settings:FactorSettings",
    "flask_authflow.issuer._settings:IssuerSettings",
    "flask_authflow.federation._settings:FederationSettings",
    "flask_authflow._web.config:WebSettings",
    "flask_authflow.authz._settings:AuthzSettings",
    "flask_authflow.login._account_settings:AccountSettings",
    "flask_authflow.api_auth._settings:ApiTokenSettings",
    "flask_authflow.devices._settings:DeviceSettings",
    "flask_authflow._throttle.settings:ThrottleSettings",
    "flask_authflow.login._mfa_policy:MfaRequiredSettings",
]


def _settings_classes() -> list[type]:
    import importlib

    found = []
    for spec in SETTINGS_CLASSES:
        module, name = spec.split(":")
        found.append(getattr(importlib.import_module(module), name))
    return found


def test_every_key_is_read_by_a_feature_and_every_field_names_a_key() -> None:
    from dataclasses import fields

    from flask_authflow._settings import KEYS

    read = set()
    for cls in _settings_classes():
        for item in fields(cls):
            key = item.metadata.get("key")
            assert key is not None or item.metadata.get("flag") in ("DEBUG", "TESTING"), (cls, item.name)
            read.add(key)
    smtp = {key.name for key in KEYS if key.name.startswith("AUTHFLOW_SMTP_")}  # read by SmtpSettings
    assert {key.name for key in KEYS} - smtp == read - {None}
    assert list(DEFAULTS) == [key.name for key in KEYS]


def test_each_feature_reads_its_settings_from_app_config() -> None:
    from flask_authflow.audit._settings import AuditSettings
    from flask_authflow.issuer._settings import IssuerSettings
    from flask_authflow.login._settings import HashingSettings, LockoutSettings
    from flask_authflow.mfa._settings import FactorSettings
    from flask_authflow.sessions._settings import SessionSettings

    app = Flask(__name__)  # no init_app: absent keys take their defaults
    app.config.update(
        AUTHFLOW_SIGNING_KEY=KEY,
        AUTHFLOW_LOCKOUT_WINDOW="600",
        AUTHFLOW_AUDIT_RETENTION="forever",
        AUTHFLOW_ISSUER_ALGORITHM="RS256",
        AUTHFLOW_PASSKEY_LOGIN="acme, globex",
        AUTHFLOW_WEBAUTHN_RP_ID="example.com",
        AUTHFLOW_WEBAUTHN_ORIGINS="https://login.example.com/",
    )
    assert LockoutSettings.from_config(app.config).window == timedelta(minutes=10)
    assert AuditSettings.from_config(app.config).retention is None
    assert IssuerSettings.from_config(app.config).algorithm == "RS256"
    factors = FactorSettings.from_config(app.config)
    assert factors.webauthn_origins == ("https://login.example.com",)
    assert factors.passkey_login_allowed("acme") and not factors.passkey_login_allowed("initech")
    with pytest.raises(ConfigurationError, match="OWASP"):
        HashingSettings.from_config({"AUTHFLOW_ARGON2_MEMORY_COST": 1024})
    assert (
        HashingSettings.from_config({"AUTHFLOW_ARGON2_MEMORY_COST": 1024, "TESTING": True}).memory_cost
        == 1024
    )
    with pytest.raises(ConfigurationError, match="AUTHFLOW_COOKIE_SECURE=False is refused"):
        SessionSettings.from_config({**app.config, "AUTHFLOW_COOKIE_SECURE": "false"})
    app.debug = True  # DEBUG is read from the same app.config
    assert SessionSettings.from_config({**app.config, "AUTHFLOW_COOKIE_SECURE": "false"}).debug is True


def test_secrets_stay_out_of_every_repr() -> None:
    cfg, _ = _load(
        AUTHFLOW_SESSION_ENCRYPTION_KEY="s" * 32,
        AUTHFLOW_FACTOR_ENCRYPTION_KEY="f" * 32,
        AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY="i" * 32,
        AUTHFLOW_PREVIOUS_SIGNING_KEYS=["p" * 32],
    )
    text = repr(cfg)
    for secret in ("kkkk", "ssss", "ffff", "iiii", "pppp"):
        assert secret not in text


def test_apply_defaults_gives_each_app_its_own_lists() -> None:
    from flask_authflow._settings import apply_defaults

    first: dict[str, object] = {}
    second: dict[str, object] = {}
    apply_defaults(first)
    apply_defaults(second)
    first["AUTHFLOW_TRUSTED_PROXIES"].append("10.0.0.0/8")  # type: ignore[attr-defined]
    assert second["AUTHFLOW_TRUSTED_PROXIES"] == ["127.0.0.0/8", "::1/128"]
    assert DEFAULTS["AUTHFLOW_TRUSTED_PROXIES"] == ["127.0.0.0/8", "::1/128"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"AUTHFLOW_WEBAUTHN_RP_ID": "https://example.com"}, "bare domain"),
        (
            {"AUTHFLOW_WEBAUTHN_RP_ID": "example.com", "AUTHFLOW_WEBAUTHN_ORIGINS": "http://example.com"},
            "http only for localhost",
        ),
        (
            {"AUTHFLOW_WEBAUTHN_RP_ID": "example.com", "AUTHFLOW_WEBAUTHN_ORIGINS": "https://evil.test"},
            "is not on AUTHFLOW_WEBAUTHN_RP_ID",
        ),
        (
            {"AUTHFLOW_WEBAUTHN_RP_ID": "example.com"},
            "set AUTHFLOW_WEBAUTHN_RP_ID and AUTHFLOW_WEBAUTHN_ORIGINS",
        ),
        ({"AUTHFLOW_PASSKEY_LOGIN": True}, "AUTHFLOW_PASSKEY_LOGIN needs WebAuthn"),
        ({"AUTHFLOW_PASSKEY_LOGIN": 3}, "True, False or a list of tenant names"),
        ({"AUTHFLOW_WEBAUTHN_USER_VERIFICATION": "always"}, "'required', 'preferred'"),
        ({"AUTHFLOW_EMAIL_OTP_TTL": timedelta(hours=1)}, "over 30 minutes"),
        ({"AUTHFLOW_EMAIL_OTP_MAX_TRIES": 11}, "between 1 and 10"),
        (
            {"AUTHFLOW_ARGON2_TIME_COST": 11},
            "AUTHFLOW_ARGON2_TIME_COST is above AUTHFLOW_ARGON2_MAX_TIME_COST",
        ),
        ({"AUTHFLOW_PASSWORD_MIN_LENGTH": 7}, "NIST SP 800-63B's minimum"),
        ({"AUTHFLOW_PASSWORD_BLOCKLIST": [1, 2]}, "list of strings"),
        ({"AUTHFLOW_OAUTH_URL_PREFIX": "auth/"}, "a path such as '/auth'"),
        ({"AUTHFLOW_OAUTH_PROVIDERS": "{not json"}, "not valid JSON"),
        ({"AUTHFLOW_OAUTH_PROVIDERS": {"op": "url"}}, "dict of dicts"),
        ({"AUTHFLOW_COOKIE_NAME": 7}, "AUTHFLOW_COOKIE_NAME must be a string"),
        ({"AUTHFLOW_SITE_NAME": 7}, "AUTHFLOW_SITE_NAME must be a string or None"),
        (
            {"AUTHFLOW_FACTOR_ENCRYPTION_KEY": "short"},
            "AUTHFLOW_FACTOR_ENCRYPTION_KEY must be exactly 32 bytes",
        ),
        ({"AUTHFLOW_PREVIOUS_ISSUER_KEY_ENCRYPTION_KEYS": ["x"]}, "every AUTHFLOW_PREVIOUS_ISSUER_KEY_"),
        ({"AUTHFLOW_AUDIT_RETENTION": "a while"}, "AUTHFLOW_AUDIT_RETENTION must be a timedelta"),
        ({"AUTHFLOW_SMTP_HOST": "smtp.example.com"}, "AUTHFLOW_SMTP_FROM is not set"),
    ],
)
def test_every_feature_refuses_with_a_message_naming_the_key(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _load(testing=True, **settings)


def test_no_feature_module_imports_another_features_settings() -> None:
    """A feature's modules read their own settings; only the web layer (config, extension)
    sees every feature's."""
    import ast
    from pathlib import Path

    import flask_authflow

    package = Path(flask_authflow.__file__).parent
    features = {"sessions", "audit", "login", "mfa", "issuer", "federation"}
    crossings = []
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).parts
        if len(parts) < 2 or parts[0] in ("_web", "_cli", "testing"):
            continue  # the web layer composes every feature's settings
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            base = list(parts[:-1])[: len(parts) - 1 - (node.level - 1)] if node.level else ["<abs>"]
            target = (base + node.module.split(".")) if node.level else node.module.split(".")[1:]
            if (
                target[-1:] in (["settings"], ["_settings"])
                and target[:1] != [parts[0]]
                and target[0] in features
            ):
                crossings.append(f"{'/'.join(parts)} imports {'.'.join(target)}")
    assert crossings == []
