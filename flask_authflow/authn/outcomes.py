"""What a login step answers, and the credential a user presents.

Outcomes are frozen dataclasses so callers can ``match`` on them::

    match handle.verify_factor(credential, session):
        case Authenticated(user_id, tenant): ...
        case FactorRequired(kind): ...
        case Locked(until): ...
        case InvalidCredential(): ...

None of them says *why* a credential was refused: an unknown user, a user of another
tenant and a wrong password give the same answer, so the outcome cannot be used to
probe which accounts exist.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import TypeAlias

from ..errors import InvalidInput

__all__ = [
    "Authenticated",
    "FactorCredential",
    "FactorKind",
    "FactorOutcome",
    "FactorRequired",
    "InvalidCredential",
    "InvalidCredentials",
    "Locked",
    "LoginOutcome",
    "StepUpRequired",
]


class FactorKind(enum.Enum):
    """A kind of authentication factor; the value is the name kept in the session."""

    PASSWORD = "password"  # noqa: S105 - a factor name, not a secret
    TOTP = "totp"
    HOTP = "hotp"
    EMAIL_OTP = "email_otp"
    WEBAUTHN = "webauthn"
    RECOVERY_CODE = "recovery_code"


@dataclass(frozen=True, slots=True)
class FactorRequired:
    """The login continues: present a credential of ``kind`` next."""

    kind: FactorKind


@dataclass(frozen=True, slots=True)
class InvalidCredentials:
    """The login cannot start (kept for the spec's shape; see :doc:`authn` for when it appears)."""


@dataclass(frozen=True, slots=True)
class Locked:
    """The lockout policy is active for this identifier until ``until`` (UTC)."""

    until: datetime


@dataclass(frozen=True, slots=True)
class StepUpRequired:
    """The session must re-verify ``factors`` (in order) before the operation continues."""

    factors: tuple[FactorKind, ...]


@dataclass(frozen=True, slots=True)
class Authenticated:
    """Every required factor has passed; the session is now Authenticated."""

    user_id: str
    tenant: str


@dataclass(frozen=True, slots=True)
class InvalidCredential:
    """The credential was refused (wrong, unknown user, wrong tenant, or no login in progress)."""


LoginOutcome: TypeAlias = FactorRequired | InvalidCredentials | Locked | StepUpRequired
FactorOutcome: TypeAlias = Authenticated | FactorRequired | InvalidCredential | Locked


class FactorCredential:
    """A secret presented for one factor, held in a buffer that :meth:`wipe` zeroes.

    Python cannot promise that no copy of a ``str`` survives elsewhere, but the
    credential itself never keeps one: the secret lives in a ``bytearray`` that is
    overwritten after use (``with FactorCredential.password(pw) as cred: ...``), and
    ``repr``/``str`` never show it, so it cannot leak through logs or tracebacks.
    """

    __slots__ = ("_kind", "_secret", "_wiped")

    def __init__(self, kind: FactorKind, secret: str | bytes | bytearray) -> None:
        if not isinstance(kind, FactorKind):
            raise TypeError("kind must be a FactorKind")
        if isinstance(secret, str):
            try:
                buffer = bytearray(secret.encode("utf-8"))
            except UnicodeEncodeError:  # lone surrogates (JSON "\\ud800"): no password has them
                raise InvalidInput("the secret is not valid Unicode text") from None
        elif isinstance(secret, bytes | bytearray):
            buffer = bytearray(secret)
        else:
            raise TypeError("a credential secret must be str or bytes")
        self._kind = kind
        self._secret = buffer
        self._wiped = False

    @classmethod
    def password(cls, secret: str | bytes | bytearray) -> FactorCredential:
        """A password (the first factor of a password login)."""
        return cls(FactorKind.PASSWORD, secret)

    @classmethod
    def code(cls, kind: FactorKind, value: str | bytes | bytearray) -> FactorCredential:
        """A one-time code or other short secret for ``kind`` (TOTP, HOTP, e-mail OTP, recovery code)."""
        return cls(kind, value)

    @property
    def kind(self) -> FactorKind:
        return self._kind

    @property
    def wiped(self) -> bool:
        return self._wiped

    def __len__(self) -> int:
        """Length of the secret in UTF-8 bytes (for size limits; reveals no content)."""
        return len(self._secret)

    def secret_bytes(self) -> bytes:
        """A transient copy of the secret for the verifier; raises once wiped."""
        if self._wiped:
            raise ValueError("the credential has been wiped")
        return bytes(self._secret)

    def wipe(self) -> None:
        """Overwrite the secret with zeros; the credential cannot be used afterwards."""
        for index in range(len(self._secret)):
            self._secret[index] = 0
        self._secret = bytearray()
        self._wiped = True

    def __enter__(self) -> FactorCredential:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.wipe()

    def __repr__(self) -> str:
        state = "wiped" if self._wiped else "***"
        return f"FactorCredential(kind={self._kind.value}, secret={state})"

    __str__ = __repr__

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a FactorCredential cannot be pickled")
