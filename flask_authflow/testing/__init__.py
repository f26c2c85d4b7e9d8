"""Test helpers: the in-process issuer fixture and the pytest plugin's helpers."""

from flask_authflow.testing.fixture import (
    IssuanceEvent,
    IssuanceListener,
    LocalIdpFixture,
    MockIssuanceListener,
)
from flask_authflow.testing.provider import TestOpenIDProvider
from flask_authflow.testing.pytest_plugin import Outbox, SentMessage, login_test_client

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
