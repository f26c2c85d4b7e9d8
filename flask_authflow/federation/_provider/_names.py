"""Provider names and the multi-tenant issuer placeholder, shared by the provider's parts."""

from __future__ import annotations

import re
from typing import Any, Final

from flask_authflow.errors import ConfigurationError

__all__ = ["PROVIDER_NAME_RE", "TENANT_PLACEHOLDER", "check_provider_name"]

#: Provider names are slugs (they appear in URLs and, as ``oidc:<name>``, in audit rows).
PROVIDER_NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,25}")
#: The placeholder of a multi-tenant issuer (Microsoft's ``common`` and ``organizations``).
TENANT_PLACEHOLDER: Final = "{tenantid}"


def check_provider_name(name: Any) -> str:
    """``name`` if it is a provider slug (lowercase letters, digits, ``-``, ``_``; up to 26)."""
    if not isinstance(name, str) or not PROVIDER_NAME_RE.fullmatch(name):
        raise ConfigurationError(
            f"provider name {name!r} is not a slug: use lowercase letters, digits, '-' and '_' (at most 26)"
        )
    return name
