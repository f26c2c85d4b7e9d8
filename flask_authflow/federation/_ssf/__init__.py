"""A Shared Signals receiver: Security Event Tokens (RFC 8417) pushed (RFC 8935) or polled
(RFC 8936) from configured transmitters, each handled once with what the library already
does (see :doc:`/shared_signals`).

Modules: ``settings`` (``AUTHFLOW_SSF_TRANSMITTERS``), ``verify`` (the SET checks),
``subjects`` (RFC 9493 subject identifiers), ``events`` (the handled event types),
``receiver`` (one SET, one commit) and ``poll`` (the poll client).
"""

from __future__ import annotations

from flask_authflow.federation._ssf.events import CAEP, RISC, VERIFICATION_EVENT, Action
from flask_authflow.federation._ssf.receiver import Receipt, SignalsReceiver, UnknownTransmitter
from flask_authflow.federation._ssf.settings import Transmitter
from flask_authflow.federation._ssf.verify import SecurityEvent, SetRefused

__all__ = [
    "CAEP",
    "RISC",
    "VERIFICATION_EVENT",
    "Action",
    "Receipt",
    "SecurityEvent",
    "SetRefused",
    "SignalsReceiver",
    "Transmitter",
    "UnknownTransmitter",
]
