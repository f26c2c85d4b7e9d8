"""The Shared Signals event types this receiver acts on, and what each one does here.

Each handled event is mapped to something the library already does (ending sessions,
ending device trust, disabling an account, dropping stored provider tokens, asking a
fresh login); every other event type is acknowledged and audited, and nothing changes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CAEP",
    "EVENTS",
    "RISC",
    "SESSION_ONLY_REASONS",
    "VERIFICATION_EVENT",
    "Action",
    "Handling",
    "handling_of",
]

CAEP: Final = "https://schemas.openid.net/secevent/caep/event-type/"
RISC: Final = "https://schemas.openid.net/secevent/risc/event-type/"
#: The stream verification event of the Shared Signals Framework (its ``state`` is echoed).
VERIFICATION_EVENT: Final = "https://schemas.openid.net/secevent/ssf/event-type/verification"


class Action(enum.Flag):
    """What handling an event does to the subject's account (combined as flags)."""

    NONE = 0
    END_SESSIONS = enum.auto()
    END_DEVICE_TRUST = enum.auto()
    DISABLE = enum.auto()
    DROP_PROVIDER_TOKENS = enum.auto()
    ASK_FRESH_LOGIN = enum.auto()
    END_API_TOKENS = enum.auto()


_END_ALL: Final = (
    Action.END_SESSIONS | Action.END_DEVICE_TRUST | Action.DROP_PROVIDER_TOKENS | Action.END_API_TOKENS
)


@dataclass(frozen=True, slots=True)
class Handling:
    """How one event type is handled: its audit event (at most 32 characters) and actions."""

    audit_event: str
    action: Action


#: Event type URI -> its handling.
EVENTS: Final[dict[str, Handling]] = {
    f"{CAEP}session-revoked": Handling("ssf_session_revoked", Action.END_SESSIONS),
    f"{CAEP}credential-change": Handling(
        "ssf_credential_change", Action.END_SESSIONS | Action.END_DEVICE_TRUST
    ),
    f"{CAEP}token-claims-change": Handling("ssf_token_claims_change", Action.ASK_FRESH_LOGIN),
    f"{CAEP}assurance-level-change": Handling("ssf_assurance_level_change", Action.ASK_FRESH_LOGIN),
    f"{RISC}account-disabled": Handling("ssf_account_disabled", Action.DISABLE | _END_ALL),
    f"{RISC}account-purged": Handling("ssf_account_purged", Action.DISABLE | _END_ALL),
    f"{RISC}sessions-revoked": Handling("ssf_sessions_revoked", Action.END_SESSIONS),
    f"{RISC}tokens-revoked": Handling("ssf_tokens_revoked", Action.DROP_PROVIDER_TOKENS),
    f"{RISC}account-credential-change-required": Handling(
        "ssf_credential_change_required", Action.END_SESSIONS | Action.END_DEVICE_TRUST
    ),
    VERIFICATION_EVENT: Handling("ssf_verification", Action.NONE),
}
_UNKNOWN: Final = Handling("ssf_unknown_event", Action.NONE)
#: ``session_revoked`` reasons of the events that end sessions only, as back-channel logout
#: does: the user's device trust stays (the devices feature keeps it on these reasons).
SESSION_ONLY_REASONS: Final = frozenset({"ssf_session_revoked", "ssf_sessions_revoked"})


def handling_of(event_type: str) -> Handling:
    """The handling of ``event_type``; an unknown type is acknowledged and audited only."""
    return EVENTS.get(event_type, _UNKNOWN)
