"""Settings of the policy engine: where the Cedar policies and their schema come from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

from flask_authflow._settings import Settings, setting

__all__ = ["AuthzSettings", "PolicyEntry", "SchemaSource"]

#: One ``AUTHFLOW_AUTHZ_POLICIES`` entry: a file, a directory of ``*.cedar`` files or policy text.
PolicyEntry = str | PathLike[str]
#: ``AUTHFLOW_AUTHZ_SCHEMA``: a schema file, Cedar schema text, JSON text or a JSON object.
SchemaSource = str | PathLike[str] | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AuthzSettings(Settings):
    """``AUTHFLOW_AUTHZ_POLICIES`` and ``AUTHFLOW_AUTHZ_SCHEMA``."""

    policies: tuple[PolicyEntry, ...] = field(metadata=setting("AUTHFLOW_AUTHZ_POLICIES"))
    schema: SchemaSource | None = field(metadata=setting("AUTHFLOW_AUTHZ_SCHEMA"))
