"""Devices: a device identity per browser, a device record per user, trusted devices.

* :mod:`~flask_authflow.devices._cookie`: the long-lived signed device cookie, bound to the
  User-Agent as the session is; a forged, expired or rebound cookie is ignored.
* :mod:`~flask_authflow.devices._labels`: "Firefox 120 on Ubuntu" from the User-Agent.
* :mod:`~flask_authflow.devices._service`: record a sign-in, trust, forget, end trusts.

This feature knows nothing of Flask requests: :mod:`flask_authflow._web.devices` reads and
sets the cookie, and the login decides with the trust it is given
(:attr:`~flask_authflow.login._service.AuthnService.device_trusted`).
"""

from __future__ import annotations

from flask_authflow.devices._user_devices import Devices

__all__ = [
    "Devices",
]
