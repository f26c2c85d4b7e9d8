"""Legacy password hashes: verified when their scheme is enabled, replaced by Argon2id at the
next successful login, refused (never computed) over the cost ceilings."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any

import pytest
from passlib import hash as passlib_hash  # type: ignore[import-untyped]
from werkzeug.security import generate_password_hash

from flask_authflow import AuthFlow
from flask_authflow._clock import MockClock
from flask_authflow._outcomes import Authenticated, FactorCredential, InvalidCredential
from flask_authflow._web.state import get_state
from flask_authflow.errors import ConfigurationError
from flask_authflow.login._legacy_hashes import (
    LEGACY_SCHEMES,
    LegacyCeilings,
    LegacyHashes,
    LegacyResult,
    fst_hmac,
    identify,
)
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._service import AuthnService
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user
from tests.appfactory import base_app
from tests.authn_support import CTX, new_session

PASSWORD = "correct horse battery staple"
SALT = "fst-salt-of-the-old-app"


def _argon2(secret: str | bytes) -> str:
    return str(passlib_hash.argon2.using(type="I", memory_cost=64, rounds=1, parallelism=1).hash(secret))


#: Cheap hashes of a password made the way each scheme's own software makes them.
MAKERS: dict[str, Callable[[str | bytes], str]] = {
    "bcrypt": lambda s: str(passlib_hash.bcrypt.using(rounds=4).hash(s)),
    "argon2": _argon2,
    "pbkdf2_sha256": lambda s: str(passlib_hash.pbkdf2_sha256.using(rounds=1000).hash(s)),
    "pbkdf2_sha512": lambda s: str(passlib_hash.pbkdf2_sha512.using(rounds=1000).hash(s)),
    "sha256_crypt": lambda s: str(passlib_hash.sha256_crypt.using(rounds=1000).hash(s)),
    "sha512_crypt": lambda s: str(passlib_hash.sha512_crypt.using(rounds=1000).hash(s)),
    "werkzeug": lambda s: generate_password_hash(str(s), "scrypt:1024:8:1"),
    "django_pbkdf2_sha256": lambda s: str(passlib_hash.django_pbkdf2_sha256.using(rounds=1000).hash(s)),
    "django_argon2": lambda s: "argon2" + _argon2(s),
    "django_bcrypt_sha256": lambda s: str(passlib_hash.django_bcrypt_sha256.using(rounds=4).hash(s)),
    "django_bcrypt": lambda s: str(passlib_hash.django_bcrypt.using(rounds=4).hash(s)),
}
WERKZEUG_PBKDF2 = generate_password_hash(PASSWORD, "pbkdf2:sha256:1000")

#: A hash of each scheme whose stored cost is over the default ceilings (seconds or more).
OVER_COST: dict[str, str] = {
    "bcrypt": "$2b$14$" + "a" * 53,
    "argon2": "$argon2i$v=19$m=4194304,t=3,p=4$c29tZXNhbHRzb21lc2FsdA$" + "a" * 43,
    "pbkdf2_sha256": re.sub(r"\$1000\$", "$2000001$", MAKERS["pbkdf2_sha256"](PASSWORD)),
    "pbkdf2_sha512": re.sub(r"\$1000\$", "$1000001$", MAKERS["pbkdf2_sha512"](PASSWORD)),
    "sha256_crypt": MAKERS["sha256_crypt"](PASSWORD).replace("rounds=1000$", "rounds=999999999$"),
    "sha512_crypt": MAKERS["sha512_crypt"](PASSWORD).replace("rounds=1000$", "rounds=1000001$"),
    "werkzeug": MAKERS["werkzeug"](PASSWORD).replace("scrypt:1024:8:1", "scrypt:1048576:8:1"),
    "django_pbkdf2_sha256": MAKERS["django_pbkdf2_sha256"](PASSWORD).replace("$1000$", "$5000000$"),
    "django_argon2": "argon2$argon2id$v=19$m=4194304,t=3,p=4$c29tZXNhbHRzb21lc2FsdA$" + "a" * 43,
    "django_bcrypt_sha256": "bcrypt_sha256$$2b$14$" + "a" * 53,
    "django_bcrypt": "bcrypt$$2b$14$" + "a" * 53,
}
MALFORMED: dict[str, str] = {
    "bcrypt": "$2b$12$tooshort",
    "argon2": "$argon2i$v=19$m=oops",
    "pbkdf2_sha256": "$pbkdf2-sha256$many$salt$hash",
    "pbkdf2_sha512": "$pbkdf2-sha512$",
    "sha256_crypt": "$5$rounds=x$salt$" + "!" * 43,
    "sha512_crypt": "$6$salt",
    "werkzeug": "scrypt:3000:8:1$salt$abcd",
    "django_pbkdf2_sha256": "pbkdf2_sha256$x$salt$hash",
    "django_argon2": "argon2$argon2id$v=19$m=oops",
    "django_bcrypt_sha256": "bcrypt_sha256$$2b$12$tooshort",
    "django_bcrypt": "bcrypt$$2b$12$tooshort",
}


class CountingHasher(PasswordHasher):
    """The fast test hasher, counting Argon2 computations."""

    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1, hash_len=16, salt_len=16)
        self.computed = 0

    def _verify(self, hash: str, data: bytes) -> bool:
        self.computed += 1
        return super()._verify(hash, data)


def service_with(stored: str | None, *, legacy: LegacyHashes | None) -> tuple[AuthnService, InMemoryBackend]:
    clock = MockClock()
    hasher = CountingHasher()
    backend = InMemoryBackend(clock=clock)
    user = add_user(backend, "acme", "alice", PASSWORD, hasher=hasher)
    if stored is not None:
        backend.set_password_hash("acme", user.user_id, stored)
    service = AuthnService(
        backend, backend, hasher=hasher, clock=clock, legacy_hashes=legacy, account_tokens=backend
    )
    return service, backend


def login(service: AuthnService, password: str, identifier: str = "alice") -> object:
    clock = service.clock
    assert isinstance(clock, MockClock)
    session = new_session(clock)
    handle = service.with_audit_context(CTX)
    handle.begin_login(identifier, "acme", session)
    with FactorCredential.password(password) as credential:
        return handle.verify_factor(credential, session)


def stored_hash(backend: InMemoryBackend) -> str:
    user = backend.find_user("acme", "alice")
    assert user is not None
    result = backend.get_password_hash("acme", user.user_id)
    assert result is not None
    return result


def all_schemes(salt: str | None = None, **kwargs: Any) -> LegacyHashes:
    return LegacyHashes(LEGACY_SCHEMES, salt=salt, **kwargs)


@pytest.mark.parametrize("scheme", LEGACY_SCHEMES)
def test_each_scheme_logs_in_and_is_replaced_by_argon2id(scheme: str) -> None:
    old = MAKERS[scheme](PASSWORD)
    assert identify(old) == scheme
    service, backend = service_with(old, legacy=all_schemes())
    assert isinstance(login(service, PASSWORD), Authenticated)
    new = stored_hash(backend)
    assert new.startswith("$argon2id$") and new != old
    assert service.hasher.verify(new, PASSWORD)
    # The next login is a native one.
    assert isinstance(login(service, PASSWORD), Authenticated)
    assert stored_hash(backend) == new


def test_werkzeug_pbkdf2_logs_in() -> None:
    service, backend = service_with(WERKZEUG_PBKDF2, legacy=LegacyHashes(["werkzeug"]))
    assert isinstance(login(service, PASSWORD), Authenticated)
    assert stored_hash(backend).startswith("$argon2id$")


@pytest.mark.parametrize("scheme", LEGACY_SCHEMES[:6])
def test_flask_security_hmac_before_hash(scheme: str) -> None:
    signed = fst_hmac(SALT.encode(), PASSWORD.encode())
    old = MAKERS[scheme](signed[:72] if scheme == "bcrypt" else signed)
    service, backend = service_with(old, legacy=all_schemes(SALT))
    assert isinstance(login(service, PASSWORD), Authenticated)
    assert stored_hash(backend).startswith("$argon2id$")


def test_flask_security_hmac_of_a_native_looking_argon2id_hash() -> None:
    """Flask-Security-Too's default: Argon2id of the HMAC. The native verify fails first, then
    the HMAC form is tried; the hash is replaced by one of the password itself."""
    signed = fst_hmac(SALT.encode(), PASSWORD.encode())
    old = str(passlib_hash.argon2.using(type="ID", memory_cost=64, rounds=1, parallelism=1).hash(signed))
    assert old.startswith("$argon2id$")
    service, backend = service_with(old, legacy=all_schemes(SALT))
    assert isinstance(login(service, "wrong " + PASSWORD), InvalidCredential)
    assert stored_hash(backend) == old
    assert isinstance(login(service, PASSWORD), Authenticated)
    new = stored_hash(backend)
    assert new != old and service.hasher.verify(new, PASSWORD)
    # Without the salt it stays refused.
    service, _ = service_with(old, legacy=all_schemes())
    assert isinstance(login(service, PASSWORD), InvalidCredential)


def test_flask_security_normalises_to_nfkd_before_the_hmac() -> None:
    typed = unicodedata.normalize("NFC", "café au lait, s'il vous plaît")
    signed = fst_hmac(SALT.encode(), unicodedata.normalize("NFKD", typed).encode())
    service, backend = service_with(MAKERS["pbkdf2_sha512"](signed), legacy=all_schemes(SALT))
    assert isinstance(login(service, typed), Authenticated)
    assert service.hasher.verify(stored_hash(backend), typed)


def test_hmac_hash_is_refused_with_the_wrong_salt_or_without_one() -> None:
    signed = fst_hmac(SALT.encode(), PASSWORD.encode())
    old = MAKERS["pbkdf2_sha256"](signed)
    for legacy in (all_schemes("another salt"), all_schemes()):
        service, backend = service_with(old, legacy=legacy)
        assert isinstance(login(service, PASSWORD), InvalidCredential)
        assert stored_hash(backend) == old


@pytest.mark.parametrize("scheme", LEGACY_SCHEMES)
def test_wrong_password_is_refused_and_the_hash_kept(scheme: str) -> None:
    old = MAKERS[scheme](PASSWORD)
    service, backend = service_with(old, legacy=all_schemes())
    assert isinstance(login(service, PASSWORD + "!"), InvalidCredential)
    assert stored_hash(backend) == old
    row = backend.audit_rows[-1]
    assert (row.event, row.status) == ("factor_verify", "failure")


@pytest.mark.parametrize("scheme", LEGACY_SCHEMES)
def test_hash_over_the_cost_ceiling_is_refused_without_computing(
    scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy = all_schemes()
    stored = OVER_COST[scheme]
    computed: list[str] = []

    def verify_one(self: LegacyHashes, name: str, stored: str, candidate: bytes) -> bool:
        computed.append(name)  # every legacy verification goes through this one step
        return False

    with monkeypatch.context() as patched:
        patched.setattr(LegacyHashes, "_verify_one", verify_one)
        assert legacy.verify(stored, PASSWORD.encode()) is LegacyResult.OVER_CEILING
    assert computed == []  # refused from the parsed cost alone: nothing was hashed
    service, backend = service_with(stored, legacy=legacy)
    assert isinstance(login(service, PASSWORD), InvalidCredential)
    assert stored_hash(backend) == stored
    row = backend.audit_rows[-1]
    assert (row.event, row.status, row.reason) == ("factor_verify", "failure", "hash_over_ceiling")


def test_ceilings_are_configurable() -> None:
    bcrypt12 = str(passlib_hash.bcrypt.using(rounds=5).hash(PASSWORD))
    strict = all_schemes(ceilings=LegacyCeilings(bcrypt_cost=4))
    assert strict.verify(bcrypt12, PASSWORD.encode()) is LegacyResult.OVER_CEILING
    assert all_schemes().verify(bcrypt12, PASSWORD.encode()) is LegacyResult.MATCH


@pytest.mark.slow  # the dummy verification: a hash made at the scheme's real (default) cost
@pytest.mark.parametrize("scheme", LEGACY_SCHEMES)
def test_malformed_hash_is_refused_with_the_time_of_a_verification(scheme: str) -> None:
    stored = MALFORMED[scheme]
    legacy = all_schemes()
    assert legacy.verify(stored, PASSWORD.encode()) is LegacyResult.MALFORMED
    service, backend = service_with(stored, legacy=legacy)
    hasher = service.hasher
    assert isinstance(hasher, CountingHasher)
    hasher.computed = 0
    assert isinstance(login(service, PASSWORD), InvalidCredential)
    assert hasher.computed == 1  # a dummy Argon2, as for a broken native row
    assert stored_hash(backend) == stored


@pytest.mark.slow  # the dummy verification: a hash made at the scheme's real (default) cost
@pytest.mark.parametrize("scheme", LEGACY_SCHEMES)
def test_scheme_not_enabled_is_refused(scheme: str) -> None:
    old = MAKERS[scheme](PASSWORD)
    others = [name for name in LEGACY_SCHEMES if name != scheme]
    for legacy in (None, LegacyHashes(others)):
        service, backend = service_with(old, legacy=legacy)
        if scheme == "argon2":  # an Argon2i hash is not the native Argon2id
            assert not old.startswith("$argon2id$")
        assert isinstance(login(service, PASSWORD), InvalidCredential)
        assert stored_hash(backend) == old


class CountingLegacy(LegacyHashes):
    computed = 0

    def _verify_one(self, scheme: str, stored: str, candidate: bytes) -> bool:
        self.computed += 1
        return super()._verify_one(scheme, stored, candidate)


def test_unknown_user_answers_as_a_wrong_password_with_the_same_argon2_work() -> None:
    signed = fst_hmac(SALT.encode(), PASSWORD.encode())
    old = str(passlib_hash.argon2.using(type="ID", memory_cost=64, rounds=1, parallelism=1).hash(signed))
    legacy = CountingLegacy(LEGACY_SCHEMES, salt=SALT)
    service, _ = service_with(old, legacy=legacy)
    hasher = service.hasher
    assert isinstance(hasher, CountingHasher)
    hasher.computed = 0
    wrong = login(service, "not the password at all")
    # The native verify, then the HMAC form.
    assert (hasher.computed, legacy.computed) == (1, 1)
    hasher.computed = legacy.computed = 0
    unknown = login(service, "not the password at all", identifier="mallory")
    assert type(wrong) is type(unknown) is InvalidCredential
    assert (hasher.computed, legacy.computed) == (1, 1)  # the same work, on dummies


def test_unknown_scheme_names_are_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="md5_crypt"):
        LegacyHashes(["bcrypt", "md5_crypt"])
    with pytest.raises(ConfigurationError, match="SALT"):
        LegacyHashes(["bcrypt"], salt="")
    app = base_app(AUTHFLOW_LEGACY_PASSWORD_SCHEMES=["plaintext"])
    with pytest.raises(ConfigurationError, match="AUTHFLOW_LEGACY_PASSWORD_SCHEMES"):
        AuthFlow(app, backend=InMemoryBackend(), session_store=MemorySessionStore())
    app = base_app(AUTHFLOW_LEGACY_PASSWORD_SCHEMES=["bcrypt"], AUTHFLOW_LEGACY_PASSWORD_SALT=42)
    with pytest.raises(ConfigurationError, match="AUTHFLOW_LEGACY_PASSWORD_SALT"):
        AuthFlow(app, backend=InMemoryBackend(), session_store=MemorySessionStore())


@pytest.mark.authflow_stores("app")  # the service built from the config
def test_init_app_wires_the_configured_schemes_and_salt() -> None:
    app = base_app(AUTHFLOW_LEGACY_PASSWORD_SCHEMES="bcrypt, werkzeug", AUTHFLOW_LEGACY_PASSWORD_SALT=SALT)
    AuthFlow(app, backend=InMemoryBackend(), session_store=MemorySessionStore())
    factor = get_state(app).service.factor(get_state(app).service.factor_kinds[0])
    legacy = getattr(factor, "legacy", None)
    assert isinstance(legacy, LegacyHashes)
    assert legacy.schemes == {"bcrypt", "werkzeug"} and legacy.salt == SALT.encode()
    off = base_app()
    AuthFlow(off, backend=InMemoryBackend(), session_store=MemorySessionStore())
    off_factor = get_state(off).service.factor(get_state(off).service.factor_kinds[0])
    assert getattr(off_factor, "legacy", "missing") is None


@pytest.mark.slow  # a hash made and verified at each scheme's real (default) cost
@pytest.mark.parametrize("scheme", LEGACY_SCHEMES)
def test_the_dummy_work_runs_for_every_scheme_listed_alone(scheme: str) -> None:
    """An unknown user's refused check spends a legacy verification in the first listed
    scheme before any real hash was met: it exists for every scheme (Django's argon2 had no
    maker and raised KeyError, a 500 for every unknown user of such an app)."""
    hashes = LegacyHashes([scheme])
    for _ in range(2):  # made on the first call, reused on the second
        assert hashes.dummy_verify(b"a wrong password") is None
