"""Identifier normalisation: one account however the identifier is typed."""

from __future__ import annotations

import pytest

from flask_authflow._core.identifiers import check_tenant
from flask_authflow.errors import InvalidInput
from flask_authflow.login._service import normalise_identifier


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Alice", "alice"),
        ("  alice  ", "alice"),
        ("ALICE@Example.COM", "alice@example.com"),
        ("\uff21\uff4c\uff49\uff43\uff45", "alice"),  # full-width letters (NFKC)
        ("Stra\u00dfe", "strasse"),  # casefold, not lower
        ("e\u0301", "\u00e9"),  # combining accent composed
        ("\ufb01le", "file"),  # the fi ligature
        ("al ice", "al ice"),
    ],
)
def test_normalise(raw: str, expected: str) -> None:
    assert normalise_identifier(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "a" * 255,
        "ali\x00ce",
        "ali\nce",
        "ali\rce",
        "ali\u2028ce",  # LINE SEPARATOR
        "ali\u2029ce",  # PARAGRAPH SEPARATOR
        "ali\u0085ce",  # NEXT LINE (NEL)
        "ali\x0bce",  # vertical tab
        "ali\x0cce",  # form feed
        "ali\x1cce",  # file separator (str.splitlines breaks on it)
        "ali\u200bce",  # zero-width space (format character)
        "ali\u202ece",  # right-to-left override
        "a" * 5000,
    ],
)
def test_refused(raw: str) -> None:
    with pytest.raises(InvalidInput):
        normalise_identifier(raw)


def test_254_characters_is_the_limit() -> None:
    assert normalise_identifier("a" * 254) == "a" * 254


def test_non_string_refused() -> None:
    with pytest.raises(InvalidInput):
        normalise_identifier(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("tenant", ["", "t" * 129, "ac\x00me", 5])
def test_bad_tenants(tenant: object) -> None:
    with pytest.raises(InvalidInput):
        check_tenant(tenant)  # type: ignore[arg-type]


def test_tenants_are_exact() -> None:
    assert check_tenant("Acme") == "Acme"
