"""Test helpers: the in-process issuer fixture and the pytest plugin's helpers.

They need pytest, the ``[testing]`` extra (``pip install 'flask-authflow[testing]'``):
without it, importing this package raises :class:`~flask_authflow.errors.MissingExtraError`
naming the extra, instead of a bare ``ModuleNotFoundError`` from deep inside the plugin.
"""

from flask_authflow.errors import MissingExtraError

try:
    import pytest  # noqa: F401  (the plugin below is built on it)
except ModuleNotFoundError as exc:  # the extra is not installed
    if exc.name != "pytest":
        raise
    raise MissingExtraError("testing", "pytest") from exc

from flask_authflow._clock import MockClock
from flask_authflow.testing._provider import TestOpenIDProvider
from flask_authflow.testing._pytest_plugin import Outbox, SentMessage, login_test_client
from flask_authflow.testing._users import add_user

__all__ = [
    "MockClock",
    "Outbox",
    "SentMessage",
    "TestOpenIDProvider",
    "add_user",
    "login_test_client",
]
