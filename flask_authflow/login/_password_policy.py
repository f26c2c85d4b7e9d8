"""The password policy of NIST SP 800-63B-4 (section 3.1.1.2), applied when a password is set.

A password is checked when it is chosen (create a user, set or change a password), never at
login: hashes stored before a stricter policy keep working. What is checked, in order:

1. At most ``max_bytes`` (1024) bytes of UTF-8, before and after normalisation.
2. At least ``min_length`` (15) characters when the password is the only factor, or
   ``min_length_with_second_factor`` (8) when the user has a second factor. Characters are
   Unicode code points of the NFKC form, as NIST counts them; spaces and every printable
   character count. There are no composition rules (no "one digit, one capital").
3. Not derived from the context: the username (and the local part of an e-mail username),
   the tenant, or the site name.
4. Not a common password (a bundled list of about 6,000, derived from zxcvbn's frequency
   list), not a word of the app's own blocklist, and not a repeated or sequential pattern
   (``aaaaaaaaaaaaaaa``, ``abcdefghijklmno``, ``123456789012345``).
5. Optionally, a zxcvbn score of at least ``zxcvbn_min_score`` (the ``[zxcvbn]`` extra).

Comparisons in 3 and 4 are case-insensitive and ignore spaces and punctuation, and they also
catch a word with trivial digits added before or after it: a run of at most 4 digits or a
repeated or sequential run (``alice2024``, ``Password123456789``, ``2024-acme``), and a word
repeated (``alicealice``). A password that merely *contains* such a word is accepted:
``alice likes green tea`` is a fine passphrase for alice.

Each refusal is a :class:`~flask_authflow.errors.WeakPassword` whose ``message`` tells the
person what to choose and whose ``reason`` says which rule failed.
"""

from __future__ import annotations

import importlib
import itertools
import re
import threading
import unicodedata
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from flask_authflow._i18n import N_, gettext
from flask_authflow._settings import MAX_PASSWORD_MIN_LENGTH, MIN_PASSWORD_LENGTH
from flask_authflow.errors import ConfigurationError, InvalidInput, MissingExtraError, WeakPassword
from flask_authflow.login._settings import PasswordPolicySettings

__all__ = [
    "MAX_PASSWORD_BYTES",
    "PasswordPolicy",
    "common_passwords",
    "normalise_password",
]

#: Longest password accepted, in UTF-8 bytes (of the form as typed and of its NFKC form).
MAX_PASSWORD_BYTES = 1024

#: zxcvbn refuses longer input; a longer password is scored on its first 72 characters.
_ZXCVBN_MAX_LENGTH = 72
#: zxcvbn keeps the user inputs of the current call in a module global: one call at a time.
_zxcvbn_lock = threading.Lock()

_AFFIXES = re.compile(r"(\d*)(.*?)(\d*)", re.DOTALL)


def normalise_password(password: str) -> str:
    """``password`` in Unicode normal form NFKC, the form that is hashed.

    NFC and NFD spellings of ``café`` (a precomposed ``é`` or ``e`` + a combining accent)
    and compatibility characters (full-width letters, ligatures) become one
    spelling, so a password typed on another keyboard or system still matches.
    """
    if password.isascii():
        return password
    return unicodedata.normalize("NFKC", password)


def _key(text: str) -> str:
    """The form words are compared in: NFKC, case-folded, letters and digits only."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return "".join(ch for ch in folded if ch.isalnum())


@cache
def common_passwords() -> frozenset[str]:
    """The bundled list of common passwords (``authn/data/common-passwords.txt``), as compared."""
    text = resources.files("flask_authflow.login").joinpath("data", "common-passwords.txt").read_text("utf-8")
    keys = (_key(line) for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return frozenset(key for key in keys if len(key) >= 4)


def _repeated(text: str) -> bool:
    return len(text) > 1 and len(set(text)) == 1


def _sequential(text: str) -> bool:
    """``abcdef``, ``fedcba``, ``4567890123``: each character one step from the previous one."""
    if len(text) < 3:
        return False
    for step in (1, -1):
        if all(_next(a, b, step) for a, b in itertools.pairwise(text)):
            return True
    return False


def _next(a: str, b: str, step: int) -> bool:
    if a.isdecimal() and b.isdecimal() and a.isascii() and b.isascii():
        return (int(b) - int(a)) % 10 == step % 10  # digits wrap: ...7890123
    return ord(b) - ord(a) == step


def _pattern(text: str) -> bool:
    """A repeated character, a sequence, or a short unit repeated (``abababab``)."""
    if _repeated(text) or _sequential(text):
        return True
    unit = _repeated_unit(text)
    return unit is not None and len(unit) <= 4


def _trivial_digits(digits: str) -> bool:
    return len(digits) <= 4 or _pattern(digits)


def _repeated_unit(text: str) -> str | None:
    """``unit`` when ``text`` is ``unit`` repeated at least twice."""
    for size in range(1, len(text) // 2 + 1):
        if len(text) % size == 0 and text == text[:size] * (len(text) // size):
            return text[:size]
    return None


def _variants(key: str) -> set[str]:
    """``key`` and what it is derived from: without trivial leading or trailing digits, and
    the unit of a repetition (``alice2024`` → ``alice``; ``acmeacme`` → ``acme``)."""
    found = {key}
    todo = [key]
    while todo:
        form = todo.pop()
        derived: list[str] = []
        match = _AFFIXES.fullmatch(form)
        if match is not None:
            lead, core, trail = match.groups()
            if core and (lead or trail) and _trivial_digits(lead) and _trivial_digits(trail):
                derived.append(core)
        unit = _repeated_unit(form)
        if unit is not None:
            derived.append(unit)
        for item in derived:  # each strictly shorter than form: the loop ends
            if item not in found:
                found.add(item)
                todo.append(item)
    return found


def _context_keys(
    username: str | None, tenant: str | None, site_name: str | None
) -> Iterator[tuple[str, str]]:
    if username:
        yield _key(username), N_("Choose a password that is not based on your username.")
        if "@" in username:
            yield (
                _key(username.rsplit("@", 1)[0]),
                N_("Choose a password that is not based on your username."),
            )
    if tenant:
        yield _key(tenant), N_("Choose a password that is not based on the tenant (organisation) name.")
    if site_name:
        yield _key(site_name), N_("Choose a password that is not based on the name of this site.")


def _load_zxcvbn() -> Callable[..., Any]:
    try:
        module = importlib.import_module("zxcvbn")
    except ImportError:
        raise MissingExtraError("zxcvbn", "zxcvbn") from None
    function: Callable[..., Any] = module.zxcvbn
    return function


@dataclass(frozen=True)
class PasswordPolicy:
    """What a new password must satisfy (NIST SP 800-63B-4); see the module docstring.

    :param min_length: characters required when the password is the only factor.
    :param min_length_with_second_factor: characters required when the user has a second
        factor enrolled.
    :param max_bytes: longest password in UTF-8 bytes (at most 1024, the hasher's limit).
    :param blocklist: the app's own refused words (compared like the bundled list).
    :param site_name: refused as a password, like the username and the tenant.
    :param zxcvbn_min_score: when set (0 to 4), also require this zxcvbn score; needs the
        ``[zxcvbn]`` extra (:class:`~flask_authflow.errors.MissingExtraError` otherwise).
    :param breach_check: called last with the NFKC form of a password that passed every
        other rule; raises ``WeakPassword("breached", ...)`` for a breached one (see
        :class:`~flask_authflow.login._breached.BreachedPasswords`).

    Values below NIST's minimum (8 characters) are refused with
    :class:`~flask_authflow.errors.ConfigurationError`.
    """

    min_length: int = 15
    min_length_with_second_factor: int = 8
    max_bytes: int = MAX_PASSWORD_BYTES
    blocklist: Collection[str] = ()
    site_name: str | None = None
    zxcvbn_min_score: int | None = None
    breach_check: Callable[[str], None] | None = field(default=None, compare=False)
    _blocked: frozenset[str] = field(init=False, repr=False, compare=False)
    _zxcvbn: Callable[..., Any] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("min_length", "min_length_with_second_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigurationError(f"PasswordPolicy.{name} must be an integer, got {value!r}")
            if not MIN_PASSWORD_LENGTH <= value <= MAX_PASSWORD_MIN_LENGTH:
                raise ConfigurationError(
                    f"PasswordPolicy.{name}={value} is refused: it must be between {MIN_PASSWORD_LENGTH} "
                    f"(NIST SP 800-63B's minimum) and {MAX_PASSWORD_MIN_LENGTH}"
                )
        if not 4 * MAX_PASSWORD_MIN_LENGTH <= self.max_bytes <= MAX_PASSWORD_BYTES:
            raise ConfigurationError(
                f"PasswordPolicy.max_bytes must be between {4 * MAX_PASSWORD_MIN_LENGTH} (64 characters "
                f"of any script) and {MAX_PASSWORD_BYTES} (the hasher's limit), got {self.max_bytes}"
            )
        if isinstance(self.blocklist, str) or not all(isinstance(word, str) for word in self.blocklist):
            raise ConfigurationError("PasswordPolicy.blocklist must be a collection of strings")
        object.__setattr__(self, "blocklist", tuple(self.blocklist))
        object.__setattr__(self, "_blocked", frozenset(k for k in map(_key, self.blocklist) if k))
        score = self.zxcvbn_min_score
        valid = isinstance(score, int) and not isinstance(score, bool) and 0 <= score <= 4
        if score is not None and not valid:
            raise ConfigurationError(f"PasswordPolicy.zxcvbn_min_score must be None or 0 to 4, got {score!r}")
        object.__setattr__(self, "_zxcvbn", _load_zxcvbn() if score is not None else None)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> PasswordPolicy:
        """The policy the ``AUTHFLOW_PASSWORD_*`` keys and ``AUTHFLOW_SITE_NAME`` of ``config``
        (``app.config``) describe."""
        return cls.from_settings(PasswordPolicySettings.from_config(config))

    @classmethod
    def from_settings(cls, settings: PasswordPolicySettings) -> PasswordPolicy:
        """The policy of an app's :class:`~flask_authflow.login._settings.PasswordPolicySettings`."""
        return cls(
            min_length=settings.min_length,
            min_length_with_second_factor=settings.min_length_with_second_factor,
            blocklist=settings.blocklist,
            site_name=settings.site_name,
            zxcvbn_min_score=settings.zxcvbn_min_score,
        )

    def required_length(self, *, has_second_factor: bool = False) -> int:
        """The minimum number of characters for a user with (or without) a second factor."""
        return self.min_length_with_second_factor if has_second_factor else self.min_length

    def check(
        self,
        password: str,
        *,
        username: str | None,
        tenant: str | None,
        has_second_factor: bool = False,
    ) -> None:
        """Refuse ``password`` with :class:`~flask_authflow.errors.WeakPassword` unless it meets
        the policy for this user (``has_second_factor``: the user has a factor besides the
        password). ``username`` and ``tenant`` are the context words; pass ``None`` for one
        that does not apply."""
        if not isinstance(password, str):
            raise TypeError("a password must be str")
        try:
            typed_bytes = len(password.encode("utf-8"))
        except UnicodeEncodeError:  # lone surrogates: not text a person can type
            raise InvalidInput("the password is not valid Unicode text") from None
        too_long = WeakPassword(
            "too_long",
            gettext(
                "Choose a password of at most %(max)d bytes: that is %(max)d plain "
                "letters and digits, fewer with accented or non-Latin characters.",
                max=self.max_bytes,
            ),
        )
        if typed_bytes > self.max_bytes:
            raise too_long
        normalised = normalise_password(password)
        if len(normalised.encode("utf-8")) > self.max_bytes:
            raise too_long
        required = self.required_length(has_second_factor=has_second_factor)
        if len(normalised) < required:
            raise WeakPassword(
                "too_short",
                gettext(
                    "Choose a password of at least %(required)d characters (this one has %(length)d). "
                    "A few unrelated words make a long password that is easy to remember.",
                    required=required,
                    length=len(normalised),
                ),
            )
        key = _key(normalised)
        variants = _variants(key) if key else set()
        for word, message in _context_keys(username, tenant, self.site_name):
            if word and word in variants:
                raise WeakPassword("context", gettext(message))
        if variants & self._blocked:
            raise WeakPassword(
                "blocklisted", gettext("This password is not allowed on this site; choose another.")
            )
        if variants & common_passwords():
            raise WeakPassword("blocklisted", gettext("This password is too common; choose another."))
        if _pattern(key or "".join(normalised.split()) or normalised):
            raise WeakPassword(
                "blocklisted", gettext("This password is a repeated or sequential pattern; choose another.")
            )
        if self._zxcvbn is not None and self.zxcvbn_min_score is not None:
            self._check_zxcvbn(self._zxcvbn, normalised, username, tenant)
        if self.breach_check is not None:  # last: the only rule that asks another service
            self.breach_check(normalised)

    def _check_zxcvbn(
        self, zxcvbn: Callable[..., Any], password: str, username: str | None, tenant: str | None
    ) -> None:
        assert self.zxcvbn_min_score is not None
        context = [word for word in (username, tenant, self.site_name, *self.blocklist) if word]
        # The words too, so that zxcvbn also finds "quetzalcoatl" of "Quetzalcoatl Ventures".
        inputs = [*context, *(part for word in context for part in re.split(r"\W+", word) if len(part) > 2)]
        with _zxcvbn_lock:
            result = zxcvbn(password[:_ZXCVBN_MAX_LENGTH], user_inputs=inputs)
        if int(result["score"]) < self.zxcvbn_min_score:
            warning = str(result.get("feedback", {}).get("warning") or "").strip()
            message = gettext("This password is too easy to guess; add another word or two.")
            if warning:
                message += f" ({warning})"
            raise WeakPassword("too_guessable", message)
