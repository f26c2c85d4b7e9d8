"""The shipped catalogues are complete and compiled: every msgid the package marks (extracted
here, with the project's babel.cfg, as ``scripts/update-translations`` does) has a German and a
French translation that is neither empty nor fuzzy and keeps the message's placeholders and
markup; the ``.mo`` files are what the ``.po`` files compile to."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from flask_authflow.i18n import DOMAIN, LOCALES, TRANSLATIONS_DIRECTORY

babel_extract = pytest.importorskip("babel.messages.extract", reason="Babel comes with Flask-Babel ([dev])")
from babel.messages.catalog import Catalog, Message  # noqa: E402
from babel.messages.frontend import parse_mapping_cfg  # noqa: E402
from babel.messages.mofile import write_mo  # noqa: E402
from babel.messages.pofile import read_po  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "flask_authflow"
TRANSLATED = [locale for locale in LOCALES if locale != "en"]
_PLACEHOLDER = re.compile(r"%\([a-z_]+\)[sd]")
_TAG = re.compile(r"</?[a-z]+[^>]*>")


def extracted() -> Catalog:
    """Every message the package marks for translation (Python and templates)."""
    with open(REPO / "babel.cfg", encoding="utf-8") as config:
        method_map, options_map = parse_mapping_cfg(config)
    keywords = {**babel_extract.DEFAULT_KEYWORDS, "lazy_gettext": None}
    catalogue = Catalog(domain=DOMAIN)
    for filename, lineno, message, comments, context in babel_extract.extract_from_dir(
        PACKAGE, method_map, options_map, keywords=keywords
    ):
        catalogue.add(message, None, [(filename, lineno)], auto_comments=comments, context=context)
    return catalogue


def po_path(locale: str) -> Path:
    return TRANSLATIONS_DIRECTORY / locale / "LC_MESSAGES" / f"{DOMAIN}.po"


def load(locale: str) -> Catalog:
    with open(po_path(locale), "rb") as handle:
        return read_po(handle, locale=locale, domain=DOMAIN)


def _forms(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def problems(wanted: Catalog, catalogue: Catalog) -> list[str]:
    """What is wrong with ``catalogue`` for the msgids of ``wanted``: missing, fuzzy or empty
    entries, lost or invented placeholders and markup, entries no code uses any more."""
    found: list[str] = []
    for message in wanted:
        if not message.id:
            continue
        entry = catalogue.get(message.id, context=message.context)
        if entry is None:
            found.append(f"missing: {message.id!r}")
            continue
        found.extend(_entry_problems(message, entry))
    found.extend(
        f"not in the code any more: {entry.id!r}"
        for entry in catalogue
        if entry.id and wanted.get(entry.id, context=entry.context) is None
    )
    return found


def _entry_problems(message: Message, entry: Message) -> list[str]:
    strings = _forms(entry.string)
    if entry.fuzzy:
        return [f"fuzzy: {message.id!r}"]
    if not strings or not all(strings):
        return [f"empty: {message.id!r}"]
    source = " ".join(_forms(message.id))
    wanted_placeholders = sorted(set(_PLACEHOLDER.findall(source)))
    wanted_tags = sorted(_TAG.findall(_forms(message.id)[0]))
    found: list[str] = []
    for text in strings:
        if sorted(set(_PLACEHOLDER.findall(text))) != wanted_placeholders:
            found.append(f"placeholders differ: {message.id!r} -> {text!r}")
        if sorted(_TAG.findall(text)) != wanted_tags:
            found.append(f"markup differs: {message.id!r} -> {text!r}")
    return found


@pytest.fixture(scope="module")
def wanted() -> Catalog:
    catalogue = extracted()
    assert len(catalogue) > 200  # the extraction found the package's messages
    return catalogue


def test_the_extraction_finds_python_and_template_messages(wanted: Catalog) -> None:
    for msgid in (
        "Wrong username or password.",  # N_ in a Python constant
        "Too many failed attempts. Try again after %(time)s.",  # gettext with a value
        ("%(num)d minute", "%(num)d minutes"),  # ngettext
        "Sign in with a passkey",  # a template
        "This browser cannot use security keys or passkeys.",  # the WebAuthn script
        "Authentication required.",  # a typed error's default message
    ):
        key = msgid[0] if isinstance(msgid, tuple) else msgid
        assert wanted.get(key) is not None, msgid


@pytest.mark.parametrize("locale", TRANSLATED)
def test_every_message_is_translated_in_the_shipped_catalogue(wanted: Catalog, locale: str) -> None:
    assert problems(wanted, load(locale)) == []


@pytest.mark.parametrize("locale", TRANSLATED)
def test_the_mo_files_are_compiled_from_the_po_files(locale: str) -> None:
    compiled = io.BytesIO()
    write_mo(compiled, load(locale), use_fuzzy=False)
    shipped = po_path(locale).with_suffix(".mo")
    assert shipped.is_file(), f"{shipped} is missing: run ./scripts/update-translations"
    assert shipped.read_bytes() == compiled.getvalue(), "stale .mo: run ./scripts/update-translations"


def test_the_checker_reports_missing_fuzzy_empty_and_broken_entries(wanted: Catalog) -> None:
    """The completeness check can fail: a catalogue with each kind of fault is reported."""
    broken = load("de")
    message_ids = [m.id for m in broken if isinstance(m.id, str) and m.id]
    gone, fuzzy, empty = "Wrong username or password.", "Sign in", "Cancel"
    placeholder = "Sign in with %(provider)s"
    markup = "Signed in as <strong>%(name)s</strong>."
    assert {gone, fuzzy, empty, placeholder, markup} <= set(message_ids)
    broken.delete(gone)
    broken[fuzzy].flags.add("fuzzy")
    broken[empty].string = ""
    broken[placeholder].string = "Mit %(anbieter)s anmelden"
    broken[markup].string = "Angemeldet als %(name)s."
    broken.add("A message nobody marks", "Eine Nachricht")
    assert sorted(problems(wanted, broken)) == sorted(
        [
            f"missing: {gone!r}",
            f"fuzzy: {fuzzy!r}",
            f"empty: {empty!r}",
            f"placeholders differ: {placeholder!r} -> 'Mit %(anbieter)s anmelden'",
            f"markup differs: {markup!r} -> 'Angemeldet als %(name)s.'",
            "not in the code any more: 'A message nobody marks'",
        ]
    )


@pytest.mark.slow  # runs the extraction script
@pytest.mark.skipif(shutil.which("bash") is None, reason="the script is a bash script")
def test_the_update_script_finds_nothing_to_do(tmp_path: Path) -> None:
    """``scripts/update-translations --check`` (extract, compare) agrees with the catalogues."""
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "update-translations"), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    for locale in TRANSLATED:
        assert f"{locale}/LC_MESSAGES/{DOMAIN}.po: 0 entries need a translation" in run.stdout
