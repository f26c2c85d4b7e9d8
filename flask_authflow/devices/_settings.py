"""Settings of the device feature: the device cookie, how long a trust lasts, the mail."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta

from flask_authflow._settings import Settings, setting
from flask_authflow.errors import ConfigurationError

__all__ = ["DeviceSettings"]


@dataclass(frozen=True, slots=True)
class DeviceSettings(Settings):
    """``AUTHFLOW_DEVICE_COOKIE_NAME``, ``AUTHFLOW_DEVICE_COOKIE_LIFETIME``,
    ``AUTHFLOW_DEVICE_TRUST_DURATION`` and ``AUTHFLOW_DEVICE_NEW_DEVICE_MAIL``."""

    cookie_name: str = field(metadata=setting("AUTHFLOW_DEVICE_COOKIE_NAME"))
    cookie_lifetime: timedelta = field(metadata=setting("AUTHFLOW_DEVICE_COOKIE_LIFETIME"))
    trust_duration: timedelta = field(metadata=setting("AUTHFLOW_DEVICE_TRUST_DURATION"))
    new_device_mail: bool = field(metadata=setting("AUTHFLOW_DEVICE_NEW_DEVICE_MAIL"))

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.cookie_name):
            raise ConfigurationError("AUTHFLOW_DEVICE_COOKIE_NAME must be a non-empty cookie token")
        if self.trust_duration > self.cookie_lifetime:
            raise ConfigurationError(
                "AUTHFLOW_DEVICE_TRUST_DURATION must not be longer than AUTHFLOW_DEVICE_COOKIE_LIFETIME "
                "(the trust would outlive the cookie that carries the device id)"
            )
