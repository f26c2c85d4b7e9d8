"""``flask authflow devices list|forget|untrust``: an operator sees a user's devices,
forgets one and ends trusts, each audited; bad input is a clean error, never a traceback."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from flask.testing import FlaskClient

from flask_authflow.devices._cookie import new_device_id
from tests.appfactory import AppFactory
from tests.test_devices_web import CHROME, FIREFOX, Site, login, make_device_site, rows, sign_in, sign_out


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    return make_device_site(app_factory)


def run(site: Site, *args: str) -> tuple[int, str]:
    result = site.app.test_cli_runner().invoke(args=["authflow", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def trusted_browser(site: Site) -> FlaskClient:
    client = site.client(FIREFOX)
    sign_in(client, trust=True)
    sign_out(client)
    return client


def test_list_shows_the_devices(site: Site) -> None:
    trusted_browser(site)
    site.clock.advance(timedelta(minutes=1))
    sign_in(site.client(CHROME))
    code, output = run(site, "devices", "list", "alice", "--json")
    assert code == 0
    listed = json.loads(output)
    assert [d["label"] for d in listed] == ["Chrome 131 on Windows", "Firefox 120 on Ubuntu"]
    assert listed[0]["trusted_until"] is None and listed[1]["trusted_until"] is not None
    code, text = run(site, "devices", "list", "alice")
    assert code == 0 and text.rstrip().endswith("2 device(s)") and "trusted until" in text
    assert run(site, "devices", "list", "nobody")[0] == 1


def test_untrust_ends_the_trust_and_is_audited(site: Site) -> None:
    client = trusted_browser(site)
    code, output = run(site, "devices", "untrust", "alice", "--json")
    assert code == 0 and json.loads(output)["trusts_ended"] == 1
    [row] = rows(site, "device_trust_ended")
    assert row.reason == "revoked_by_operator" and row.user_id == site.user_id()
    assert login(client).location.startswith("/login/factor")  # the TOTP step again
    assert json.loads(run(site, "devices", "untrust", "alice", "--json")[1])["trusts_ended"] == 0


def test_forget_removes_one_device(site: Site) -> None:
    client = trusted_browser(site)
    [device] = site.backend.list_devices("default", site.user_id())
    code, output = run(site, "devices", "forget", "alice", device.device_id)
    assert code == 0 and device.device_id in output
    assert site.backend.list_devices("default", site.user_id()) == []
    [row] = rows(site, "device_forgotten")
    assert row.reason == f"device={device.device_id}"
    assert login(client).location.startswith("/login/factor")
    # Twice, a malformed id, an unknown user: clean errors with exit status 1 or 2.
    code, output = run(site, "devices", "forget", "alice", device.device_id)
    assert code == 1 and "has no device" in output
    code, output = run(site, "devices", "forget", "alice", "not-a-device", "--json")
    assert code == 2
    assert run(site, "devices", "forget", "nobody", device.device_id)[0] == 1
    assert run(site, "devices", "untrust", "alice", "../../etc")[0] == 2


def test_new_device_ids_never_look_like_an_option() -> None:
    """The command line reads an argument that begins with ``-`` as an option: one id in 64
    did, and ``devices forget`` then failed as a usage error (seen in CI)."""
    ids = [new_device_id() for _ in range(4096)]  # with the old ids: 64 begin with "-"
    assert not [device_id for device_id in ids if device_id.startswith("-")]
    assert len(set(ids)) == len(ids) and {len(device_id) for device_id in ids} == {43}
