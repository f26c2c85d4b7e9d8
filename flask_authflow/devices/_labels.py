"""A short, human label for a device from its User-Agent ("Firefox 120 on Ubuntu"),
read with ``ua-parser`` (its bundled, maintained rules)."""

from __future__ import annotations

from functools import lru_cache

from ua_parser import parse

from flask_authflow._i18n import N_, gettext, translate

__all__ = ["UNKNOWN_DEVICE", "device_label", "shown_label"]

#: The label of a User-Agent the parser does not recognise (or no User-Agent at all).
UNKNOWN_DEVICE = N_("Unknown browser")  # stored in English; pages show it translated
#: Longer User-Agents are not parsed (real ones are a few hundred characters).
_MAX_PARSED = 1024


@lru_cache(maxsize=256)
def device_label(user_agent: str | None) -> str:
    """``"<browser> <major> on <os>"``, as much of it as the User-Agent tells."""
    if not user_agent or len(user_agent) > _MAX_PARSED:
        return UNKNOWN_DEVICE
    result = parse(user_agent)
    browser = result.user_agent
    system = result.os
    name = ""
    if browser is not None and browser.family != "Other":
        name = f"{browser.family} {browser.major}" if browser.major else browser.family
    where = system.family if system is not None and system.family != "Other" else ""
    if name and where:
        return f"{name} on {where}"
    return name or where or UNKNOWN_DEVICE


def shown_label(label: str) -> str:
    """A device's stored label ("Firefox 120 on Ubuntu", "Unknown browser", in English) in
    the language of the page or mail."""
    browser, on, system = label.rpartition(" on ")
    if on and browser and system:
        return gettext("%(browser)s on %(system)s", browser=browser, system=system)
    return translate(label)
