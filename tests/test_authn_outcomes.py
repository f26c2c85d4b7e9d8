"""Outcome types and the wipeable credential."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime

import pytest

from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorOutcome,
    FactorRequired,
    InvalidCredential,
    Locked,
    LoginOutcome,
    StepUpRequired,
)

UNTIL = datetime(2026, 1, 1, 0, 15, tzinfo=UTC)


def describe(outcome: LoginOutcome | FactorOutcome) -> str:
    match outcome:
        case Authenticated(user_id, tenant):
            return f"auth {user_id}@{tenant}"
        case FactorRequired(kind):
            return f"next {kind.value}"
        case Locked(until):
            return f"locked {until.minute}"
        case StepUpRequired(factors):
            return "step-up " + ",".join(f.value for f in factors)
        case InvalidCredential():
            return "invalid"
    raise AssertionError(outcome)


def test_outcomes_are_matchable() -> None:
    assert describe(Authenticated("u1", "acme")) == "auth u1@acme"
    assert describe(FactorRequired(FactorKind.TOTP)) == "next totp"
    assert describe(Locked(UNTIL)) == "locked 15"
    assert describe(StepUpRequired((FactorKind.PASSWORD,))) == "step-up password"
    assert describe(InvalidCredential()) == "invalid"


def test_invalid_credentials_is_deprecated_and_still_matchable() -> None:
    """Never returned; importing it warns (it goes in 0.9), and old code matching on it
    still runs."""
    with pytest.warns(DeprecationWarning, match="InvalidCredentials"):
        from flask_authflow._outcomes import InvalidCredentials
    match InvalidCredentials():
        case InvalidCredentials():
            pass
        case _:
            raise AssertionError("not matched")
    assert InvalidCredential() != InvalidCredentials()
    import flask_authflow._outcomes
    import flask_authflow.login

    with pytest.raises(AttributeError, match="NoSuchOutcome"):
        flask_authflow._outcomes.NoSuchOutcome  # type: ignore[attr-defined]  # noqa: B018

    assert "InvalidCredentials" not in flask_authflow.login.__all__


def test_outcomes_are_frozen_and_compare_by_value() -> None:
    outcome = FactorRequired(FactorKind.PASSWORD)
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.kind = FactorKind.TOTP  # type: ignore[misc]
    assert outcome == FactorRequired(FactorKind.PASSWORD)
    assert InvalidCredential() == InvalidCredential()


def test_factor_kind_values() -> None:
    assert [k.value for k in FactorKind] == [
        "password",
        "totp",
        "hotp",
        "email_otp",
        "webauthn",
        "recovery_code",
        "login_code",
    ]


def test_password_credential_never_shows_secret() -> None:
    cred = FactorCredential.password("s3cret-value")
    assert cred.kind is FactorKind.PASSWORD
    for text in (repr(cred), str(cred), f"{cred}", repr([cred])):
        assert "s3cret" not in text
    assert "***" in repr(cred)
    assert cred.secret_bytes() == b"s3cret-value"
    assert len(cred) == len(b"s3cret-value")


def test_wipe_zeroes_the_buffer() -> None:
    cred = FactorCredential.password("s3cret")
    buffer = cred._secret  # the very bytearray holding the secret
    cred.wipe()
    assert bytes(buffer) == b"\x00" * 6
    assert cred.wiped
    assert "wiped" in repr(cred)
    with pytest.raises(ValueError, match="wiped"):
        cred.secret_bytes()


def test_context_manager_wipes_even_on_error() -> None:
    with pytest.raises(RuntimeError), FactorCredential.password("pw") as cred:
        buffer = cred._secret
        raise RuntimeError("boom")
    assert cred.wiped
    assert bytes(buffer) == b"\x00\x00"


def test_code_credential_and_bad_inputs() -> None:
    cred = FactorCredential.code(FactorKind.TOTP, "123456")
    assert cred.kind is FactorKind.TOTP and cred.secret_bytes() == b"123456"
    with pytest.raises(TypeError):
        FactorCredential("password", "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        FactorCredential.password(123)  # type: ignore[arg-type]


def test_credential_cannot_be_pickled() -> None:
    with pytest.raises(TypeError):
        pickle.dumps(FactorCredential.password("pw"))
