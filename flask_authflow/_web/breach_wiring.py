"""The password policy of an app, with the breached-password check when it is switched on.

The range API is asked through the provider HTTP client (https only, timeouts, a size cap
on the answer, no redirects): the same rules as every other outbound request.
"""

from __future__ import annotations

from typing import Any

from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._http import HttpClient, RequestsHttpClient, check_provider_url
from flask_authflow.login._breached import BreachedPasswords, RangeFetch
from flask_authflow.login._password_policy import PasswordPolicy
from flask_authflow.login._settings import PasswordPolicySettings

__all__ = ["password_policy", "range_fetch"]

#: The range answer is a few tens of KiB; anything much larger is not the service.
MAX_RANGE_BYTES = 256 * 1024


def range_fetch(url: str, client: HttpClient) -> RangeFetch:
    """``fetch(prefix)`` for :class:`BreachedPasswords`: GET ``{url}/{prefix}`` with padding."""
    base = check_provider_url(url, "AUTHFLOW_PASSWORD_BREACH_CHECK_URL", error=ConfigurationError).rstrip("/")

    def fetch(prefix: str) -> str:
        response = client.get(f"{base}/{prefix}", headers={"Add-Padding": "true"})
        if response.status != 200:
            raise ValueError(f"the range API answered {response.status}")
        if len(response.body) > MAX_RANGE_BYTES:
            raise ValueError("the range answer is too large")
        return response.body.decode("utf-8")

    return fetch


def password_policy(settings: PasswordPolicySettings, http_client: Any = None) -> PasswordPolicy:
    """The policy ``AUTHFLOW_PASSWORD_*`` describe; with ``AUTHFLOW_PASSWORD_BREACH_CHECK`` on,
    new passwords are also looked up (through ``http_client``, default a new provider client)."""
    policy = PasswordPolicy.from_settings(settings)
    if not settings.breach_check:
        return policy
    client: HttpClient = http_client if http_client is not None else RequestsHttpClient()
    check = BreachedPasswords(
        range_fetch(settings.breach_check_url, client), fail_closed=settings.breach_check_fail_closed
    )
    return PasswordPolicy(
        min_length=policy.min_length,
        min_length_with_second_factor=policy.min_length_with_second_factor,
        blocklist=policy.blocklist,
        site_name=policy.site_name,
        zxcvbn_min_score=policy.zxcvbn_min_score,
        breach_check=check,
    )
