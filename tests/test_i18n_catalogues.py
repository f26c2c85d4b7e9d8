"""The shipped catalogues are complete and compiled: every msgid the package marks (extracted
here, with the project's babel.cfg, as ``scripts/update-translations`` does) has a German and a
French translation that is neither empty nor fuzzy and keeps the message's placeholders and
markup; the ``.mo`` files hold what the ``.po`` files compile to (the same messages,
translations and plural rule, read back from the ``.mo``: not the same bytes, which differ
between Babel releases)."""

from __future__ import annotations

import gettext
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from flask_authflow._i18n import DOMAIN, LOCALES, TRANSLATIONS_DIRECTORY

babel_extract = pytest.importorskip("babel.messages.extract", reason="Babel comes with Flask-Babel ([dev])")
from babel.messages.catalog import Catalog, Message  # noqa: E402

try:  # the newer name; flask-babel>=4 allows Babel 2.12, which has only (the now deprecated) parse_mapping
    from babel.messages.frontend import parse_mapping_cfg
except ImportError:  # an older Babel
    from babel.messages.frontend import parse_mapping as parse_mapping_cfg
from babel.messages.mofile import read_mo, write_mo  # noqa: E402
from babel.messages.pofile import read_po, write_po  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "flask_authflow"
TRANSLATED = [locale for locale in LOCALES if locale != "en"]
_PLACEHOLDER = re.compile(r"%\([a-z_]+\)[sd]")
_TAG = re.compile(r"</?[a-z]+[^>]*>")


def _searched(path: str) -> bool:
    """Every directory but hidden ones and caches: Babel's default also skips ``_private``
    ones, which is where nearly all of the package's modules live."""
    name = Path(path).name
    return not name.startswith(".") and name != "__pycache__"


def extracted() -> Catalog:
    """Every message the package marks for translation (Python and templates)."""
    with open(REPO / "babel.cfg", encoding="utf-8") as config:
        method_map, options_map = parse_mapping_cfg(config)
    keywords = {**babel_extract.DEFAULT_KEYWORDS, "lazy_gettext": None}
    catalogue = Catalog(domain=DOMAIN)
    for filename, lineno, message, comments, context in babel_extract.extract_from_dir(
        PACKAGE, method_map, options_map, keywords=keywords, directory_filter=_searched
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


#: A compiled message: its context and msgid (both forms of a plural one).
MessageKey = tuple[str | None, str | tuple[str, ...]]


def _key(message: Message) -> MessageKey:
    return message.context, message.id if isinstance(message.id, str) else tuple(message.id)


def compiled_messages(catalogue: Catalog) -> dict[MessageKey, str | tuple[str, ...]]:
    """What a ``.mo`` compiled from ``catalogue`` answers: every translated entry but the fuzzy
    ones, an empty plural form reading as the source's (as gettext shows an untranslated one)."""
    compiled: dict[MessageKey, str | tuple[str, ...]] = {}
    for message in catalogue:
        if not message.id or not message.string or message.fuzzy:
            continue
        if isinstance(message.id, str):
            compiled[_key(message)] = str(message.string)
        else:
            sources = list(message.id)
            compiled[_key(message)] = tuple(
                form or sources[min(index, 1)] for index, form in enumerate(_forms(message.string))
            )
    return compiled


def _plural_rule(value: str | None) -> str:
    return "".join((value or "").split())


def mo_problems(catalogue: Catalog, mo_file: Path) -> list[str]:
    """How the compiled ``mo_file`` differs from what ``catalogue`` (a ``.po``) compiles to:
    another plural rule, a message not compiled, one the ``.po`` has not (or has fuzzy), a
    translation that differs. The bytes are not compared: Babel releases write them differently."""
    if not mo_file.is_file():
        return [f"missing: {mo_file}"]
    with open(mo_file, "rb") as handle:
        shipped = {_key(message): message.string for message in read_mo(handle) if message.id}
    with open(mo_file, "rb") as handle:  # the header as gettext reads it at run time
        header = gettext.GNUTranslations(handle).info()
    wanted = compiled_messages(catalogue)
    found: list[str] = []
    if _plural_rule(header.get("plural-forms")) != _plural_rule(catalogue.plural_forms):
        found.append(f"plural forms differ: {header.get('plural-forms')!r}, not {catalogue.plural_forms!r}")
    found.extend(f"not compiled: {key!r}" for key in sorted(wanted.keys() - shipped.keys(), key=repr))
    extra = sorted(shipped.keys() - wanted.keys(), key=repr)
    found.extend(f"not in the .po or fuzzy: {key!r}" for key in extra)
    found.extend(
        f"translation differs: {key!r}"
        for key in sorted(wanted.keys() & shipped.keys(), key=repr)
        if _forms(shipped[key]) != _forms(wanted[key])
    )
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
    shipped = po_path(locale).with_suffix(".mo")
    assert mo_problems(load(locale), shipped) == [], "stale .mo: run ./scripts/update-translations"


def _compile(catalogue: Catalog, mo_file: Path) -> Path:
    with open(mo_file, "wb") as handle:
        write_mo(handle, catalogue, use_fuzzy=False)
    return mo_file


def _po_changed_after_compiling(po: Catalog, compiled: Catalog) -> str:
    po["Cancel"].string = "Abbruch"
    return "translation differs: (None, 'Cancel')"


def _plural_form_changed_after_compiling(po: Catalog, compiled: Catalog) -> str:
    po["%(num)d code left"].string = ("noch %(num)d Code", "noch %(num)d Codes")
    return "translation differs: (None, ('%(num)d code left', '%(num)d codes left'))"


def _po_entry_went_fuzzy_after_compiling(po: Catalog, compiled: Catalog) -> str:
    po["Cancel"].flags.add("fuzzy")  # its msgid changed in the code: the old text is a guess
    return "not in the .po or fuzzy: (None, 'Cancel')"


def _message_missing_from_the_mo(po: Catalog, compiled: Catalog) -> str:
    compiled.delete("Cancel")
    return "not compiled: (None, 'Cancel')"


def _extra_message_in_the_mo(po: Catalog, compiled: Catalog) -> str:
    compiled.add("A message nobody marks", "Eine Nachricht")
    return "not in the .po or fuzzy: (None, 'A message nobody marks')"


def _plural_rule_changed_after_compiling(po: Catalog, compiled: Catalog) -> str:
    compiled.mime_headers = [("Plural-Forms", "nplurals=2; plural=(n > 1);")]  # French's, in German
    return "plural forms differ: 'nplurals=2; plural=(n > 1);', not 'nplurals=2; plural=(n != 1);'"


@pytest.mark.parametrize(
    "fault",
    [
        _po_changed_after_compiling,
        _plural_form_changed_after_compiling,
        _po_entry_went_fuzzy_after_compiling,
        _message_missing_from_the_mo,
        _extra_message_in_the_mo,
        _plural_rule_changed_after_compiling,
    ],
)
def test_the_mo_check_catches_a_stale_mo(tmp_path: Path, fault: Callable[[Catalog, Catalog], str]) -> None:
    """A ``.mo`` in tmp_path that the ``.po`` beside it no longer compiles to is reported,
    each kind of staleness by what it is, and nothing else is."""
    po, compiled = load("de"), load("de")
    expected = fault(po, compiled)
    mo_file = _compile(compiled, tmp_path / f"{DOMAIN}.mo")
    with open(tmp_path / f"{DOMAIN}.po", "wb") as handle:
        write_po(handle, po)
    with open(tmp_path / f"{DOMAIN}.po", "rb") as handle:
        assert mo_problems(read_po(handle, locale="de", domain=DOMAIN), mo_file) == [expected]


@pytest.mark.parametrize("locale", TRANSLATED)
def test_the_mo_check_accepts_what_babel_compiles_and_needs_the_file(tmp_path: Path, locale: str) -> None:
    """The check compares catalogues, so a ``.mo`` the installed Babel compiles passes (whatever
    its bytes), and a ``.mo`` that is not there fails."""
    catalogue = load(locale)
    assert len(compiled_messages(catalogue)) > 200
    assert mo_problems(catalogue, _compile(catalogue, tmp_path / "fresh.mo")) == []
    singular = catalogue["%(num)d minute"].string[0]
    catalogue["%(num)d minute"].string = (singular, "")  # compiled as the source's plural
    assert mo_problems(catalogue, _compile(catalogue, tmp_path / "half.mo")) == []
    assert mo_problems(catalogue, tmp_path / "absent.mo") == [f"missing: {tmp_path / 'absent.mo'}"]


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
