"""The same work for answers that must not be told apart (issue 28, point 4).

* A wrong password for an account still on a legacy hash took 3-5 times an unknown user's
  answer. Now every refused password check does one Argon2id verification and one legacy
  verification of the same scheme and cost, real or dummy (native, legacy and unknown).
* ``/signup/resend`` for a pending sign-up took about twice the answer for anyone else.
  Now both read the same, make a token, commit one audit row and compose the mail.

Nothing here is timed (benchmarks/login.py measures what is left): the real classes are
instrumented to record which hashers ran, on which hashes, and which store calls were made.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from flask import template_rendered

from flask_authflow._outcomes import InvalidCredential
from flask_authflow._web.state import get_state
from flask_authflow.login._legacy_hashes import LegacyHashes, identify
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.test_legacy_hashes import MAKERS, MALFORMED, PASSWORD, CountingHasher, login, service_with
from tests.test_signup import sign_up
from tests.test_views import Site, make_site

WRONG = "not the password at all"
#: The schemes whose hashes the suite's makers build cheaply, and one of each kind of library.
SCHEMES = ("bcrypt", "pbkdf2_sha256", "sha512_crypt", "werkzeug", "django_pbkdf2_sha256", "argon2")


class RecordingLegacy(LegacyHashes):
    """The real legacy verifier, recording the (scheme, hash) of each verification."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.verified: list[tuple[str, str]] = []

    def _verify_one(self, scheme: str, stored: str, candidate: bytes) -> bool:
        self.verified.append((scheme, stored))
        return super()._verify_one(scheme, stored, candidate)


def _work(service: Any, legacy: RecordingLegacy, password: str, identifier: str) -> tuple[int, int]:
    hasher = service.hasher
    assert isinstance(hasher, CountingHasher)
    hasher.computed = 0
    legacy.verified.clear()
    assert isinstance(login(service, password, identifier=identifier), InvalidCredential)
    return hasher.computed, len(legacy.verified)


def _add(backend: InMemoryBackend, identifier: str, stored: str | None = None) -> None:
    user = add_user(backend, "acme", identifier, PASSWORD)
    if stored is not None:
        backend.set_password_hash("acme", user.user_id, stored)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_legacy_native_and_unknown_users_do_the_same_work(scheme: str) -> None:
    stored = MAKERS[scheme](PASSWORD)
    legacy = RecordingLegacy([scheme])
    service, backend = service_with(stored, legacy=legacy)  # alice: on the legacy hash
    _add(backend, "nina")  # on Argon2id

    on_legacy = _work(service, legacy, WRONG, "alice")
    assert on_legacy == (1, 1)  # her legacy verify, and the Argon2id dummy
    assert legacy.verified == [(scheme, stored)]
    native = _work(service, legacy, WRONG, "nina")
    assert legacy.verified == [(scheme, stored)]  # the legacy dummy: her scheme, her cost
    unknown = _work(service, legacy, WRONG, "mallory")
    assert legacy.verified == [(scheme, stored)]
    assert on_legacy == native == unknown


def test_before_any_legacy_hash_the_dummy_is_of_the_first_listed_scheme() -> None:
    legacy = RecordingLegacy(["pbkdf2_sha256", "bcrypt"])
    service, _ = service_with(None, legacy=legacy)
    assert _work(service, legacy, WRONG, "mallory") == (1, 1)
    assert [identify(stored) for _, stored in legacy.verified] == ["pbkdf2_sha256"]
    assert _work(service, legacy, WRONG, "alice") == (1, 1)


def test_a_malformed_legacy_row_does_the_same_work_too() -> None:
    legacy = RecordingLegacy(["bcrypt"])
    service, backend = service_with(MALFORMED["bcrypt"], legacy=legacy)
    _add(backend, "nina")
    assert _work(service, legacy, WRONG, "alice") == _work(service, legacy, WRONG, "mallory") == (1, 1)


def test_a_non_ascii_password_does_as_many_verifications_everywhere() -> None:
    typed = "a wrong password \u2163 long enough"  # NFKC and NFKD read the numeral as "IV"
    legacy = RecordingLegacy(["pbkdf2_sha256"])
    service, backend = service_with(MAKERS["pbkdf2_sha256"](PASSWORD), legacy=legacy)
    _add(backend, "nina")
    works = {name: _work(service, legacy, typed, name) for name in ("alice", "nina", "mallory")}
    assert len(set(works.values())) == 1, works


def test_without_legacy_schemes_nothing_extra_is_done() -> None:
    service, _ = service_with(None, legacy=None)
    hasher = service.hasher
    assert isinstance(hasher, CountingHasher)
    hasher.computed = 0
    assert isinstance(login(service, WRONG, identifier="mallory"), InvalidCredential)
    assert hasher.computed == 1


# --- /signup/resend ---------------------------------------------------------------------------


class _StoreCalls:
    """Records the store methods a request calls (the real store's, wrapped on its class)."""

    NAMES = (
        "find_user",
        "find_user_by_email",
        "get_user",
        "has_account_token",
        "issue_account_token",
        "begin_unit",
        "write",
    )

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for name in self.NAMES:
            real = getattr(InMemoryBackend, name)
            monkeypatch.setattr(InMemoryBackend, name, self._wrap(name, real))

    def _wrap(self, name: str, real: Any) -> Any:
        def wrapped(store: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return real(store, *args, **kwargs)

        return wrapped


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    made = make_site(app_factory, AUTHFLOW_REGISTRATION=True, AUTHFLOW_EXTERNAL_URL="https://app.example.com")
    get_state(made.app).mail_sender = Outbox()
    return made


def _resend_work(site: Site, calls: _StoreCalls, body: dict[str, str]) -> tuple[Counter[str], list[str], int]:
    rendered: list[str] = []

    def record(sender: Any, template: Any, context: Any, **extra: Any) -> None:
        rendered.append(str(template.name))

    calls.calls.clear()
    rows = len(site.backend.audit_rows)
    with template_rendered.connected_to(record, site.app):
        answer = site.client().post("/signup/resend", json=body)
    assert answer.status_code == 202 and answer.json == {"status": "sent_if_pending"}
    return Counter(calls.calls), rendered, len(site.backend.audit_rows) - rows


def test_resend_does_the_same_work_for_a_pending_sign_up_and_for_anyone_else(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    sign_up(site, "carol", "carol@example.com")
    calls = _StoreCalls(monkeypatch)
    pending = _resend_work(site, calls, {"username": "carol"})
    unknown = _resend_work(site, calls, {"username": "nobody"})
    verified = _resend_work(site, calls, {"username": "alice"})
    assert pending[1] == unknown[1] == verified[1] != []  # the same mail composed
    assert pending[2] == unknown[2] == verified[2] == 1  # one audit row, in one unit of work
    # The same store calls, but for the pending sign-up's stored token (and the read that
    # tells a pending sign-up: an account without a verified address).
    assert pending[0] - Counter(["issue_account_token", "has_account_token"]) == unknown[0]
    assert unknown[0] == verified[0]
    assert unknown[0]["begin_unit"] == pending[0]["begin_unit"] == 1
