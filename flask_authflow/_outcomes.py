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

import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, ClassVar, TypeAlias

from flask_authflow.errors import InvalidInput

__all__ = [
    "Authenticated",
    "FactorCredential",
    "FactorKind",
    "FactorOutcome",
    "FactorRequired",
    "InvalidCredential",
    "Locked",
    "LoginOutcome",
    "StepUpRequired",
    "WorkflowOutcome",
    "WorkflowPending",
    "WorkflowStarted",
]


_KIND_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")


class _FactorKindType(type):
    """Lets ``for kind in FactorKind`` list the registered kinds, as an enum would."""

    def __iter__(cls) -> Iterator[FactorKind]:
        return iter(list(FactorKind._registry.values()))

    def __len__(cls) -> int:
        return len(FactorKind._registry)

    def __contains__(cls, value: object) -> bool:
        return isinstance(value, str) and value in FactorKind._registry


class FactorKind(str, metaclass=_FactorKindType):
    """A kind of authentication factor; the value is the name kept in the session.

    It behaves like an enum of the built-in kinds (``FactorKind.TOTP``, ``FactorKind("totp")``,
    ``kind.value``, ``for kind in FactorKind``), and an application adds its own kind with
    :meth:`register` (``FactorKind.register("sms")``) before registering the factor that
    verifies it. Each kind exists once, so ``kind is FactorKind.TOTP`` holds; a kind is
    also the plain string it names (``FactorKind.TOTP == "totp"``).
    """

    __slots__ = ()
    _registry: ClassVar[dict[str, FactorKind]] = {}

    PASSWORD: ClassVar[FactorKind]
    TOTP: ClassVar[FactorKind]
    HOTP: ClassVar[FactorKind]
    EMAIL_OTP: ClassVar[FactorKind]
    WEBAUTHN: ClassVar[FactorKind]
    RECOVERY_CODE: ClassVar[FactorKind]
    LOGIN_CODE: ClassVar[FactorKind]

    def __new__(cls, value: str) -> FactorKind:
        if isinstance(value, FactorKind):
            return value
        try:
            return cls._registry[value]
        except (KeyError, TypeError):
            raise ValueError(f"{value!r} is not a registered FactorKind") from None

    @classmethod
    def register(cls, value: str) -> FactorKind:
        """Add a kind (a lowercase name of at most 32 characters: letters, digits, ``_``).

        Registering an existing name returns that kind."""
        if not isinstance(value, str) or not _KIND_RE.fullmatch(value):
            raise ValueError("a factor kind is a lowercase name of at most 32 characters: a-z, 0-9, _")
        existing = cls._registry.get(value)
        if existing is not None:
            return existing
        kind = str.__new__(cls, value)
        cls._registry[value] = kind
        return kind

    @property
    def value(self) -> str:
        return str.__str__(self)

    @property
    def name(self) -> str:
        return self.value.upper()

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"FactorKind.{self.name}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FactorKind, (self.value,))

    def __copy__(self) -> FactorKind:
        return self

    def __deepcopy__(self, memo: object) -> FactorKind:
        return self


FactorKind.PASSWORD = FactorKind.register("password")
FactorKind.TOTP = FactorKind.register("totp")
FactorKind.HOTP = FactorKind.register("hotp")
FactorKind.EMAIL_OTP = FactorKind.register("email_otp")
FactorKind.WEBAUTHN = FactorKind.register("webauthn")
FactorKind.RECOVERY_CODE = FactorKind.register("recovery_code")
#: A code e-mailed to the account's address as the first step (``AUTHFLOW_LOGIN_BY_CODE``).
FactorKind.LOGIN_CODE = FactorKind.register("login_code")


@dataclass(frozen=True, slots=True)
class FactorRequired:
    """The login continues: present a credential of one of ``kinds`` next.

    ``kind`` is the first (preferred) of them; ``kinds`` every kind that passes the step
    (``(FactorKind.TOTP, FactorKind.RECOVERY_CODE)``: either will do). ``challenges``
    holds what a factor gave the client for this step, by kind: WebAuthn's request
    options, or ``{"sent": True}`` once an e-mail code went out.
    """

    kind: FactorKind
    kinds: tuple[FactorKind, ...] = ()
    challenges: Mapping[FactorKind, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.kinds:
            object.__setattr__(self, "kinds", (self.kind,))
        elif self.kind not in self.kinds:
            raise ValueError("kind must be one of kinds")


@dataclass(frozen=True, slots=True)
class _InvalidCredentials:
    """Deprecated, never returned (``flask_authflow._outcomes.InvalidCredentials``).

    ``begin_login`` does not reveal whether an identifier exists. An unknown user, a user of
    another tenant and a disabled account go through the same steps as a real account
    (``FactorRequired(PASSWORD)`` for a user that can never authenticate), and the failure is
    reported by ``verify_factor`` as :class:`InvalidCredential`, exactly as a wrong password is.
    """


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
class WorkflowPending:
    """The user is known, but the session is in ``pending_workflow``, not Authenticated: a
    longer ceremony (a sign-up) must finish first."""

    user_id: str
    tenant: str
    state: str = "pending_workflow"


@dataclass(frozen=True, slots=True)
class WorkflowStarted:
    """A workflow is pending on the session. ``token`` (43 URL-safe characters) is its
    single-use proof, shown once: mail it, or keep it for the step that completes it. The
    session keeps only its hash."""

    kind: str
    token: str = field(repr=False)
    expires_at: datetime
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class WorkflowOutcome:
    """A workflow ended (``completed`` true, or aborted): ``state`` is the state the session
    is in now (``"guest"`` or ``"authenticated"``, the one the workflow was started from),
    ``data`` what the workflow carried."""

    kind: str
    completed: bool
    state: str
    data: Mapping[str, Any]
    user_id: str | None = None
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class InvalidCredential:
    """The credential was refused (wrong, unknown user, wrong tenant, or no login in progress)."""


LoginOutcome: TypeAlias = FactorRequired | Locked | StepUpRequired
FactorOutcome: TypeAlias = Authenticated | FactorRequired | InvalidCredential | Locked | WorkflowPending


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


def __getattr__(name: str) -> Any:
    """``InvalidCredentials`` is deprecated: no login step returns it (a refused login is
    :class:`InvalidCredential`, from ``verify_factor``); it goes in the next minor release."""
    if name == "InvalidCredentials":
        warnings.warn(
            "flask_authflow._outcomes.InvalidCredentials is deprecated and will be removed in 0.9: "
            "no login step returns it; a refused login is InvalidCredential",
            DeprecationWarning,
            stacklevel=2,
        )
        return _InvalidCredentials
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
