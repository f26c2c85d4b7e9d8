"""Test helpers: the in-process issuer fixture and the pytest plugin's helpers."""

from .fixture import IssuanceEvent, IssuanceListener, LocalIdpFixture, MockIssuanceListener
from .provider import TestOpenIDProvider
from .pytest_plugin import Outbox, SentMessage, login_test_client

__all__ = [
    "IssuanceEvent",
    "IssuanceListener",
    "LocalIdpFixture",
    "MockIssuanceListener",
    "Outbox",
    "SentMessage",
    "TestOpenIDProvider",
    "login_test_client",
]
