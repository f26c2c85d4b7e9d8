"""The store contract of devices (``DeviceStore``).

Mixed into a test class whose module gives ``backend`` and ``clock`` fixtures
(tests/test_store_contracts.py runs it on every adapter).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flask_authflow._core.ports import DeviceRecord, DeviceStore
from flask_authflow.errors import InvalidInput, UserNotFound
from flask_authflow.testing._users import add_user
from tests.protocols import missing_members
from tests.store_contract import T0


class DevicesContract:
    """A user's devices: recorded, listed, trusted, forgotten."""

    def test_implements_the_port(self, backend: Any) -> None:
        assert missing_members(backend, DeviceStore) == []

    def test_devices_are_recorded_listed_and_forgotten(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        laptop, phone = "L" * 22, "P" * 22
        assert backend.touch_device(
            "acme", alice.user_id, laptop, label="Firefox on Ubuntu", place=None, now=T0
        )
        later = T0 + timedelta(hours=1)
        assert backend.touch_device(
            "acme", alice.user_id, phone, label="Safari on iOS", place="Berlin", now=later
        )
        # The known device: not new; last seen, label and place follow the newest sign-in.
        again = T0 + timedelta(hours=2)
        assert not backend.touch_device(
            "acme", alice.user_id, laptop, label="Firefox 2", place="Paris", now=again
        )
        assert backend.list_devices("acme", alice.user_id) == [
            DeviceRecord("acme", alice.user_id, laptop, "Firefox 2", T0, again, "Paris"),
            DeviceRecord("acme", alice.user_id, phone, "Safari on iOS", later, later, "Berlin"),
        ]
        assert backend.get_device("acme", alice.user_id, phone) == DeviceRecord(
            "acme", alice.user_id, phone, "Safari on iOS", later, later, "Berlin"
        )
        assert backend.forget_device("acme", alice.user_id, phone)
        assert not backend.forget_device("acme", alice.user_id, phone)
        assert backend.get_device("acme", alice.user_id, phone) is None
        assert [d.device_id for d in backend.list_devices("acme", alice.user_id)] == [laptop]

    def test_device_trust_starts_and_ends(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        one, two = "a" * 22, "b" * 22
        until = T0 + timedelta(days=30)
        assert not backend.trust_device("acme", alice.user_id, one, until)  # unknown device
        for device in (one, two):
            backend.touch_device("acme", alice.user_id, device, label="x", place=None, now=T0)
            assert backend.trust_device("acme", alice.user_id, device, until)
        record = backend.get_device("acme", alice.user_id, one)
        assert record.trusted_until == until
        assert record.trusted_at(T0) and not record.trusted_at(until)
        # A new sign-in from a trusted device keeps its trust.
        backend.touch_device("acme", alice.user_id, one, label="y", place=None, now=T0 + timedelta(days=1))
        assert backend.get_device("acme", alice.user_id, one).trusted_until == until
        assert backend.end_device_trust("acme", alice.user_id, one) == 1
        assert backend.get_device("acme", alice.user_id, one).trusted_until is None
        assert backend.get_device("acme", alice.user_id, two).trusted_until == until
        assert backend.end_device_trust("acme", alice.user_id) == 1  # the other one
        assert backend.end_device_trust("acme", alice.user_id) == 0
        assert all(d.trusted_until is None for d in backend.list_devices("acme", alice.user_id))

    def test_devices_are_per_user_and_tenant_and_refuse_bad_input(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        bob = add_user(backend, "acme", "bob", "pw")
        shared = "s" * 22
        backend.touch_device("acme", alice.user_id, shared, label="x", place=None, now=T0)
        backend.trust_device("acme", alice.user_id, shared, T0 + timedelta(days=1))
        assert backend.get_device("acme", bob.user_id, shared) is None
        assert backend.get_device("other", alice.user_id, shared) is None
        assert not backend.forget_device("acme", bob.user_id, shared)
        assert backend.end_device_trust("acme", bob.user_id) == 0
        assert backend.get_device("acme", alice.user_id, shared).trusted_until is not None
        with pytest.raises(UserNotFound):
            backend.touch_device("other", alice.user_id, shared, label="x", place=None, now=T0)
        with pytest.raises(UserNotFound):
            backend.touch_device("acme", "no-such-user", shared, label="x", place=None, now=T0)
        for bad in ("", "short", "x" * 65, "a" * 21 + "!", "a" * 22 + "\n", None):
            with pytest.raises(InvalidInput):
                backend.touch_device("acme", alice.user_id, bad, label="x", place=None, now=T0)
            with pytest.raises(InvalidInput):
                backend.get_device("acme", alice.user_id, bad)
        # Labels and places are cut to their columns and lose control characters.
        backend.touch_device("acme", bob.user_id, shared, label="L\x00" + "x" * 300, place="p" * 300, now=T0)
        record = backend.get_device("acme", bob.user_id, shared)
        assert record.label == "L?" + "x" * 126 and record.place == "p" * 128

    def test_deleting_a_user_removes_its_devices(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.touch_device("acme", alice.user_id, "d" * 22, label="x", place=None, now=T0)
        backend.delete_user("acme", "alice")
        assert backend.list_devices("acme", alice.user_id) == []
        again = add_user(backend, "acme", "alice", "pw")
        assert backend.list_devices("acme", again.user_id) == []

    def test_a_rolled_back_unit_leaves_no_device(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        unit = backend.begin_unit()
        backend.touch_device("acme", alice.user_id, "u" * 22, label="x", place=None, now=T0)
        unit.rollback()
        assert backend.list_devices("acme", alice.user_id) == []
