"""The manual speaks for itself: no page or message of the package points readers at a
document they do not have (an internal "spec", a ``docs/*.rst`` path pip users lack)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flask_authflow._settings import apply_defaults
from flask_authflow.errors import ConfigurationError

REPO = Path(__file__).resolve().parent.parent
#: "the spec" (a document outside the repository), design notes, and paths into docs/.
FORBIDDEN = re.compile(r"(?i:\bthe spec\b)|\bDESIGN\b|\bdocs/[\w-]+\.rst\b")


def _texts() -> list[Path]:
    files = [*sorted((REPO / "docs").glob("*.rst")), REPO / "CHANGES.rst"]  # the changelog page includes it
    package = REPO / "flask_authflow"
    files += sorted(p for p in package.rglob("*") if p.suffix in (".py", ".html", ".txt", ".po"))
    return files


def offending_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if FORBIDDEN.search(line)]


def test_no_page_or_module_names_documents_outside_the_manual() -> None:
    found = {
        str(path.relative_to(REPO)): lines
        for path in _texts()
        if (lines := offending_lines(path.read_text(encoding="utf-8", errors="replace")))
    }
    assert found == {}


@pytest.mark.parametrize(
    "line",
    ["as the spec says", "see The Spec", "per DESIGN §4", "check docs/config.rst", "in docs/howto-proxy.rst"],
)
def test_the_check_finds_such_references(line: str) -> None:
    assert offending_lines(f"text\n{line}\nmore") == [line]


@pytest.mark.parametrize("line", ["the specification of OpenID", "a spectrum", "design notes", "docs/_build"])
def test_the_check_leaves_other_words_alone(line: str) -> None:
    assert offending_lines(line) == []


def test_the_unknown_key_error_names_the_manuals_section() -> None:
    with pytest.raises(ConfigurationError) as caught:
        apply_defaults({"AUTHFLOW_SIGNIN_KEY": "typo"})
    message = str(caught.value)
    assert "AUTHFLOW_SIGNIN_KEY" in message and '"Configuration" section' in message
    assert "docs/" not in message and ".rst" not in message


def test_the_manual_has_the_pallets_shape() -> None:
    index = (REPO / "docs" / "index.rst").read_text(encoding="utf-8")
    captions = re.findall(r":caption: (.+)", index)
    assert captions == [
        "Getting started",
        "User guide",
        "How-to guides",
        "Production",
        "Reference",
        "Project",
    ]
    pages = ("installation", "howto-migrate", "howto-postgresql-redis", "howto-rotate-keys", "howto-proxy")
    for page in (*pages, "checklist", "config", "api", "changelog"):
        assert re.search(rf"^   {page}$", index, re.MULTILINE), page
        assert (REPO / "docs" / f"{page}.rst").is_file()
    checklist = (REPO / "docs" / "checklist.rst").read_text(encoding="utf-8")
    for topic in (
        "Keys",
        "Secure",
        "Trusted proxies",
        "Database",
        "Backups",
        "Rotation schedule",
        "/metrics",
    ):
        assert topic in checklist
    assert ".. include:: ../CHANGES.rst" in (REPO / "docs" / "changelog.rst").read_text(encoding="utf-8")


def test_the_benchmarks_page_is_valid_restructuredtext() -> None:
    """benchmarks/README.rst is read on the repository's host and quoted in closing notes: a
    title underline too short, a broken table, and its figures render as an error."""
    import docutils.core
    import docutils.utils

    source = (REPO / "benchmarks" / "README.rst").read_text(encoding="utf-8")
    settings = {"report_level": 2, "halt_level": 2, "warning_stream": False}
    try:
        docutils.core.publish_doctree(source, settings_overrides=settings)
    except docutils.utils.SystemMessage as problem:  # pragma: no cover - the failure's message
        pytest.fail(f"benchmarks/README.rst: {problem}")
