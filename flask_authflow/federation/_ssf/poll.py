"""Poll-based SET delivery (RFC 8936): the receiver asks the transmitter for its SETs.

:func:`poll_transmitter` POSTs a JSON poll request (``Authorization: Bearer`` with the
transmitter's ``poll_token``) to its ``poll_endpoint``, hands each SET of the answer to
:meth:`~flask_authflow.federation._ssf.receiver.SignalsReceiver.receive`, and acknowledges
the ones handled (``ack``) and reports the refused ones (``setErrs``, with the RFC 8935
error code) in the next request; it goes on while the transmitter says
``moreAvailable``, for at most ``max_rounds`` requests, and always sends the last
acknowledgements (with ``returnImmediately``). A SET that could not be handled because a
store is down is neither acknowledged nor refused: the transmitter sends it again.
A verification event is acknowledged like any other, which is how a poll stream answers it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import requests

from flask_authflow._core.ports import LoginRecorder
from flask_authflow._core.session import AuthSession
from flask_authflow.errors import StoreUnavailable
from flask_authflow.federation._errors import ProviderUnreachable
from flask_authflow.federation._http import HttpClient
from flask_authflow.federation._ssf.receiver import SignalsReceiver
from flask_authflow.federation._ssf.settings import Transmitter
from flask_authflow.federation._ssf.verify import SetRefused

__all__ = ["PollReport", "poll_transmitter"]

_MAX_JTI: Final = 255


@dataclass
class PollReport:
    """What one poll did: SETs handled (their ``jti``), refused (``jti`` -> error code),
    left for the transmitter to send again (a store was down), and requests made."""

    acknowledged: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    deferred: list[str] = field(default_factory=list)
    requests: int = 0


def _answer(response: requests.Response) -> tuple[Mapping[str, Any], bool]:
    if response.status_code != 200:
        raise ProviderUnreachable(f"the poll endpoint answered HTTP {response.status_code}")
    try:
        body = json.loads(response.content)
    except ValueError:
        raise ProviderUnreachable("the poll endpoint's answer is not JSON") from None
    sets = body.get("sets") if isinstance(body, dict) else None
    if not isinstance(sets, dict):
        raise ProviderUnreachable("the poll endpoint's answer has no sets object")
    return sets, body.get("moreAvailable") is True


class _Poller:
    def __init__(self, transmitter: Transmitter, http: HttpClient) -> None:
        self.transmitter = transmitter
        self.session = requests.Session()
        http.mount_into(self.session)
        self.timeout = http.timeout

    def ask(self, body: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
        headers = {"Authorization": f"Bearer {self.transmitter.poll_token}", "Accept": "application/json"}
        try:
            response = self.session.post(
                str(self.transmitter.poll_endpoint),
                json=body,
                headers=headers,
                timeout=self.timeout,
                allow_redirects=False,
            )
        except requests.RequestException:
            raise ProviderUnreachable("the poll endpoint cannot be reached") from None
        try:
            return _answer(response)
        finally:
            response.close()


def _handle_all(
    sets: Mapping[str, Any], receive: Callable[[str], None], report: PollReport, errors: dict[str, Any]
) -> list[str]:
    """Hand each SET to ``receive``; the jtis to acknowledge (errors go into ``errors``)."""
    ack: list[str] = []
    for jti, token in sets.items():
        if not isinstance(jti, str) or not jti or len(jti) > _MAX_JTI:
            continue
        try:
            receive(token)
        except SetRefused as exc:
            errors[jti] = {"err": exc.error, "description": exc.message}
            report.refused[jti] = exc.error
        except (StoreUnavailable, ProviderUnreachable):  # sent again by the next poll
            report.deferred.append(jti)
        else:
            ack.append(jti)
            report.acknowledged.append(jti)
    return ack


def poll_transmitter(
    receiver: SignalsReceiver,
    handle: LoginRecorder,
    session: AuthSession,
    name: str,
    *,
    max_events: int = 100,
    max_rounds: int = 10,
) -> PollReport:
    """Poll transmitter ``name`` (its ``delivery`` is ``"poll"``); see the module's text.

    :raises SetRefused: ``name`` is not a poll transmitter.
    :raises ProviderUnreachable: the poll endpoint failed (what was handled is kept; the
        transmitter sends unacknowledged SETs again)."""
    transmitter = receiver.transmitter(name)
    if transmitter.delivery != "poll":
        raise SetRefused("access_denied", "this transmitter pushes its SETs")
    poller, report = _Poller(transmitter, receiver.http), PollReport()
    ack: list[str] = []
    errors: dict[str, Any] = {}

    def receive(token: str) -> None:
        receiver.receive(handle, session, name, token)

    more = True
    while more and report.requests < max_rounds:
        body: dict[str, Any] = {"maxEvents": max_events, "returnImmediately": True, "ack": ack}
        if errors:
            body["setErrs"] = errors
        sets, more = poller.ask(body)
        report.requests += 1
        errors = {}
        ack = _handle_all(sets, receive, report, errors)
    if ack or errors:  # the last acknowledgements, asking for nothing more
        final: dict[str, Any] = {"maxEvents": 0, "returnImmediately": True, "ack": ack}
        if errors:
            final["setErrs"] = errors
        poller.ask(final)
        report.requests += 1
    return report
