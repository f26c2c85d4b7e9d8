"""The API token settings: ``AUTHFLOW_API_TOKEN_*``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from flask_authflow._settings import Settings, setting
from flask_authflow.api_auth._tokens import check_scopes
from flask_authflow.errors import ConfigurationError, InvalidInput

__all__ = ["ApiTokenSettings"]


@dataclass(frozen=True, slots=True)
class ApiTokenSettings(Settings):
    """Expiry, last-use bookkeeping, a per-user cap and the scopes tokens may carry."""

    #: The lifetime of a token created without one (``None``: tokens do not expire).
    default_expiry: timedelta | None = field(metadata=setting("AUTHFLOW_API_TOKEN_DEFAULT_EXPIRY"))
    #: The longest lifetime a token may be given (``None``: no limit, and no expiry allowed).
    max_expiry: timedelta | None = field(metadata=setting("AUTHFLOW_API_TOKEN_MAX_EXPIRY"))
    #: ``last_used_at`` is written at most this often per token.
    last_used_interval: timedelta = field(metadata=setting("AUTHFLOW_API_TOKEN_LAST_USED_INTERVAL"))
    max_per_user: int = field(metadata=setting("AUTHFLOW_API_TOKEN_MAX_PER_USER"))
    #: The scopes a token may be given (empty: any well-formed scope).
    scopes: tuple[str, ...] = field(metadata=setting("AUTHFLOW_API_TOKEN_SCOPES"))

    def __post_init__(self) -> None:
        try:
            check_scopes(self.scopes)
        except InvalidInput as exc:
            raise ConfigurationError(f"AUTHFLOW_API_TOKEN_SCOPES: {exc.message}") from None
        maximum, default = self.max_expiry, self.default_expiry
        if maximum is not None and (default is None or default > maximum):
            raise ConfigurationError(
                "AUTHFLOW_API_TOKEN_DEFAULT_EXPIRY must not be longer than AUTHFLOW_API_TOKEN_MAX_EXPIRY "
                f"({maximum}); set a shorter default or a longer maximum (None: no maximum)"
            )
