"""Translations of what the package shows people: its pages, messages and e-mails.

The package ships catalogues of its own message domain, ``flask_authflow`` (German and
French besides the English of the source). They are used when the application has
initialised Flask-Babel (``pip install "flask-authflow[babel]"``, then ``Babel(app)``); without
it every function here answers the English text, formatted.

The locale is the application's: its Flask-Babel locale selector when it has one, else the
best match of the browser's ``Accept-Language`` among ``LOCALES`` (then
``BABEL_DEFAULT_LOCALE``). Times are shown in Flask-Babel's time zone of the request
(``timezone_selector`` or ``BABEL_DEFAULT_TIMEZONE``) and in that locale.

Messages that are kept as English constants (and translated where they are shown) are marked
with :func:`N_`; messages with values use :func:`gettext` with named ``%(name)s`` variables,
as Flask-Babel does. Developer-facing messages (configuration errors, log lines) stay English.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from flask import current_app, g, has_app_context, has_request_context, request
from markupsafe import Markup, escape

__all__ = [
    "DOMAIN",
    "LOCALES",
    "N_",
    "TRANSLATIONS_DIRECTORY",
    "LazyText",
    "app_template_context",
    "current_locale",
    "format_date",
    "format_datetime",
    "gettext",
    "lazy_gettext",
    "ngettext",
    "template_context",
    "translate",
    "translations_active",
]

#: The gettext domain of the package's catalogues (``<locale>/LC_MESSAGES/flask_authflow.mo``).
DOMAIN = "flask_authflow"
#: Where the catalogues are.
TRANSLATIONS_DIRECTORY = Path(__file__).resolve().parent / "translations"
#: The locales the package has pages in, the source's English first.
LOCALES = ("en", "de", "fr")

_SOURCE_LOCALE = "en"
_G_LOCALE = "_authflow_locale"


def _optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_flask_babel = _optional("flask_babel")
_babel_support = _optional("babel.support")
_babel_dates = _optional("babel.dates")
_catalogues: dict[str, Any] = {}


def N_(message: str) -> str:
    """Mark ``message`` for the catalogues without translating it (it is translated where it
    is shown, with :func:`translate`)."""
    return message


def translations_active() -> bool:
    """The application initialised Flask-Babel: the package's catalogues are used."""
    return (
        _flask_babel is not None
        and _babel_support is not None
        and has_app_context()
        and "babel" in current_app.extensions
    )


def _selected_locale() -> str:
    assert _flask_babel is not None
    config = _flask_babel.get_babel()
    if not has_request_context():  # a CLI command: the app's selector may need a request
        return str(config.default_locale)
    if config.locale_selector is not None:
        return str(_flask_babel.get_locale() or config.default_locale)
    for value, quality in request.accept_languages:  # the most wanted first
        language = value.replace("_", "-").split("-", 1)[0].lower()
        if quality > 0 and language in LOCALES:
            return language
    return str(config.default_locale)


def current_locale() -> str:
    """The locale of the package's texts in this request (``"en"`` without Flask-Babel)."""
    if not translations_active():
        return _SOURCE_LOCALE
    if not has_request_context():
        return _selected_locale()
    locale = g.get(_G_LOCALE)
    if not isinstance(locale, str):
        locale = _selected_locale()
        setattr(g, _G_LOCALE, locale)
    return locale


def _translations() -> Any:
    """The package's catalogue for the current locale, or ``None`` (English)."""
    if not translations_active():
        return None
    locale = current_locale()
    catalogue = _catalogues.get(locale)
    if catalogue is None:
        assert _babel_support is not None
        catalogue = _babel_support.Translations.load(str(TRANSLATIONS_DIRECTORY), [locale], DOMAIN)
        _catalogues[locale] = catalogue
    return catalogue


def gettext(message: str, /, **variables: Any) -> str:
    """``message`` in the current locale, with ``%(name)s`` replaced by ``variables``."""
    catalogue = _translations()
    text = str(catalogue.ugettext(message)) if catalogue is not None else message
    return text % variables if variables else text


def ngettext(singular: str, plural: str, num: int, /, **variables: Any) -> str:
    """The singular or plural form for ``num`` (available as ``%(num)d``) in the current locale."""
    variables.setdefault("num", num)
    catalogue = _translations()
    if catalogue is not None:
        text = str(catalogue.ungettext(singular, plural, num))
    else:
        text = singular if num == 1 else plural
    return text % variables


def translate(message: str) -> str:
    """An English message marked with :func:`N_` (or a typed error's message), translated if
    the catalogue has it, else unchanged (markup, such as a ``Markup`` a view built, too)."""
    if not message or hasattr(message, "__html__"):
        return message
    return gettext(message)


class LazyText:
    """A message translated each time it is used as text (module-level constants)."""

    __slots__ = ("_message", "_variables")

    def __init__(self, message: str, variables: dict[str, Any]) -> None:
        self._message = message
        self._variables = variables

    def __str__(self) -> str:
        return gettext(self._message, **self._variables)

    def __repr__(self) -> str:
        return f"lazy_gettext({self._message!r})"

    def __eq__(self, other: object) -> bool:
        return str(self) == (str(other) if isinstance(other, LazyText) else other)

    def __hash__(self) -> int:
        return hash(self._message)

    def __html__(self) -> Markup:
        return escape(str(self))


def lazy_gettext(message: str, /, **variables: Any) -> LazyText:
    """Like :func:`gettext`, translated when it is turned into text (``str()``, a template)."""
    return LazyText(message, variables)


def format_datetime(value: datetime) -> str:
    """``value`` for people: in the request's time zone and locale with Flask-Babel, else
    ``2026-11-25 13:40 UTC``."""
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if not translations_active() or _babel_dates is None:
        return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    assert _flask_babel is not None
    if has_request_context():
        zone = _flask_babel.get_timezone()
    else:  # the app's selector may need a request
        zone = _flask_babel.get_babel().instance.default_timezone
    locale = current_locale()
    shown = _babel_dates.format_datetime(moment, "medium", tzinfo=zone, locale=locale)
    return f"{shown} {_babel_dates.format_datetime(moment, 'zzz', tzinfo=zone, locale=locale)}"


def format_date(value: datetime) -> str:
    """The day of ``value`` for people (``2026-11-25`` without Flask-Babel), in the request's
    time zone and locale."""
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if not translations_active() or _babel_dates is None:
        return moment.astimezone(UTC).strftime("%Y-%m-%d")
    assert _flask_babel is not None
    zone = _flask_babel.get_timezone() if has_request_context() else None
    shown = moment.astimezone(zone) if zone is not None else moment
    return str(_babel_dates.format_date(shown.date(), "medium", locale=current_locale()))


def _markup_gettext(message: str, /, **variables: Any) -> Markup:
    """The templates' ``_``: the catalogue's text is the package's own markup; the values put
    into it are escaped (as Jinja's i18n extension does with autoescaping)."""
    text = gettext(message)
    if text == message and translations_active() and _flask_babel is not None:
        text = _flask_babel.gettext(message)  # a string of the application's own layout
    return Markup(text) % variables if variables else Markup(text)  # noqa: S704


def _markup_ngettext(singular: str, plural: str, num: int, /, **variables: Any) -> Markup:
    variables.setdefault("num", num)
    catalogue = _translations()
    if catalogue is not None:
        text = catalogue.ungettext(singular, plural, num)
    else:
        text = singular if num == 1 else plural
    return Markup(text) % variables  # noqa: S704


def _plain_gettext(message: str, /, **variables: Any) -> str:
    return gettext(message, **variables)


def _plain_ngettext(singular: str, plural: str, num: int, /, **variables: Any) -> str:
    return ngettext(singular, plural, num, **variables)


def template_context(*, html: bool = True) -> dict[str, Callable[..., Any] | str]:
    """What the package's templates use: ``_``/``gettext``/``ngettext`` (in the package's
    domain), ``format_datetime``, ``format_date`` and ``authflow_locale`` (for ``<html lang>``).

    ``html=False`` is for plain-text templates (the text of an e-mail): the texts are plain
    strings, their values are not HTML-escaped.
    """
    return {
        "_": _markup_gettext if html else _plain_gettext,
        "gettext": _markup_gettext if html else _plain_gettext,
        "ngettext": _markup_ngettext if html else _plain_ngettext,
        "format_datetime": format_datetime,
        "format_date": format_date,
        "authflow_locale": current_locale(),
    }


def app_template_context() -> dict[str, Callable[..., Any] | str]:
    """What every template of the app gets (through the extension's context processor): the
    package's :func:`template_context` names the app's own Jinja environment does not define,
    so a page of the app that extends ``authflow/base.html`` renders, and an app with its own
    ``_`` (Flask-Babel's) keeps it."""
    defined = current_app.jinja_env.globals
    return {name: value for name, value in template_context().items() if name not in defined}
