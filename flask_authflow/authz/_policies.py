"""Loading Cedar policies at start-up: read the files, parse them, check them against the schema.

Every refusal is a :class:`~flask_authflow.errors.ConfigurationError` whose message starts
with ``file:line`` (an inline policy text is named ``AUTHFLOW_AUTHZ_POLICIES[i]``). Each
policy gets a label for the decision log: its ``@id("...")`` annotation, else the
``file:line`` where it starts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask_authflow.authz._settings import AuthzSettings, PolicyEntry, SchemaSource
from flask_authflow.errors import ConfigurationError, MissingExtraError

__all__ = ["LoadedPolicies", "PolicySource", "load_policies", "statement_lines"]

_KEY = "AUTHFLOW_AUTHZ_POLICIES"
_SCHEMA_KEY = "AUTHFLOW_AUTHZ_SCHEMA"
#: Parse errors that only mean "the text stops early": the error lies further on.
_POLICY_ID = re.compile(r"`(policy[0-9]+)`")
_EARLY_END = ("unexpected end of input", "invalid token")


def cedar() -> Any:
    """The ``cedarpy`` module (the ``[cedar]`` extra)."""
    try:
        import cedarpy
    except ImportError:
        raise MissingExtraError("cedar", "cedarpy") from None
    return cedarpy


@dataclass(frozen=True, slots=True)
class PolicySource:
    """The text of one policy file (or inline entry) and the name errors give it."""

    name: str
    text: str


@dataclass(frozen=True, slots=True)
class LoadedPolicies:
    """The parsed policy set (a ``cedarpy.PolicySet``) and a label per policy, in order
    (Cedar names them ``policy0``, ``policy1``... in that order)."""

    policy_set: Any
    labels: tuple[str, ...]

    def label(self, cedar_id: str) -> str:
        """The label of Cedar's ``policyN`` (the id itself when it is not one of ours)."""
        if cedar_id.startswith("policy") and cedar_id[6:].isdigit():
            index = int(cedar_id[6:])
            if index < len(self.labels):
                return self.labels[index]
        return cedar_id

    def relabel(self, message: str) -> str:
        """``message`` (a Cedar error) with each quoted Cedar id (``policyN``) replaced by its label."""
        return _POLICY_ID.sub(lambda match: f"`{self.label(match.group(1))}`", message)


def _skip_comment(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end


def _skip_string(text: str, i: int) -> int:
    """The index after the string literal that starts at ``i`` (a ``"``)."""
    i += 1
    while i < len(text) and text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def statement_lines(text: str) -> list[int]:
    """The 1-based line where each policy of ``text`` starts (annotations included): the
    first character that is not blank or in a ``//`` comment after each ``;``."""
    starts: list[int] = []
    expecting = True
    i = 0
    while i < len(text):
        ch = text[i]
        if text.startswith("//", i):
            i = _skip_comment(text, i)
            continue
        if expecting and not ch.isspace():
            starts.append(text.count("\n", 0, i) + 1)
            expecting = False
        if ch == '"':
            i = _skip_string(text, i)
            continue
        if ch == ";":
            expecting = True
        i += 1
    return starts


def _error_line(text: str) -> int:
    """The line where parsing ``text`` first fails: the first prefix of whole lines whose
    error is more than "the text stops early"."""
    lines = text.splitlines(keepends=True)
    policy_set = cedar().PolicySet
    for number in range(1, len(lines) + 1):
        try:
            policy_set.from_str("".join(lines[:number]))
        except ValueError as exc:
            if not str(exc).startswith(_EARLY_END):
                return number
    return max(len(lines), 1)


def _parse(source: PolicySource) -> Any:
    try:
        return cedar().PolicySet.from_str(source.text)
    except ValueError as exc:
        raise ConfigurationError(f"{source.name}:{_error_line(source.text)}: {exc} ({_KEY})") from None


def _is_policy_text(entry: str) -> bool:
    """Policy text begins (after blanks and comments) with ``permit``, ``forbid`` or ``@``."""
    for line in entry.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("//"):
            return stripped.startswith(("permit", "forbid", "@"))
    return False


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{what} names {str(path)!r}, which cannot be read: {exc}") from None


def _sources(entries: Sequence[PolicyEntry]) -> list[PolicySource]:
    sources: list[PolicySource] = []
    for index, entry in enumerate(entries):
        if isinstance(entry, str) and _is_policy_text(entry):
            sources.append(PolicySource(f"{_KEY}[{index}]", entry))
            continue
        path = Path(os.fspath(entry))
        files = sorted(path.glob("*.cedar")) if path.is_dir() else [path]
        if not files:
            raise ConfigurationError(f"{_KEY} names the directory {str(path)!r}, which holds no .cedar file")
        sources.extend(PolicySource(str(file), _read(file, _KEY)) for file in files)
    return sources


def _schema(source: SchemaSource) -> Any:
    """The parsed schema (a ``cedarpy.Schema``) of ``AUTHFLOW_AUTHZ_SCHEMA``."""
    schema = cedar().Schema
    name, is_json = _SCHEMA_KEY, False
    if isinstance(source, Mapping):
        text, is_json = json.dumps(source), True
    elif isinstance(source, str) and source.lstrip().startswith("{"):
        text, is_json = source, True
    elif isinstance(source, str) and any(mark in source for mark in "\n;{}"):
        text = source
    else:
        path = Path(os.fspath(source))
        name, text, is_json = str(path), _read(path, _SCHEMA_KEY), path.suffix == ".json"
    try:
        return schema.from_json_str(text) if is_json else schema.from_str(text)
    except ValueError as exc:
        raise ConfigurationError(f"{name}: the Cedar schema is invalid: {exc} ({_SCHEMA_KEY})") from None


def _validate(source: PolicySource, schema: Any, lines: list[int], labels: list[str]) -> None:
    result = cedar().validate_policies(source.text, schema)
    if result.validation_passed:
        return
    first = result.errors[0]
    index = int(first.policy_id[6:]) if first.policy_id[6:].isdigit() else 0
    line = lines[index] if index < len(lines) else 1
    error = LoadedPolicies(None, tuple(labels)).relabel(first.error)
    more = f" (and {len(result.errors) - 1} more)" if len(result.errors) > 1 else ""
    raise ConfigurationError(
        f"{source.name}:{line}: the policy does not match the schema: {error}{more} ({_SCHEMA_KEY})"
    )


def _labels(source: PolicySource, parsed: Any, lines: list[int]) -> list[str]:
    """``@id`` annotation or ``file:line`` of each policy of one source."""
    count = len(parsed)
    if len(lines) != count:  # pragma: no cover - the scanner agrees with Cedar on valid text
        lines = [1] * count
    ids = [""] * count
    annotated = json.loads(cedar().policies_to_json_str(source.text))
    for cedar_id, policy in annotated.get("staticPolicies", {}).items():
        position = int(cedar_id[6:]) if cedar_id[6:].isdigit() else -1
        value = policy.get("annotations", {}).get("id")
        if 0 <= position < count and value:
            ids[position] = value
    return [ids[i] or f"{source.name}:{lines[i]}" for i in range(count)]


def load_policies(settings: AuthzSettings) -> LoadedPolicies | None:
    """The policies of ``AUTHFLOW_AUTHZ_POLICIES``, each checked against
    ``AUTHFLOW_AUTHZ_SCHEMA`` when one is set; ``None`` when no policy is configured.

    :raises ConfigurationError: a file cannot be read, a policy does not parse or does not
        match the schema (the message starts with ``file:line``), or the schema is invalid.
    :raises MissingExtraError: ``cedarpy`` is not installed.
    """
    if not settings.policies:
        return None
    sources = _sources(settings.policies)
    schema = _schema(settings.schema) if settings.schema is not None else None
    labels: list[str] = []
    for source in sources:
        parsed = _parse(source)
        lines = statement_lines(source.text)
        own = _labels(source, parsed, lines)
        if schema is not None:
            _validate(source, schema, lines, own)
        labels.extend(own)
    combined = "\n".join(source.text for source in sources)
    return LoadedPolicies(cedar().PolicySet.from_str(combined), tuple(labels))
