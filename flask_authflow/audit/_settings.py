"""The audit settings: trusted proxies, the spool for rows a store could not take, retention."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from flask_authflow._settings import MIN_SIGNING_KEY_BYTES, Settings, coerce_key, setting
from flask_authflow.audit._chain import AuditChain
from flask_authflow.audit._client_ip import TrustedProxies
from flask_authflow.errors import ConfigurationError

__all__ = ["AuditSettings"]


@dataclass(frozen=True, slots=True)
class AuditSettings(Settings):
    """``AUTHFLOW_TRUSTED_PROXIES``, ``AUTHFLOW_AUDIT_SPOOL_PATH``, ``AUTHFLOW_AUDIT_RETENTION``,
    ``AUTHFLOW_AUDIT_CHAIN`` and its keys."""

    trusted_proxies: tuple[str, ...] = field(metadata=setting("AUTHFLOW_TRUSTED_PROXIES"))
    spool_path: str | None = field(metadata=setting("AUTHFLOW_AUDIT_SPOOL_PATH"))
    #: How long audit rows are kept (``None``: forever).
    retention: timedelta | None = field(metadata=setting("AUTHFLOW_AUDIT_RETENTION"))
    #: Whether audit rows are chained (tamper-evident; needs the key and migration 0010).
    chain: bool = field(metadata=setting("AUTHFLOW_AUDIT_CHAIN"))
    chain_key: str | bytes | None = field(metadata=setting("AUTHFLOW_AUDIT_CHAIN_KEY"), repr=False)
    previous_chain_keys: tuple[bytes, ...] = field(
        metadata=setting("AUTHFLOW_PREVIOUS_AUDIT_CHAIN_KEYS"), repr=False
    )

    def __post_init__(self) -> None:
        self.proxies()
        self.audit_chain()

    def audit_chain(self) -> AuditChain | None:
        """The chain's keys when ``AUTHFLOW_AUDIT_CHAIN`` is on (else ``None``).

        :raises ConfigurationError: the chain is on without a key of at least 32 bytes."""
        if not self.chain:
            return None
        return self._chain_keys(required=True)

    def chain_keys(self) -> AuditChain | None:
        """The chain's keys whenever ``AUTHFLOW_AUDIT_CHAIN_KEY`` is set (``audit verify``
        reads a chain with them after the chain was switched off), else ``None``."""
        return self._chain_keys(required=False)

    def _chain_keys(self, *, required: bool) -> AuditChain | None:
        if self.chain_key in (None, "", b"") and not required:
            return None
        if self.chain_key in (None, "", b""):
            raise ConfigurationError(
                "AUTHFLOW_AUDIT_CHAIN is on but AUTHFLOW_AUDIT_CHAIN_KEY is not set: set it to a random "
                "secret of at least 32 bytes, not the signing key (python -c 'import secrets; "
                "print(secrets.token_urlsafe(48))')"
            )
        assert self.chain_key is not None
        key = coerce_key("AUTHFLOW_AUDIT_CHAIN_KEY", self.chain_key)
        if len(key) < MIN_SIGNING_KEY_BYTES:
            raise ConfigurationError(
                f"AUTHFLOW_AUDIT_CHAIN_KEY is {len(key)} bytes: set it to at least "
                f"{MIN_SIGNING_KEY_BYTES} random bytes"
            )
        return AuditChain(key, self.previous_chain_keys)

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
