"""Second factors required by policy: ``AUTHFLOW_MFA_REQUIRED`` and ``AUTHFLOW_MFA_REQUIRED_KINDS``.

Whether a user must have a second factor is decided at each sign-in, after its first
factor, from the configuration (nothing is stored):

- ``False`` (the default): nobody is required to;
- ``True``: every user;
- a list of role names: a user who holds one of them (the roles in the store);
- a Cedar action name (``"require_mfa"`` or ``'Action::"require_mfa"'``): a user for whom
  the policies *permit* that action on the user itself (``resource`` is the principal);
  a ``forbid`` exempts, no permit means not required, and a decision with errors counts
  as required (fail closed). The web layer asks the policies (``MfaRequirement.decide``).

The kinds that count (``AUTHFLOW_MFA_REQUIRED_KINDS``): every second factor by default
(:data:`SECOND_FACTORS`: not the password, and not recovery codes, which are a backup of
another factor), ``"phishing_resistant"`` (:data:`PHISHING_RESISTANT`: WebAuthn security
keys and passkeys), or a list of kinds. A user who must have one and has no confirmed
factor of a counting kind is held in the required enrollment
(``flask_authflow.login._required_enrollment``) until one is set up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from flask_authflow._core.roles import check_name
from flask_authflow._outcomes import FactorKind
from flask_authflow._settings import Settings, setting
from flask_authflow.errors import ConfigurationError, InvalidInput

__all__ = [
    "PHISHING_RESISTANT",
    "SECOND_FACTORS",
    "MfaRequiredSettings",
    "MfaRequirement",
    "missing_kinds",
]

#: The kinds that count as a second factor by default.
SECOND_FACTORS: Final = (
    FactorKind.TOTP.value,
    FactorKind.HOTP.value,
    FactorKind.EMAIL_OTP.value,
    FactorKind.WEBAUTHN.value,
)
#: ``AUTHFLOW_MFA_REQUIRED_KINDS = "phishing_resistant"``: security keys and passkeys.
PHISHING_RESISTANT: Final = (FactorKind.WEBAUTHN.value,)
_NOT_SECOND: Final = frozenset({FactorKind.PASSWORD.value, FactorKind.RECOVERY_CODE.value})

#: ``(tenant, user_id) -> roles``, ``(tenant, user_id, factors passed) -> required?``
RolesOf = Callable[[str, str], Iterable[str]]
Decide = Callable[[str, str, tuple[str, ...]], bool]


def _rule(value: Any) -> bool | frozenset[str] | str:
    """The checked ``AUTHFLOW_MFA_REQUIRED``."""
    name = "AUTHFLOW_MFA_REQUIRED"
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if not value.strip() or len(value) > 256:
            raise ConfigurationError(f"{name} as a string names a Cedar action, such as 'require_mfa'")
        return value
    if isinstance(value, list | tuple | set | frozenset) and value:
        try:
            return frozenset(check_name(role, "role") for role in value)
        except InvalidInput as exc:
            raise ConfigurationError(f"{name}: {exc.message}") from None
    raise ConfigurationError(
        f"{name} must be False, True, a list of role names or a Cedar action name, got {value!r}"
    )


def _kinds(value: Any) -> tuple[str, ...]:
    """The checked ``AUTHFLOW_MFA_REQUIRED_KINDS``."""
    name = "AUTHFLOW_MFA_REQUIRED_KINDS"
    if value is None:
        return SECOND_FACTORS
    if value == "phishing_resistant":
        return PHISHING_RESISTANT
    if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset) or not value:
        raise ConfigurationError(f"{name} must be None, 'phishing_resistant' or a list of factor kinds")
    kinds: list[str] = []
    for kind in value:
        try:
            known = FactorKind(kind).value
        except ValueError:
            raise ConfigurationError(f"{name}: {kind!r} is not a factor kind") from None
        if known in _NOT_SECOND:
            raise ConfigurationError(
                f"{name}: {known!r} is not a second factor (recovery codes are a backup)"
            )
        kinds.append(known)
    return tuple(sorted(set(kinds)))


@dataclass(frozen=True, slots=True)
class MfaRequiredSettings(Settings):
    """``AUTHFLOW_MFA_REQUIRED`` and ``AUTHFLOW_MFA_REQUIRED_KINDS`` (see the module docstring)."""

    required: Any = field(metadata=setting("AUTHFLOW_MFA_REQUIRED"))
    kinds: Any = field(metadata=setting("AUTHFLOW_MFA_REQUIRED_KINDS"))

    def __post_init__(self) -> None:
        object.__setattr__(self, "required", _rule(self.required))
        object.__setattr__(self, "kinds", _kinds(self.kinds))

    @property
    def action(self) -> str | None:
        """The Cedar action of the rule, if it is one."""
        return self.required if isinstance(self.required, str) else None


@dataclass(frozen=True, slots=True)
class MfaRequirement:
    """The rule as the login applies it: ``decide(tenant, user_id, factors passed)`` says
    whether the user must have one of ``kinds`` (composed by ``init_app``)."""

    kinds: tuple[str, ...]
    decide: Decide

    @classmethod
    def of(
        cls, settings: MfaRequiredSettings, roles_of: RolesOf, policy: Decide | None
    ) -> MfaRequirement | None:
        """The requirement ``settings`` describe (``None``: nobody is required to)."""
        rule = settings.required
        if rule is False:
            return None
        if rule is True:
            return cls(settings.kinds, lambda _tenant, _user_id, _passed: True)
        if isinstance(rule, frozenset):
            roles = rule
            return cls(
                settings.kinds,
                lambda tenant, user_id, _passed: not roles.isdisjoint(roles_of(tenant, user_id)),
            )
        if policy is None:
            raise ConfigurationError(
                "AUTHFLOW_MFA_REQUIRED names a Cedar action: set AUTHFLOW_AUTHZ_POLICIES"
            )
        return cls(settings.kinds, policy)


def missing_kinds(
    requirement: MfaRequirement | None,
    tenant: str,
    user_id: str,
    enrolled: Iterable[str],
    passed: tuple[str, ...],
) -> tuple[str, ...]:
    """The counting kinds of which the user must set up one now (empty: not required, or
    ``enrolled``, the user's confirmed kinds, already has one)."""
    if requirement is None or not set(requirement.kinds).isdisjoint(enrolled):
        return ()
    return requirement.kinds if requirement.decide(tenant, user_id, passed) else ()
