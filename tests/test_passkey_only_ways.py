"""Passkey-only accounts keep a way to sign in (issue 31.2): the last passkey of an account
without a password or a linked provider cannot be removed, and parallel removals of the
last two take turns (threads on the memory store and SQLite, processes on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.factors import Rejected
from flask_authflow._core.session import AuthSession, SessionRecord
from flask_authflow._outcomes import Authenticated, FactorCredential, FactorKind
from flask_authflow.authz import AuthzSettings, Entity, Evaluator, Principal, load_policies
from flask_authflow.login._service import AuthnRequest, AuthnService
from flask_authflow.login._sign_in_ways import LastSignInWay
from flask_authflow.mfa._webauthn import WebAuthnFactor, WebAuthnSettings
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from tests.authn_support import CTX, FAST_HASHER, fast_hasher, new_session
from tests.concurrency import run_together
from tests.parts import child_processes
from tests.webauthn_soft import SoftAuthenticator

SETTINGS = WebAuthnSettings(rp_id="example.com", rp_name="Example", origins=("https://example.com",))
WEBAUTHN = FactorKind.WEBAUTHN


@dataclass
class Env:
    service: AuthnService
    backend: InMemoryBackend | SqlAlchemyBackend
    clock: MockClock
    user_id: str

    @property
    def handle(self) -> AuthnRequest:
        return self.service.with_audit_context(CTX)

    def passkeys(self) -> list[str]:
        return [f.factor_id for f in self.backend.list_factors("acme", self.user_id) if f.kind is WEBAUTHN]


def add_passkey(service: AuthnService, backend: Any, user_id: str, now: Any) -> tuple[SoftAuthenticator, str]:
    """A passkey made as a passkey sign-up makes it (a discoverable credential, user verified)."""
    factor = service.factor(WEBAUTHN)
    assert isinstance(factor, WebAuthnFactor)
    key = SoftAuthenticator()
    options, slot = factor.signup_options("dora", now)
    attestation, _ = key.register(options["publicKey"])
    record = factor.signup_credential(slot, FactorCredential(WEBAUTHN, attestation), user_id, now)
    assert not isinstance(record, Rejected)
    backend.add_factor("acme", record)
    return key, record.factor_id


@pytest.fixture(params=["memory", "sqlite"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    clock = MockClock()
    backend: InMemoryBackend | SqlAlchemyBackend
    if request.param == "memory":
        backend = InMemoryBackend(clock=clock)
    else:
        backend = SqlAlchemyBackend(f"sqlite:///{tmp_path / 'authflow.db'}", clock=clock)
    service = AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend)
    service.register_factor(WebAuthnFactor(SETTINGS))
    service.passkey_login_allowed = lambda tenant: True
    user = backend.create_user("acme", "dora")  # no password
    yield Env(service, backend, clock, user.user_id)
    if isinstance(backend, SqlAlchemyBackend):
        backend.close()


def signed_in(env: Env, key: SoftAuthenticator) -> AuthSession:
    session = new_session(env.clock)
    options = env.handle.begin_passkey_login("acme", session)["publicKey"]
    outcome = env.handle.finish_passkey_login(FactorCredential(WEBAUTHN, key.assert_(options)), session)
    assert outcome == Authenticated(env.user_id, "acme")
    return session


def test_the_last_passkey_of_a_passwordless_account_stays(env: Env) -> None:
    first, first_id = add_passkey(env.service, env.backend, env.user_id, env.clock.now())
    _, second_id = add_passkey(env.service, env.backend, env.user_id, env.clock.now())
    session = signed_in(env, first)
    assert env.handle.disable_factor(session, second_id) is True  # another passkey is left
    with pytest.raises(LastSignInWay) as refused:
        env.handle.disable_factor(session, first_id)
    assert refused.value.code == "last_sign_in_method" and refused.value.status == 409
    assert env.passkeys() == [first_id]
    row = [r for r in env.backend.audit_rows if r.event == "factor_disabled"][-1]
    assert (row.status, row.reason) == ("refused", "last_sign_in_method")


@pytest.mark.parametrize("other_way", ["password", "provider link"])
def test_the_last_passkey_goes_when_another_way_is_left(env: Env, other_way: str) -> None:
    key, key_id = add_passkey(env.service, env.backend, env.user_id, env.clock.now())
    session = signed_in(env, key)
    if other_way == "password":
        env.backend.set_password_hash("acme", env.user_id, fast_hasher().hash("a long enough passphrase"))
    else:
        env.service.linked_identities = lambda tenant, user_id: user_id == env.user_id
    assert env.handle.disable_factor(session, key_id) is True
    assert env.passkeys() == []


def test_two_parallel_removals_of_the_last_two_passkeys_have_one_winner(env: Env) -> None:
    for _ in range(3):  # rounds: each starts from two passkeys
        keys = [add_passkey(env.service, env.backend, env.user_id, env.clock.now()) for _ in range(2)]
        sessions = [signed_in(env, key) for key, _ in keys]

        def remove(session: AuthSession, factor_id: str) -> bool | str:
            try:
                return env.handle.disable_factor(session, factor_id)
            except LastSignInWay as error:
                return error.code

        results = run_together(
            [lambda s=s, f=f: remove(s, f) for s, (_, f) in zip(sessions, keys, strict=True)]
        )
        assert sorted(map(str, results)) == ["True", "last_sign_in_method"]
        left = env.passkeys()
        assert len(left) == 1
        winner = results.index(True)
        assert left == [keys[1 - winner][1]]
        env.backend.delete_factor("acme", env.user_id, left[0])  # the next round starts afresh


# --- several processes on PostgreSQL --------------------------------------------------------------

SPAWN = child_processes()
PROCESSES = 2


def _remover(url: str, record: SessionRecord, factor_id: str, barrier: Any, out: Any) -> None:
    """Remove one passkey of the account at the same moment as the other processes."""
    backend = SqlAlchemyBackend(url, create_tables=False)
    try:
        clock = MockClock(record.authenticated_at)  # the parent's time: the sign-in is fresh
        service = AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend)
        service.register_factor(WebAuthnFactor(SETTINGS))
        session = AuthSession(record, new=False, request_fingerprint="fp")
        barrier.wait(60)
        try:
            out.put(service.with_audit_context(CTX).disable_factor(session, factor_id))
        except LastSignInWay as error:
            out.put(error.code)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
        barrier.abort()
        out.put(repr(exc))
    finally:
        backend.close()


@pytest.mark.multiprocess
def test_parallel_removals_in_several_processes_leave_one_passkey(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        clock = MockClock()
        service = AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend)
        service.register_factor(WebAuthnFactor(SETTINGS))
        service.passkey_login_allowed = lambda tenant: True
        user_id = backend.create_user("acme", "dora").user_id
        env = Env(service, backend, clock, user_id)
        keys = [add_passkey(service, backend, user_id, clock.now()) for _ in range(PROCESSES)]
        records = [signed_in(env, key).record for key, _ in keys]
        barrier, out = SPAWN.Barrier(PROCESSES), SPAWN.Queue()
        processes = [
            SPAWN.Process(target=_remover, args=(url, record, factor_id, barrier, out))
            for record, (_, factor_id) in zip(records, keys, strict=True)
        ]
        for process in processes:
            process.start()
        results = [out.get(timeout=120) for _ in processes]
        for process in processes:
            process.join(30)
            assert process.exitcode == 0
        assert sorted(map(str, results)) == ["True"] * (PROCESSES - 1) + ["last_sign_in_method"], results
        assert len(env.passkeys()) == 1
    finally:
        backend.close()


# --- a passkey-only account is phishing-resistant ------------------------------------------------


def test_a_passkey_sign_in_is_phishing_resistant_for_policies(env: Env, tmp_path: Path) -> None:
    key, _ = add_passkey(env.service, env.backend, env.user_id, env.clock.now())
    session = signed_in(env, key)
    assert session.record.factors_passed == ("passkey",)
    policy = tmp_path / "strong.cedar"
    policy.write_text(
        '@id("phishing-resistant-only")\n'
        'permit(principal, action == Action::"wire", resource)\n'
        "when { principal.session.phishing_resistant };\n",
        encoding="utf-8",
    )
    evaluator = Evaluator(load_policies(AuthzSettings(policies=(str(policy),), schema=None)))
    now = env.clock.now()

    def allowed(factors: tuple[str, ...]) -> bool:
        principal = Principal(id=env.user_id, tenant="acme", authenticated_at=now, factors=factors)
        return evaluator.decide(principal, "wire", Entity("Payment", "1", {}), now=now).allowed

    assert allowed(session.record.factors_passed)  # the passkey sign-in itself
    assert allowed(("password", "webauthn"))  # a security key after the password
    assert not allowed(("password", "totp")) and not allowed(("password",))


def test_a_step_up_of_a_passkey_only_account_asks_for_its_passkey(env: Env) -> None:
    key, _ = add_passkey(env.service, env.backend, env.user_id, env.clock.now())
    session = signed_in(env, key)
    env.clock.advance(timedelta(hours=1))
    required = env.handle.begin_step_up(session, strongest=True)
    assert required.factors == (WEBAUTHN,)  # no password to fall back to: the passkey again
    options = env.handle.challenge(WEBAUTHN, session).challenges[WEBAUTHN]["publicKey"]
    outcome = env.handle.verify_factor(FactorCredential(WEBAUTHN, key.assert_(options)), session)
    assert outcome == Authenticated(env.user_id, "acme")
    assert (
        session.record.factors_passed[-1] == "webauthn" and session.record.authenticated_at == env.clock.now()
    )


def test_lock_user_names_only_a_user_of_the_tenant(env: Env) -> None:
    unit = env.backend.begin_unit()
    try:
        assert env.backend.lock_user("acme", env.user_id) is True
        assert env.backend.lock_user("globex", env.user_id) is False  # another tenant's view
        assert env.backend.lock_user("acme", "no-such-user") is False
    finally:
        unit.rollback()
