"""A factor's public data and the limits on its ids: checked the same way by every store."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flask_authflow._core.ports import FactorConfig

__all__ = ["MAX_FACTOR_ID", "MAX_LOOKUP", "check_factor_config", "dump_factor_data", "load_factor_data"]

#: The longest factor id and lookup value the SQL store keeps (both backends refuse longer ones).
MAX_FACTOR_ID = 64
MAX_LOOKUP = 255


def check_factor_config(config: FactorConfig) -> dict[str, Any]:
    """``config.data`` as the JSON round trip gives it back (what both backends store),
    after the checks :meth:`add_factor` makes: :class:`ValueError` for an empty or overlong
    ``factor_id``, an overlong ``lookup``, a negative counter, or data that is not JSON."""
    if not isinstance(config.factor_id, str) or not 0 < len(config.factor_id) <= MAX_FACTOR_ID:
        raise ValueError(f"a factor id is a non-empty string of at most {MAX_FACTOR_ID} characters")
    if config.lookup is not None and not 0 < len(config.lookup) <= MAX_LOOKUP:
        raise ValueError(f"a factor lookup is a non-empty string of at most {MAX_LOOKUP} characters")
    if config.counter < 0:
        raise ValueError("a factor counter starts at 0 or above")
    return load_factor_data(dump_factor_data(config.data))


def dump_factor_data(data: Mapping[str, Any]) -> str:
    """A factor's public data as JSON text; :class:`ValueError` when it is not JSON-serialisable."""
    try:
        return json.dumps(dict(data), separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"factor data must be JSON-serialisable: {exc}") from None


def load_factor_data(text: str) -> dict[str, Any]:
    loaded = json.loads(text)
    return loaded if isinstance(loaded, dict) else {}
