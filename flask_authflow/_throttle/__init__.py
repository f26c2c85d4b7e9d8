"""Abuse protection: rate limits per address, network, account and mail recipient.

See :mod:`flask_authflow._throttle.limiter` for how a flow asks, and the manual's "Security" page for
the limits and why they are what they are.
"""

from __future__ import annotations

from flask_authflow._throttle.keys import address_key, digest, network_key
from flask_authflow._throttle.limiter import Throttle
from flask_authflow._throttle.settings import DEFAULT_LIMITS, SCOPES, ThrottleSettings, parse_limits

__all__ = [
    "DEFAULT_LIMITS",
    "SCOPES",
    "Throttle",
    "ThrottleSettings",
    "address_key",
    "digest",
    "network_key",
    "parse_limits",
]
