"""Declared shapes of the headless API's bodies: one object both checks a request and
describes it in the OpenAPI document, so the two cannot drift.

A shape is a small frozen value (:class:`String`, :class:`Boolean`, :class:`Integer`,
:class:`Array`, :class:`Object`, :class:`Nullable`, :class:`Json`). :meth:`Shape.check`
returns the value as the route reads it or raises
:class:`~flask_authflow.errors.InvalidInput` (a typed 400, never a 500);
:meth:`Shape.json_schema` is its JSON Schema (2020-12, the dialect of OpenAPI 3.1). A named
:class:`Object` becomes a component of the document (``$ref``).

Strings are refused when they hold a NUL character or an unpaired surrogate (JSON allows
``"\\ud800"``; no store or hash accepts it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flask_authflow.errors import InvalidInput

__all__ = [
    "Array",
    "Boolean",
    "Integer",
    "Json",
    "Nullable",
    "Object",
    "Shape",
    "String",
    "component_schemas",
]

#: Where a named object's schema is in the document.
COMPONENTS = "#/components/schemas/"


class Shape:
    """A declared JSON value: checks requests, describes itself."""

    description: str = ""

    def check(self, value: Any, where: str) -> Any:
        """``value`` as the route reads it; :class:`InvalidInput` naming ``where`` otherwise."""
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of this shape, inline."""
        raise NotImplementedError

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema to put where this shape is used (a ``$ref`` for a named object)."""
        body = self.schema()
        if self.description:
            body["description"] = self.description
        return body

    def named(self) -> list[Object]:
        """The named objects this shape uses (for the document's components)."""
        return []


def _refuse(where: str, what: str) -> InvalidInput:
    return InvalidInput(f"{where}: {what}")


@dataclass(frozen=True)
class String(Shape):
    """A string of ``min_length`` to ``max_length`` characters; ``choices`` restricts it to
    those values, ``pattern`` to a regular expression (matched in full)."""

    max_length: int
    min_length: int = 0
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    description: str = ""

    def check(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise _refuse(where, "must be a string")
        if "\x00" in value:
            raise _refuse(where, "must not contain NUL")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _refuse(where, "must be valid Unicode") from None
        if not self.min_length <= len(value) <= self.max_length:
            raise _refuse(where, f"must be {self.min_length} to {self.max_length} characters long")
        if self.choices and value not in self.choices:
            raise _refuse(where, f"must be one of {', '.join(self.choices)}")
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise _refuse(where, "is not in the expected form")
        return value

    def schema(self) -> dict[str, Any]:
        body: dict[str, Any] = {"type": "string", "maxLength": self.max_length}
        if self.min_length:
            body["minLength"] = self.min_length
        if self.choices:
            body["enum"] = list(self.choices)
        if self.pattern is not None:
            body["pattern"] = f"^(?:{self.pattern})$"
        return body


@dataclass(frozen=True)
class Boolean(Shape):
    """``true`` or ``false`` (never ``"1"`` or ``1``)."""

    description: str = ""

    def check(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise _refuse(where, "must be true or false")
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


@dataclass(frozen=True)
class Integer(Shape):
    """A whole number within ``minimum`` .. ``maximum``."""

    minimum: int
    maximum: int
    description: str = ""

    def check(self, value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _refuse(where, "must be a whole number")
        if not self.minimum <= value <= self.maximum:
            raise _refuse(where, f"must be from {self.minimum} to {self.maximum}")
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}


@dataclass(frozen=True)
class Array(Shape):
    """A list of at most ``max_items`` values of ``items``."""

    items: Shape
    max_items: int
    description: str = ""

    def check(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise _refuse(where, "must be an array")
        if len(value) > self.max_items:
            raise _refuse(where, f"must have at most {self.max_items} items")
        return [self.items.check(item, f"{where}[{i}]") for i, item in enumerate(value)]

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "items": self.items.json_schema(), "maxItems": self.max_items}

    def named(self) -> list[Object]:
        return self.items.named()


@dataclass(frozen=True)
class Nullable(Shape):
    """``inner`` or ``null`` (``None``)."""

    inner: Shape
    description: str = ""

    def check(self, value: Any, where: str) -> Any:
        return None if value is None else self.inner.check(value, where)

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [self.inner.json_schema(), {"type": "null"}]}

    def named(self) -> list[Object]:
        return self.inner.named()


@dataclass(frozen=True)
class Json(Shape):
    """A JSON object taken as it is (a WebAuthn credential), read as compact JSON text of
    at most ``max_bytes``; its members are checked by the service that reads it."""

    max_bytes: int
    description: str = ""

    def check(self, value: Any, where: str) -> str:
        if not isinstance(value, dict):
            raise _refuse(where, "must be an object")
        try:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
        except ValueError:
            raise _refuse(where, "is not valid JSON") from None
        if len(text) > self.max_bytes:
            raise _refuse(where, f"must be at most {self.max_bytes} bytes")
        return text

    def schema(self) -> dict[str, Any]:
        return {"type": "object"}


@dataclass(frozen=True)
class Object(Shape):
    """A JSON object with ``properties``; ``required`` names those that must be present.
    Unknown members are refused. ``name`` makes it a component of the document."""

    properties: Mapping[str, Shape]
    required: tuple[str, ...] = ()
    name: str | None = None
    description: str = ""
    #: Members an answer may carry beyond ``properties`` (an error's details): allowed.
    open: bool = False

    def __post_init__(self) -> None:
        unknown = [name for name in self.required if name not in self.properties]
        if unknown:
            raise ValueError(f"required members {unknown} are not properties of {self.name or 'the object'}")

    def check(self, value: Any, where: str = "body") -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _refuse(where, "must be a JSON object")
        extra = sorted(str(k) for k in value if k not in self.properties)
        if extra and not self.open:
            raise _refuse(where, f"unknown member {extra[0]!r}")
        missing = [name for name in self.required if name not in value]
        if missing:
            raise _refuse(where, f"{missing[0]!r} is required")
        return {
            name: shape.check(value[name], f"{where}.{name}")
            for name, shape in self.properties.items()
            if name in value
        }

    def schema(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": "object",
            "properties": {name: shape.json_schema() for name, shape in self.properties.items()},
            "additionalProperties": self.open,
        }
        if self.required:
            body["required"] = list(self.required)
        return body

    def json_schema(self) -> dict[str, Any]:
        if self.name is None:
            return super().json_schema()
        return {"$ref": COMPONENTS + self.name}

    def definition(self) -> dict[str, Any]:
        """The component's schema (a named object), with its description."""
        body = self.schema()
        if self.description:
            body["description"] = self.description
        return body

    def named(self) -> list[Object]:
        found = [self] if self.name is not None else []
        for shape in self.properties.values():
            found += shape.named()
        return found


def component_schemas(shapes: list[Shape]) -> dict[str, dict[str, Any]]:
    """The ``components.schemas`` of the named objects ``shapes`` use, by name.

    :raises ValueError: two different objects share a name.
    """
    found: dict[str, Object] = {}
    for shape in shapes:
        for obj in shape.named():
            known = found.setdefault(obj.name or "", obj)
            if known != obj:
                raise ValueError(f"two different schemas are named {obj.name!r}")
    return {name: found[name].definition() for name in sorted(found)}
