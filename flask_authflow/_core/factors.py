"""The plug-in points for factor kinds: :class:`Factor` (a login step) and :class:`Enrollment`.

A factor is registered per app (``authflow.register_factor(factor)``, or
``AuthnService.register_factor``), one per :class:`~flask_authflow._outcomes.FactorKind`;
an application adds its own kind with ``FactorKind.register("name")``.

During a login the service calls, for the step the session waits for:

* :meth:`Factor.challenge` when the factor becomes (one of) the pending step's kinds: an
  e-mail code is sent, WebAuthn hands out its request options; TOTP and HOTP do nothing.
* :meth:`Factor.check_input` then :meth:`Factor.verify` with the presented credential. The
  answer is a typed ``FactorCheck``: :class:`Accepted`, carrying the store update that
  makes the credential single-use (a compare-and-set the service commits before the step
  passes: if a parallel request won, the credential counts as replayed), or
  :class:`Rejected` with a :class:`RejectReason` for the audit trail. The user only ever
  sees ``InvalidCredential``.

A factor keeps per-login state (a challenge, a hashed code, a try count) in its own slot of
the session's flow: it reads ``FactorContext.flow`` and writes the new slot to
``FactorContext.flow_update``. Sessions are server-side and encrypted at rest, so the
slot never reaches the browser.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeAlias, runtime_checkable

from flask_authflow._core.ports import FactorConfig, FactorRecordStore, KnownSecret
from flask_authflow._outcomes import FactorCredential, FactorKind

__all__ = [
    "Accepted",
    "EnrollContext",
    "Enrollment",
    "EnrollmentStart",
    "Factor",
    "FactorCheck",
    "FactorContext",
    "PasskeyFactor",
    "RejectReason",
    "Rejected",
    "StoredEnrollment",
]


class RejectReason(enum.StrEnum):
    """Why a credential was refused (written to the audit row's ``reason``)."""

    INVALID = "invalid_credential"
    REPLAYED = "replayed"
    EXPIRED = "expired"
    TOO_MANY_TRIES = "too_many_tries"
    WRONG_KIND = "unexpected_factor"
    NOT_ENROLLED = "not_enrolled"
    NO_CHALLENGE = "no_challenge"


@dataclass(frozen=True, slots=True)
class Accepted:
    """The credential is valid.

    :param factor_id: the factor that matched (its ``last_used_at`` is what ``commit`` moves).
    :param commit: the single-use update to apply before the step passes (a compare-and-set
        in the store); it answers True when this request won it, False when a parallel
        request already used the credential. ``None`` when nothing needs consuming.
    """

    factor_id: str | None = None
    commit: Callable[[], bool] | None = field(default=None, compare=False, repr=False)

    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Rejected:
    """The credential is refused; ``reason`` goes to the audit row. Falsy, like ``False``."""

    reason: RejectReason | str = RejectReason.INVALID

    def __bool__(self) -> bool:
        return False

    @property
    def code(self) -> str:
        return self.reason.value if isinstance(self.reason, RejectReason) else str(self.reason)


FactorCheck: TypeAlias = Accepted | Rejected


@dataclass(slots=True)
class FactorContext:
    """What a factor sees during one login step (or step-up) of one session.

    :param tenant, user_id: whose login it is.
    :param identifier: the user's normalised login name (an account label), if known.
    :param now: the service clock's time for this operation.
    :param store: the factor store (records, atomic counters).
    :param factors: the user's confirmed factors of this factor's kind.
    :param flow: this factor's slot of the session flow, as the last request left it.
    :param transaction: an id of this login (random, kept in the session): one-time codes
        are bound to it, so a code sent for another login does not pass this one.
    :param purpose: ``"login"`` or ``"step_up"``.
    :param flow_update: set by the factor to replace its slot (``{}`` empties it); ``None``
        leaves the slot as it was.
    :param known_secret: the stored secret this request's ``begin_login`` read for the
        step (the password hash), or ``None``: the factor reads it.
    """

    tenant: str
    user_id: str
    now: datetime
    store: FactorRecordStore
    factors: tuple[FactorConfig, ...]
    flow: Mapping[str, Any]
    transaction: str
    purpose: str = "login"
    identifier: str | None = None
    flow_update: dict[str, Any] | None = None
    known_secret: KnownSecret | None = None


@dataclass(slots=True)
class EnrollContext:
    """What an enrollment sees: an authenticated user adding or replacing a factor.

    :param account_name: what authenticator apps and WebAuthn show for the account (the
        user's identifier); :param issuer_name: the site's name (``AUTHFLOW_SITE_NAME``).
    :param flow, flow_update: this enrollment's slot of the session flow, as in
        :class:`FactorContext`.
    """

    tenant: str
    user_id: str
    account_name: str
    issuer_name: str
    now: datetime
    store: FactorRecordStore
    flow: Mapping[str, Any]
    flow_update: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class EnrollmentStart:
    """An enrollment waiting for proof of possession.

    :param factor_id: the pending factor (give it back to ``confirm``).
    :param public: what the user is shown: an ``otpauth://`` URI and a QR code, WebAuthn
        creation options, or recovery codes (shown this once, never again).
    """

    factor_id: str
    kind: FactorKind
    public: Mapping[str, Any] = field(repr=False)


@runtime_checkable
class Factor(Protocol):
    """Verifies credentials of one factor kind during a login step.

    Besides its methods, every factor declares three plain attributes, which the service
    and the ready views read as they are:

    * ``expensive``: ``True`` when a check costs real work (a password hash): it runs before
      the step's unit of work opens (after a read of the locks), so no database lock is
      held while it runs. ``False`` for a cheap check (a code, a signature): it runs inside
      the unit. Either way the check, single-use update and settlement commit once.
    * ``challenge_on_request``: ``True`` when ``challenge`` has a side effect (it sends an
      e-mail or a text): the factor is challenged on entering a step only when it is the
      step's only kind, otherwise when the user asks ("send me a code").
    * ``digits``: how many digits the factor's codes have (the sign-in form sizes its field
      by it); ``None`` when its credential is not a numeric code.
    """

    @property
    def kind(self) -> FactorKind: ...

    @property
    def expensive(self) -> bool: ...

    @property
    def challenge_on_request(self) -> bool: ...

    @property
    def digits(self) -> int | None: ...

    def check_input(self, credential: FactorCredential) -> None:
        """Refuse malformed input (:class:`~flask_authflow.errors.InvalidInput`) before any work."""
        ...

    def challenge(self, ctx: FactorContext) -> Mapping[str, Any] | None:
        """Prepare the step (send a code, make WebAuthn options); return what the client needs."""
        ...

    def verify(self, ctx: FactorContext, credential: FactorCredential) -> FactorCheck:
        """Check ``credential`` against ``ctx.factors``; never raise for a wrong credential."""
        ...


@runtime_checkable
class Enrollment(Protocol):
    """Adds a factor of one kind to a user: begin, prove possession, list, disable.

    ``replaces_kind`` says whether a confirmed enrollment replaces the user's earlier
    factor of this kind (TOTP, HOTP, e-mail, recovery codes) or adds one more (WebAuthn:
    several security keys). ``begin`` stores a pending factor (``confirmed=False``);
    ``confirm`` checks the proof; on :class:`Accepted` the service confirms it in the store
    and then runs ``Accepted.commit`` if there is one (TOTP marks the proving code used).
    ``remaining`` says how many uses an enrolled factor has left (recovery codes), ``None``
    when its uses are not counted.
    """

    @property
    def kind(self) -> FactorKind: ...

    @property
    def replaces_kind(self) -> bool: ...

    def remaining(self, config: FactorConfig) -> int | None: ...

    def begin(self, ctx: EnrollContext, params: Mapping[str, Any]) -> EnrollmentStart: ...

    def confirm(self, ctx: EnrollContext, factor_id: str, credential: FactorCredential) -> FactorCheck: ...

    def list(self, ctx: EnrollContext) -> list[FactorConfig]: ...

    def disable(self, ctx: EnrollContext, factor_id: str) -> bool: ...


@runtime_checkable
class PasskeyFactor(Factor, Protocol):
    """A factor that can also log a user in alone, naming the user itself (WebAuthn passkeys)."""

    def passkey_challenge(self, ctx: FactorContext) -> Mapping[str, Any]:
        """Request options without a user (no allowed credentials); the challenge goes to
        ``ctx.flow_update``. ``ctx.user_id`` is empty."""
        ...

    def find_passkey(
        self, store: FactorRecordStore, tenant: str, credential: FactorCredential
    ) -> FactorConfig | None:
        """The confirmed factor the credential's id names, among ``tenant``'s users."""
        ...


class StoredEnrollment:
    """``list`` and ``disable`` for enrollments whose factors are plain store records; a
    confirmed enrollment replaces the user's earlier factor of the kind unless a subclass
    says otherwise (``replaces_kind``)."""

    __slots__ = ()

    @property
    def kind(self) -> FactorKind:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @property
    def replaces_kind(self) -> bool:
        return True

    def remaining(self, config: FactorConfig) -> int | None:
        """Uses of ``config`` are not counted (recovery codes count theirs)."""
        return None

    def list(self, ctx: EnrollContext) -> list[FactorConfig]:
        return ctx.store.list_user_factors(ctx.tenant, ctx.user_id, kind=self.kind)

    def disable(self, ctx: EnrollContext, factor_id: str) -> bool:
        config = ctx.store.get_factor(ctx.tenant, ctx.user_id, factor_id)
        if config is None or config.kind is not self.kind:
            return False
        return ctx.store.delete_factor(ctx.tenant, ctx.user_id, factor_id)
