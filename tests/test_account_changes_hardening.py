"""Two findings of an attack review: a password change by a user with a second factor needs
the strongest step (a stolen session plus the password is not enough) and keeps only the
session that made it; enrollments cannot pile up (one pending per kind and user)."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from flask_authflow import get_state
from flask_authflow._clock import MockClock
from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow._outcomes import Authenticated, FactorCredential, FactorKind
from flask_authflow.errors import StepUpNeeded
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._service import AuthnService
from flask_authflow.mfa._recovery import RecoveryCodeFactor
from flask_authflow.mfa._sealing import FactorSealer
from flask_authflow.mfa._totp import TotpFactor
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.authn_support import CTX, new_session
from tests.test_views import FIREFOX, PASSWORD, FixedCode, Site, account_token, csrf_of, login, make_site

NEW = "a brand new passphrase"


def change(client: FlaskClient, current: str = PASSWORD) -> TestResponse:
    token = account_token(client)
    return client.post(
        "/account/password",
        data={
            "current_password": current,
            "new_password": NEW,
            "new_password_confirm": NEW,
            "csrf_token": token,
        },
    )


def signed_in_with_code(site: Site, user_agent: str) -> FlaskClient:
    client = site.client(user_agent)
    login(client)
    page = client.get("/login/factor")
    done = client.post("/login/factor", data={"code": "123456", "csrf_token": csrf_of(page.text)})
    assert done.status_code == 302
    return client


@pytest.fixture
def mfa_site(app_factory: AppFactory) -> Site:
    site = make_site(app_factory)
    get_state(site.app).service.register_factor(FixedCode("123456"))
    site.backend.enroll_factor("default", site.user_id(), FactorKind.TOTP, "seed")
    return site


def test_an_old_session_with_the_password_cannot_change_it(mfa_site: Site, mock_clock: MockClock) -> None:
    mine = signed_in_with_code(mfa_site, FIREFOX)
    victim = signed_in_with_code(mfa_site, "victim's browser")
    mock_clock.advance(timedelta(minutes=11))  # the second factor was passed long ago
    refused = change(mine)
    assert refused.status_code == 302 and refused.location == "/step-up?next=/account"
    assert len(mfa_site.sessions()) == 2  # nothing ended
    assert victim.get("/account").status_code == 200
    assert login(mfa_site.client()).status_code == 302  # the old password still works
    # A password step-up is not the strongest step: still refused.
    page = mine.get("/step-up?next=/account")
    token = csrf_of(page.text)
    weak = mine.post("/step-up", data={"password": PASSWORD, "csrf_token": token})
    assert weak.status_code == 400
    assert change(mine).location == "/step-up?next=/account"
    # The second factor again: the change goes through and only this session stays.
    done = mine.post(
        "/step-up", data={"kind": "totp", "code": "123456", "next": "/account", "csrf_token": token}
    )
    assert done.status_code == 302
    changed = change(mine)
    assert changed.location == "/account?notice=password_changed"
    [left] = mfa_site.sessions()
    assert left.state is AuthState.AUTHENTICATED
    assert mine.get("/account").status_code == 200
    assert victim.get("/account").status_code == 401
    assert login(mfa_site.client(), password=NEW).status_code == 302


def test_a_fresh_login_with_the_second_factor_may_change_the_password(mfa_site: Site) -> None:
    mine = signed_in_with_code(mfa_site, FIREFOX)
    assert change(mine).location == "/account?notice=password_changed"


def test_a_password_only_user_changes_it_with_the_current_password(
    app_factory: AppFactory, mock_clock: MockClock
) -> None:
    site = make_site(app_factory)
    mine = site.client(FIREFOX)
    login(mine)
    mock_clock.advance(timedelta(minutes=11))  # older than AUTHFLOW_FRESHNESS
    assert change(mine, "wrong").status_code == 401
    assert change(mine).location == "/account?notice=password_changed"


def test_check_password_change_refuses_a_guest() -> None:
    backend = InMemoryBackend()
    service = AuthnService(
        backend, backend, hasher=PasswordHasher.fast_for_tests(), clock=MockClock(), account_tokens=backend
    )
    clock = service.clock
    assert isinstance(clock, MockClock)
    with pytest.raises(StepUpNeeded):
        service.with_audit_context(CTX).check_password_change(new_session(clock))


# --- one pending enrollment per kind ------------------------------------------------------------

STARTS = 12


def enrolling_service(backend: InMemoryBackend | SqlAlchemyBackend) -> tuple[AuthnService, MockClock, str]:
    clock = MockClock()
    sealer = FactorSealer.from_key(b"k" * 32)
    service = AuthnService(
        backend, backend, hasher=PasswordHasher.fast_for_tests(), clock=clock, account_tokens=backend
    )
    service.register_factor(TotpFactor(sealer))
    service.register_factor(RecoveryCodeFactor(sealer))
    user = add_user(backend, "acme", "alice", PASSWORD)
    return service, clock, user.user_id


def signed_in(service: AuthnService, clock: MockClock) -> AuthSession:
    session = new_session(clock)
    handle = service.with_audit_context(CTX)
    handle.begin_login("alice", "acme", session)
    with FactorCredential.password(PASSWORD) as credential:
        assert isinstance(handle.verify_factor(credential, session), Authenticated)
    return session


@pytest.mark.parametrize("store", ["memory", "sqlite"])
@pytest.mark.parametrize("kind", [FactorKind.TOTP, FactorKind.RECOVERY_CODE])
def test_parallel_enrollment_starts_leave_one_pending(store: str, kind: FactorKind, tmp_path: Path) -> None:
    backend = (
        InMemoryBackend() if store == "memory" else SqlAlchemyBackend(f"sqlite:///{tmp_path / 'enroll.db'}")
    )
    service, clock, user_id = enrolling_service(backend)
    sessions = [signed_in(service, clock) for _ in range(STARTS)]
    barrier = threading.Barrier(STARTS)
    errors: list[BaseException] = []
    started: list[str] = []

    def start(session: AuthSession) -> None:
        try:
            barrier.wait(30)
            begun = service.with_audit_context(CTX).begin_enrollment(session, kind)
            started.append(begun.factor_id)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert len(started) == STARTS
    pending = [
        c
        for c in backend.list_user_factors("acme", user_id, kind=kind, include_pending=True)
        if not c.confirmed
    ]
    assert len(pending) == 1 and pending[0].factor_id in started
    # Starting again replaces it.
    again = service.with_audit_context(CTX).begin_enrollment(sessions[0], kind)
    [left] = backend.list_user_factors("acme", user_id, kind=kind, include_pending=True)
    assert left.factor_id == again.factor_id != pending[0].factor_id
    if isinstance(backend, SqlAlchemyBackend):
        backend.close()


def test_a_replaced_enrollment_cannot_be_confirmed() -> None:
    backend = InMemoryBackend()
    service, clock, user_id = enrolling_service(backend)
    session = signed_in(service, clock)
    handle = service.with_audit_context(CTX)
    first = handle.begin_enrollment(session, FactorKind.RECOVERY_CODE)
    second = handle.begin_enrollment(session, FactorKind.RECOVERY_CODE)
    assert backend.get_factor("acme", user_id, first.factor_id) is None
    assert backend.get_factor("acme", user_id, second.factor_id) is not None
