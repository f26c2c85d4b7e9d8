"""Password hashes made by other software, verified once and replaced by Argon2id.

Users brought over from Flask-Security-Too, a Flask-Login app, Werkzeug or Django keep
their passwords: the login verifies the stored hash of the scheme it names and, when it
matches, replaces it with an Argon2id hash in the same unit of work. Every scheme is off
unless listed in ``AUTHFLOW_LEGACY_PASSWORD_SCHEMES``:

==========================  ==================================================  ==============
scheme                      stored form                                         verified with
==========================  ==================================================  ==============
``bcrypt``                  ``$2b$12$...`` (also ``$2a$``, ``$2y$``)             bcrypt
``argon2``                  ``$argon2i$...``, ``$argon2d$...``, ``$argon2id$``   argon2-cffi
``pbkdf2_sha256``           ``$pbkdf2-sha256$29000$...`` (passlib)               libpass
``pbkdf2_sha512``           ``$pbkdf2-sha512$25000$...`` (passlib)               libpass
``sha256_crypt``            ``$5$rounds=535000$...``                             libpass
``sha512_crypt``            ``$6$rounds=656000$...``                             libpass
``werkzeug``                ``scrypt:32768:8:1$...``, ``pbkdf2:sha256:...$...``  Werkzeug
``django_pbkdf2_sha256``    ``pbkdf2_sha256$1000000$...``                        libpass
``django_argon2``           ``argon2$argon2id$v=19$m=102400,t=2,p=8$...``        argon2-cffi
``django_bcrypt_sha256``    ``bcrypt_sha256$$2b$12$...``                         libpass
``django_bcrypt``           ``bcrypt$$2b$12$...``                                libpass
==========================  ==================================================  ==============

The first six are passlib's formats, as Flask-Security-Too stores them; the ``django_*``
schemes are Django's hashers' own formats (``PBKDF2PasswordHasher``, ``Argon2PasswordHasher``,
``BCryptSHA256PasswordHasher``, ``BCryptPasswordHasher``), as django-allauth projects store
them in ``auth_user.password``.

Flask-Security-Too hashes ``base64(HMAC-SHA512(SECURITY_PASSWORD_SALT, password))`` rather
than the password (its password normalised to NFKD; for bcrypt the first 72 bytes): with
``AUTHFLOW_LEGACY_PASSWORD_SALT`` set to that salt, passlib-format hashes are verified the
same way; without it, against the password itself (NFKD, and as typed when that differs).

A stored cost that would take seconds is refused without being computed (see
:class:`LegacyCeilings`), as Argon2 hashes over the ``AUTHFLOW_ARGON2_MAX_*`` ceilings are.

**Uniform work.** While any scheme is enabled, every refused password check does one
Argon2id verification and one legacy verification, real or dummy: a native user's wrong
password adds :meth:`LegacyHashes.dummy_verify`, a legacy user's adds the Argon2id dummy,
an unknown user's does both. The legacy dummy is verified against the last legacy hash the
login met (the same scheme and cost as the users still on it), and before the first one
against a hash of the first listed scheme at its library's default cost: list the scheme
most of your users have first. Turn the schemes off once the users moved to Argon2id.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import importlib
import re
import secrets
import unicodedata
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Final

import argon2
from argon2.exceptions import InvalidHashError, VerificationError

from flask_authflow.errors import ConfigurationError, MissingExtraError

__all__ = ["LEGACY_SCHEMES", "LegacyCeilings", "LegacyHashes", "LegacyResult"]

#: The schemes ``AUTHFLOW_LEGACY_PASSWORD_SCHEMES`` may list.
LEGACY_SCHEMES: Final = (
    "bcrypt",
    "argon2",
    "pbkdf2_sha256",
    "pbkdf2_sha512",
    "sha256_crypt",
    "sha512_crypt",
    "werkzeug",
    "django_pbkdf2_sha256",
    "django_argon2",
    "django_bcrypt_sha256",
    "django_bcrypt",
)
#: Flask-Security-Too's schemes: passlib formats, HMAC'd when a salt is configured.
_PASSLIB_FORMATS: Final = frozenset(LEGACY_SCHEMES[:6])
#: The libpass handler of each scheme libpass verifies.
_LIBPASS_HANDLERS: Final = {
    "pbkdf2_sha256": "pbkdf2_sha256",
    "pbkdf2_sha512": "pbkdf2_sha512",
    "sha256_crypt": "sha256_crypt",
    "sha512_crypt": "sha512_crypt",
    "django_pbkdf2_sha256": "django_pbkdf2_sha256",
    "django_bcrypt_sha256": "django_bcrypt_sha256",
    "django_bcrypt": "django_bcrypt",
}
#: The prefix Django's hashers put before a hash of the usual form, and that form's scheme
#: (whose cost ceilings apply).
_DJANGO_PREFIXES: Final = {
    "django_argon2": ("argon2", "argon2"),
    "django_bcrypt_sha256": ("bcrypt_sha256$", "bcrypt"),
    "django_bcrypt": ("bcrypt$", "bcrypt"),
}
_BCRYPT = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
_WERKZEUG_SCRYPT = re.compile(r"scrypt:(\d{1,10}):(\d{1,4}):(\d{1,4})\$[^$]{1,200}\$[0-9a-f]{2,1024}")
_WERKZEUG_PBKDF2 = re.compile(r"pbkdf2:(sha1|sha256|sha512)(?::(\d{1,10}))?\$[^$]{1,200}\$[0-9a-f]{2,1024}")
#: Werkzeug's default PBKDF2 iterations when a hash names none (Werkzeug 2.3 and later).
_WERKZEUG_DEFAULT_ITERATIONS = 600_000
#: bcrypt reads at most this many bytes of a password.
_BCRYPT_MAX_BYTES = 72


class LegacyResult(enum.Enum):
    """What a legacy verification found."""

    MATCH = "match"
    MISMATCH = "mismatch"
    #: The stored cost is over the ceilings: refused without computing it.
    OVER_CEILING = "over_ceiling"
    #: Not a well-formed hash of an enabled scheme.
    MALFORMED = "malformed"


@dataclass(frozen=True, slots=True)
class LegacyCeilings:
    """The most a stored legacy hash may ask for (more is refused, never computed). Each
    default lets the schemes' own current defaults through and stops what would take about
    a second or more on one core: bcrypt cost 13 (cost 12, the usual default, takes about
    0.25 s; every step doubles it), PBKDF2-SHA1/SHA256 2,000,000 rounds (Django's 1,000,000
    and Werkzeug's 600,000 pass), PBKDF2-SHA512 1,000,000 rounds, SHA-crypt 1,000,000 rounds
    (passlib's 535,000 / 656,000 pass), scrypt 64 MiB of memory (``128 * N * r``) and
    ``p`` at most 4 (Werkzeug's N=32768, r=8, p=1 takes 32 MiB). Argon2 hashes obey the
    ``AUTHFLOW_ARGON2_MAX_*`` ceilings."""

    bcrypt_cost: int = 13
    pbkdf2_rounds: int = 2_000_000
    pbkdf2_sha512_rounds: int = 1_000_000
    sha_crypt_rounds: int = 1_000_000
    scrypt_memory: int = 64 * 1024 * 1024
    scrypt_parallelism: int = 4


def _default_argon2_over_ceiling(stored: str) -> bool:
    params = argon2.extract_parameters(stored)
    return params.time_cost > 10 or params.memory_cost > 256 * 1024 or params.parallelism > 16


def identify(stored: str) -> str | None:
    """The scheme whose form ``stored`` has (not checking it further), or ``None``."""
    prefixes = (
        (("$2a$", "$2b$", "$2y$"), "bcrypt"),
        (("$argon2i$", "$argon2d$", "$argon2id$"), "argon2"),
        (("$pbkdf2-sha256$",), "pbkdf2_sha256"),
        (("$pbkdf2-sha512$",), "pbkdf2_sha512"),
        (("$5$",), "sha256_crypt"),
        (("$6$",), "sha512_crypt"),
        (("scrypt:", "pbkdf2:"), "werkzeug"),
        (("pbkdf2_sha256$",), "django_pbkdf2_sha256"),
        (("argon2$argon2",), "django_argon2"),
        (("bcrypt_sha256$$2",), "django_bcrypt_sha256"),
        (("bcrypt$$2",), "django_bcrypt"),
    )
    for starts, scheme in prefixes:
        if stored.startswith(starts):
            return scheme
    return None


def fst_hmac(salt: bytes, password: bytes) -> bytes:
    """Flask-Security-Too's ``get_hmac``: base64 of HMAC-SHA512 of the password, keyed by
    ``SECURITY_PASSWORD_SALT``."""
    return base64.b64encode(hmac.new(salt, password, hashlib.sha512).digest())


def _nfkd(typed: bytes) -> bytes:
    """``typed`` normalised as Flask-Security-Too normalises passwords (NFKD)."""
    if typed.isascii():
        return typed
    try:
        return unicodedata.normalize("NFKD", typed.decode("utf-8")).encode("utf-8")
    except UnicodeDecodeError:
        return typed


def _load_libpass() -> Any:
    try:
        return importlib.import_module("passlib.hash")
    except ImportError:
        raise MissingExtraError("legacy", "libpass") from None


class LegacyHashes:
    """Verify the enabled legacy schemes (see the module's documentation).

    :param schemes: names from :data:`LEGACY_SCHEMES`.
    :param salt: Flask-Security-Too's ``SECURITY_PASSWORD_SALT`` (``None``: its hashes are
        of the password itself, as with ``SECURITY_PASSWORD_SINGLE_HASH``).
    :param argon2_over_ceiling: the Argon2 ceilings of the app's hasher
        (:meth:`~flask_authflow.login._password.PasswordHasher.over_ceiling`; by default
        those of ``AUTHFLOW_ARGON2_MAX_*``'s defaults: t=10, 256 MiB, p=16).
    :param slot: a context manager holding one slot of the app's bound on concurrent hashes.
    """

    def __init__(
        self,
        schemes: tuple[str, ...] | list[str],
        *,
        salt: str | bytes | None = None,
        ceilings: LegacyCeilings | None = None,
        argon2_over_ceiling: Callable[[str], bool] | None = None,
        slot: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        unknown = [name for name in schemes if name not in LEGACY_SCHEMES]
        if unknown:
            raise ConfigurationError(
                f"AUTHFLOW_LEGACY_PASSWORD_SCHEMES: unknown scheme(s) {', '.join(map(repr, unknown))}; "
                f"choose from {', '.join(LEGACY_SCHEMES)}"
            )
        self.schemes = frozenset(schemes)
        self.salt = salt.encode("utf-8") if isinstance(salt, str) else salt
        if self.salt is not None and not self.salt:
            raise ConfigurationError("AUTHFLOW_LEGACY_PASSWORD_SALT must not be empty")
        self.ceilings = ceilings or LegacyCeilings()
        self._argon2_over_ceiling = argon2_over_ceiling or _default_argon2_over_ceiling
        self._slot = slot
        self._argon2 = argon2.PasswordHasher()
        self._libpass = _load_libpass() if self.schemes & _LIBPASS_HANDLERS.keys() else None
        #: The scheme of the dummy verification before a real legacy hash was met.
        self._first = next((name for name in schemes if name in LEGACY_SCHEMES), None)
        #: What :meth:`dummy_verify` verifies against: (scheme, hash), made or met.
        self._dummy: tuple[str, str] | None = None
        if self.schemes & {"bcrypt", "django_bcrypt_sha256", "django_bcrypt"}:
            try:
                self._bcrypt = importlib.import_module("bcrypt")
            except ImportError:
                raise MissingExtraError("legacy", "bcrypt") from None

    @property
    def hmac_argon2(self) -> bool:
        """True when an ``$argon2id$`` hash that does not match natively may be an HMAC'd
        Flask-Security-Too hash (``argon2`` enabled and a salt configured): the login then
        spends a second Argon2 verification, and so does an unknown user's."""
        return "argon2" in self.schemes and self.salt is not None

    def claims(self, stored: str) -> bool:
        """True if ``stored`` is of an enabled scheme other than native Argon2id."""
        scheme = identify(stored)
        return scheme is not None and scheme in self.schemes and not stored.startswith("$argon2id$")

    def inspect(self, stored: str) -> LegacyResult | None:
        """Why ``stored`` could never log in (:attr:`LegacyResult.MALFORMED`: not a well-formed
        hash of an enabled scheme; :attr:`LegacyResult.OVER_CEILING`), or ``None`` when it
        can. Nothing is computed."""
        scheme = identify(stored)
        if scheme is None or scheme not in self.schemes:
            return LegacyResult.MALFORMED
        cost_ok = self._within_ceilings(scheme, stored)
        if cost_ok is None:
            return LegacyResult.MALFORMED
        return None if cost_ok else LegacyResult.OVER_CEILING

    def verify(self, stored: str, password: bytes, *, hmac_only: bool = False) -> LegacyResult:
        """Check ``password`` (as typed, UTF-8) against ``stored``. ``hmac_only``: try only the
        Flask-Security-Too HMAC form (a native Argon2id hash already failed as typed)."""
        refused = self.inspect(stored)
        if refused is not None:
            return refused
        scheme = identify(stored)
        assert scheme is not None  # inspect() found it
        self._remember(scheme, stored)
        candidates = self._candidates(scheme, password)
        if hmac_only:
            candidates = candidates if self.salt is not None else []
        for candidate in candidates:
            try:
                matched = self._verify_one(scheme, stored, candidate)
            except (ValueError, TypeError):
                return LegacyResult.MALFORMED
            if matched:
                return LegacyResult.MATCH
        return LegacyResult.MISMATCH

    def dummy_verify(self, password: bytes) -> None:
        """Spend the work of a refused :meth:`verify` of ``password`` (as many verifications
        of the same scheme and cost) on a hash the login met, or a made one, and ignore the
        result: an account not on a legacy hash is not told apart by its timing."""
        dummy = self._dummy
        if dummy is None:
            dummy = self._dummy = self._made_dummy()
        if dummy is None:
            return
        scheme, stored = dummy
        for candidate in self._candidates(scheme, password):
            try:
                self._verify_one(scheme, stored, candidate)
            except (ValueError, TypeError):
                return

    def _remember(self, scheme: str, stored: str) -> None:
        """Keep a hash within the ceilings as the dummy's: its cost is what users have."""
        self._dummy = (scheme, stored)

    def _made_dummy(self) -> tuple[str, str] | None:
        """A hash of a random password in the first listed scheme, at its default cost."""
        scheme = self._first
        if scheme is None:
            return None
        secret = secrets.token_urlsafe(24)
        with self._work():
            if scheme == "bcrypt":
                made = self._bcrypt.hashpw(secret.encode("ascii"), self._bcrypt.gensalt()).decode("ascii")
            elif scheme == "argon2":
                made = self._argon2.hash(secret)
            elif scheme == "django_argon2":  # Django's format: "argon2" + argon2-cffi's hash
                made = _DJANGO_PREFIXES[scheme][0] + self._argon2.hash(secret)
            elif scheme == "werkzeug":
                from werkzeug.security import generate_password_hash

                made = generate_password_hash(secret)
            else:
                made = getattr(self._libpass, _LIBPASS_HANDLERS[scheme]).hash(secret)
        return scheme, made

    def _candidates(self, scheme: str, typed: bytes) -> list[bytes]:
        """The byte strings the scheme's hash may have been made of, most likely first."""
        if scheme == "django_bcrypt":
            return [typed[:_BCRYPT_MAX_BYTES]]  # what Django's BCryptPasswordHasher hashed
        if scheme not in _PASSLIB_FORMATS:
            return [typed]
        normalised = _nfkd(typed)
        if self.salt is not None:
            forms = [fst_hmac(self.salt, normalised)]
        else:
            forms = [normalised] if normalised == typed else [normalised, typed]
        if scheme == "bcrypt":
            return [form[:_BCRYPT_MAX_BYTES] for form in forms]
        return forms

    def _within_ceilings(self, scheme: str, stored: str) -> bool | None:
        """Whether the stored cost is within the ceilings; ``None`` for a malformed hash."""
        c = self.ceilings
        if scheme in _DJANGO_PREFIXES:
            scheme, stored = _DJANGO_PREFIXES[scheme][1], _django_inner(stored)
        if scheme == "bcrypt":
            match = _BCRYPT.fullmatch(stored)
            return None if match is None else 4 <= int(match[1]) <= c.bcrypt_cost
        if scheme == "argon2":
            return self._argon2_within(stored)
        if scheme == "werkzeug":
            return self._werkzeug_within(stored)
        rounds = self._rounds(scheme, stored)
        if rounds is None:
            return None
        limit = {
            "pbkdf2_sha256": c.pbkdf2_rounds,
            "django_pbkdf2_sha256": c.pbkdf2_rounds,
            "pbkdf2_sha512": c.pbkdf2_sha512_rounds,
        }.get(scheme, c.sha_crypt_rounds)
        return rounds <= limit

    def _argon2_within(self, stored: str) -> bool | None:
        try:
            argon2.extract_parameters(stored)
        except (InvalidHashError, ValueError):
            return None
        return not self._argon2_over_ceiling(stored)

    def _werkzeug_within(self, stored: str) -> bool | None:
        c = self.ceilings
        scrypt = _WERKZEUG_SCRYPT.fullmatch(stored)
        if scrypt is not None:
            n, r, p = (int(v) for v in scrypt.groups())
            if n < 2 or n & (n - 1) or r < 1 or p < 1:
                return None
            return 128 * n * r <= c.scrypt_memory and p <= c.scrypt_parallelism
        pbkdf2 = _WERKZEUG_PBKDF2.fullmatch(stored)
        if pbkdf2 is None:
            return None
        rounds = int(pbkdf2[2]) if pbkdf2[2] else _WERKZEUG_DEFAULT_ITERATIONS
        limit = c.pbkdf2_sha512_rounds if pbkdf2[1] == "sha512" else c.pbkdf2_rounds
        return 1 <= rounds <= limit

    def _rounds(self, scheme: str, stored: str) -> int | None:
        """The rounds a libpass-format hash names (parsed, not computed); ``None`` if malformed."""
        handler = getattr(self._libpass, _LIBPASS_HANDLERS[scheme])
        try:
            rounds = handler.from_string(stored).rounds
        except (ValueError, TypeError):
            return None
        return rounds if isinstance(rounds, int) else None

    def _verify_one(self, scheme: str, stored: str, candidate: bytes) -> bool:
        with self._work():
            if scheme == "bcrypt":
                return bool(self._bcrypt.checkpw(candidate, stored.encode("ascii")))
            if scheme in ("argon2", "django_argon2"):
                try:
                    return self._argon2.verify(_django_inner(stored), candidate)
                except (VerificationError, InvalidHashError):
                    return False
            if scheme == "werkzeug":
                return _werkzeug_check(stored, candidate)
            handler = getattr(self._libpass, _LIBPASS_HANDLERS[scheme])
            return bool(handler.verify(candidate, stored))

    def _work(self) -> AbstractContextManager[Any]:
        return self._slot() if self._slot is not None else nullcontext()


def _werkzeug_check(stored: str, candidate: bytes) -> bool:
    from werkzeug.security import check_password_hash

    try:
        text = candidate.decode("utf-8")
    except UnicodeDecodeError:
        return False  # Werkzeug hashed text: these bytes were never a password it hashed
    return check_password_hash(stored, text)


def _django_inner(stored: str) -> str:
    """The bcrypt or Argon2 hash inside a Django-format one (``stored`` itself otherwise)."""
    scheme = identify(stored)
    known = _DJANGO_PREFIXES.get(scheme or "")
    return stored.removeprefix(known[0]) if known is not None else stored
