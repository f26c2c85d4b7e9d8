"""The device feature without Flask: the device cookie (signature, binding, expiry, key
rotation), labels from User-Agents, and the settings' checks."""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest
from itsdangerous import URLSafeTimedSerializer

from flask_authflow.devices._cookie import COOKIE_SALT, DeviceClaim, DeviceCookie, new_device_id
from flask_authflow.devices._labels import UNKNOWN_DEVICE, device_label
from flask_authflow.devices._settings import DeviceSettings
from flask_authflow.errors import ConfigurationError

KEY = secrets.token_bytes(32)
UA = "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"
CLAIM = DeviceClaim(new_device_id(), "acme", "u1")
YEAR = timedelta(days=365)


def test_a_cookie_reads_back_for_the_same_user_agent_only() -> None:
    cookie = DeviceCookie(KEY, lifetime=YEAR)
    value = cookie.issue(CLAIM, UA)
    assert cookie.read(value, UA).claim == CLAIM and cookie.read(value, UA).refused is None
    assert cookie.read(value, UA + " extra").refused == "ua_mismatch"
    assert cookie.read(value, None).refused == "ua_mismatch"
    # An absent User-Agent is the empty string: bound to it, not a bypass.
    bare = cookie.issue(CLAIM, None)
    assert cookie.read(bare, "").claim == CLAIM and cookie.read(bare, UA).refused == "ua_mismatch"
    assert UA not in value and "Firefox" not in value  # the header itself is never in the cookie


def test_no_cookie_is_no_device_and_no_refusal() -> None:
    cookie = DeviceCookie(KEY, lifetime=YEAR)
    assert cookie.read(None, UA).claim is None and cookie.read(None, UA).refused is None
    assert cookie.read("", UA).refused is None


@pytest.mark.parametrize(
    "value",
    ["garbage", "a.b.c", "x" * 600, "é" * 10, ".eJw.aaa.bbb", "\x00"],
    ids=["garbage", "dots", "too-long", "non-ascii", "bad-zlib", "nul"],
)
def test_malformed_values_are_forged(value: str) -> None:
    assert DeviceCookie(KEY, lifetime=YEAR).read(value, UA).refused == "forged"


def test_another_key_or_salt_or_payload_is_forged() -> None:
    cookie = DeviceCookie(KEY, lifetime=YEAR)
    other_key = DeviceCookie(secrets.token_bytes(32), lifetime=YEAR).issue(CLAIM, UA)
    assert cookie.read(other_key, UA).refused == "forged"
    # Signed with the right key but another purpose's salt (a session-like value): refused.
    other_salt = URLSafeTimedSerializer(KEY, salt="authflow.session").dumps({"d": CLAIM.device_id})
    assert cookie.read(str(other_salt), UA).refused == "forged"
    # The right key and salt, but not a payload this code writes: refused, never an error.
    signer = URLSafeTimedSerializer([KEY], salt=COOKIE_SALT)
    for payload in (
        [1, 2],
        {"d": CLAIM.device_id},
        {"d": "short", "t": "acme", "u": "u1", "f": "ab"},
        {"d": CLAIM.device_id, "t": "", "u": "u1", "f": "ab"},
        {"d": CLAIM.device_id, "t": "acme", "u": 7, "f": "ab"},
        {"d": CLAIM.device_id, "t": "acme", "u": "u1", "f": "ab", "x": 1},
    ):
        assert cookie.read(str(signer.dumps(payload)), UA).refused == "forged", payload
    # One flipped character of a valid value's signature: its first character, whose six
    # bits all count (the last one of a base64 signature carries unused padding bits, so
    # flipping "B" to "A" there can decode to the same bytes and pass).
    value = cookie.issue(CLAIM, UA)
    head, signature = value.rsplit(".", 1)
    flipped = f"{head}.{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"
    assert cookie.read(flipped, UA).refused == "forged"


def test_an_old_cookie_is_expired() -> None:
    value = DeviceCookie(KEY, lifetime=YEAR).issue(CLAIM, UA)
    assert DeviceCookie(KEY, lifetime=timedelta(seconds=-1)).read(value, UA).refused == "expired"


def test_cookies_of_a_previous_key_still_read_and_new_ones_use_the_current_key() -> None:
    old = DeviceCookie(KEY, lifetime=YEAR).issue(CLAIM, UA)
    new_key = secrets.token_bytes(32)
    rotated = DeviceCookie(new_key, [KEY], lifetime=YEAR)
    assert rotated.read(old, UA).claim == CLAIM
    assert rotated.read(old, "another agent").refused == "ua_mismatch"
    fresh = rotated.issue(CLAIM, UA)
    assert DeviceCookie(new_key, lifetime=YEAR).read(fresh, UA).claim == CLAIM
    assert DeviceCookie(KEY, lifetime=YEAR).read(fresh, UA).refused == "forged"


def test_device_ids_are_random_and_well_formed() -> None:
    ids = {new_device_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 43 for i in ids)


@pytest.mark.parametrize(
    ("user_agent", "label"),
    [
        (UA, "Firefox 120 on Ubuntu"),
        (
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 "
            "(KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
            "Mobile Safari 17 on iOS",
        ),
        ("curl/8.4.0", "curl 8"),
        ("", UNKNOWN_DEVICE),
        (None, UNKNOWN_DEVICE),
        ("x" * 5000, UNKNOWN_DEVICE),
        ("\x00\x01 nonsense", UNKNOWN_DEVICE),
    ],
)
def test_labels(user_agent: str | None, label: str) -> None:
    assert device_label(user_agent) == label


def test_settings_defaults_and_refusals() -> None:
    settings = DeviceSettings.from_config({})
    assert settings.cookie_name == "authflow_device" and settings.trust_duration == timedelta(days=30)
    assert settings.cookie_lifetime == YEAR and settings.new_device_mail is False
    refused = {
        "AUTHFLOW_DEVICE_COOKIE_LIFETIME": timedelta(days=401),
        "AUTHFLOW_DEVICE_TRUST_DURATION": timedelta(days=366),
        "AUTHFLOW_DEVICE_COOKIE_NAME": "bad name;",
    }
    for key, value in refused.items():
        with pytest.raises(ConfigurationError, match=key):
            DeviceSettings.from_config({key: value})
    with pytest.raises(ConfigurationError, match="longer than AUTHFLOW_DEVICE_COOKIE_LIFETIME"):
        DeviceSettings.from_config(
            {
                "AUTHFLOW_DEVICE_COOKIE_LIFETIME": timedelta(days=7),
                "AUTHFLOW_DEVICE_TRUST_DURATION": timedelta(days=8),
            }
        )
