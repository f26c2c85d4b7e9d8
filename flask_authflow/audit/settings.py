"""The audit settings: trusted proxies, the spool for rows a store could not take, retention."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from flask_authflow.audit.client_ip import TrustedProxies
from flask_authflow.errors import ConfigurationError
from flask_authflow.settings import Settings, setting

__all__ = ["AuditSettings"]


@dataclass(frozen=True, slots=True)
class AuditSettings(Settings):
    """``AUTHFLOW_TRUSTED_PROXIES``, ``AUTHFLOW_AUDIT_SPOOL_PATH``, ``AUTHFLOW_AUDIT_RETENTION``."""

    trusted_proxies: tuple[str, ...] = field(metadata=setting("AUTHFLOW_TRUSTED_PROXIES"))
    spool_path: str | None = field(metadata=setting("AUTHFLOW_AUDIT_SPOOL_PATH"))
    #: How long audit rows are kept (``None``: forever).
    retention: timedelta | None = field(metadata=setting("AUTHFLOW_AUDIT_RETENTION"))

    def __post_init__(self) -> None:
        self.proxies()

    def proxies(self) -> TrustedProxies:
        """The proxies whose ``X-Forwarded-For`` is believed.

        :raises ConfigurationError: an entry is malformed or the list trusts everyone."""
        try:
            return TrustedProxies(self.trusted_proxies)
        except (ValueError, ConfigurationError) as exc:
            raise ConfigurationError(f"AUTHFLOW_TRUSTED_PROXIES: {exc}") from exc

    def spool_file(self, instance_path: str | Path) -> Path:
        """Where audit rows go when the store cannot take them: ``AUTHFLOW_AUDIT_SPOOL_PATH``,
        else a file in the app's instance folder."""
        if self.spool_path:
            return Path(self.spool_path)
        return Path(instance_path) / "authflow-audit-spool.jsonl"
