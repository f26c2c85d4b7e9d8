"""Where the local issuer keeps its signing keys.

A key store hands out :class:`LoadedKeys` from one consistent read and rotates
atomically: the new key becomes current and the previous current becomes
historical, or nothing changes at all. Three implementations ship:

* :class:`MemoryLocalIdpKeyStore` - tests and development (a restart loses keys),
* :class:`FileLocalIdpKeyStore` - a directory, crash-safe, for one machine,
* :class:`~flask_authflow.storage._sql.keystore.SqlAlchemyLocalIdpKeyStore`
  - a database table, for several machines.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
import threading
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Protocol

from flask_authflow.errors import DuplicateKeyId, KeyStoreError, RotationRefused, SigningKeyError
from flask_authflow.issuer._keys import LoadedKeys, LocalIdpSigningKey, validate_kid

__all__ = [
    "FileLocalIdpKeyStore",
    "LocalIdpKeyStore",
    "MemoryLocalIdpKeyStore",
    "RotationState",
    "StagedRotationStore",
]


class LocalIdpKeyStore(Protocol):
    """Persistence of issuer keys.

    ``load_all`` must return what one consistent read saw (never a current key
    from one rotation and historical keys from another). ``rotate`` must make
    ``new_current`` current and demote the previous current in one atomic step,
    and refuse a ``kid`` the store already holds with :class:`DuplicateKeyId`.
    Both raise :class:`KeyStoreError` when the store is unusable. ``staged_rotation``
    declares whether the store also keeps staged rotation: itself (a
    :class:`StagedRotationStore`), or ``None``.
    """

    def load_all(self) -> LoadedKeys: ...

    def rotate(self, new_current: LocalIdpSigningKey) -> None: ...

    def staged_rotation(self) -> StagedRotationStore | None:
        """The store's staged rotation (the three shipped stores: themselves), or ``None``
        when it keeps only immediate rotation."""
        ...


@dataclass(frozen=True)
class RotationState:
    """The staged-rotation bookkeeping of a key store.

    ``staged_kid`` names a key published in the JWKS but not yet signing (staged at
    ``staged_at``); ``retired_at`` says when each former current key stopped signing.
    A historical key missing from ``retired_at`` (demoted by an immediate rotation
    before this was recorded) is never pruned automatically.
    """

    staged_kid: str | None = None
    staged_at: datetime | None = None
    retired_at: Mapping[str, datetime] = field(default_factory=dict)


class StagedRotationStore(Protocol):
    """A key store that supports staged rotation (all three shipped stores do).

    ``stage`` adds a key that is published (it loads as historical) but does not sign;
    ``activate`` makes the staged key current and records when the previous current
    retired, atomically; ``prune`` removes historical keys. Each persists before it
    returns and raises :class:`KeyStoreError` when refused or when the store is unusable.
    """

    def rotation_state(self) -> RotationState: ...

    def stage(self, key: LocalIdpSigningKey, at: datetime) -> None: ...

    def activate(self, at: datetime) -> str: ...

    def prune(self, kids: Collection[str]) -> None: ...


def _check_prunable(loaded: LoadedKeys, state: RotationState, kids: Collection[str]) -> None:
    for kid in kids:
        if kid == loaded.current.kid or kid == state.staged_kid:
            raise RotationRefused(f"key {kid!r} is current or staged and cannot be pruned")
        if kid not in loaded.kids():
            raise RotationRefused(f"no key {kid!r} in the store")


class MemoryLocalIdpKeyStore:
    """An in-process key store for tests and development; a restart loses the keys."""

    def __init__(self, loaded: LoadedKeys | None = None) -> None:
        self._lock = threading.Lock()
        self._loaded = loaded
        self._rotation = RotationState()

    def staged_rotation(self) -> StagedRotationStore:
        """This store: it keeps staged rotation."""
        return self

    def rotation_state(self) -> RotationState:
        with self._lock:
            return self._rotation

    def stage(self, key: LocalIdpSigningKey, at: datetime) -> None:
        with self._lock:
            loaded = self._require()
            if self._rotation.staged_kid is not None:
                raise RotationRefused(
                    f"key {self._rotation.staged_kid!r} is already staged: activate it first"
                )
            if key.kid in loaded.kids():
                raise DuplicateKeyId(key.kid)
            self._loaded = LoadedKeys(loaded.current, (*loaded.historical, key))
            self._rotation = RotationState(key.kid, at, self._rotation.retired_at)

    def activate(self, at: datetime) -> str:
        with self._lock:
            loaded = self._require()
            staged = self._rotation.staged_kid
            if staged is None:
                raise RotationRefused("no staged key to activate")
            new = next(k for k in loaded.historical if k.kid == staged)
            rest = [loaded.current, *(k for k in loaded.historical if k.kid != staged)]
            self._loaded = LoadedKeys(new, rest)
            self._rotation = RotationState(None, None, {**self._rotation.retired_at, loaded.current.kid: at})
            return staged

    def prune(self, kids: Collection[str]) -> None:
        with self._lock:
            loaded = self._require()
            _check_prunable(loaded, self._rotation, kids)
            self._loaded = LoadedKeys(loaded.current, (k for k in loaded.historical if k.kid not in kids))
            retired = {k: v for k, v in self._rotation.retired_at.items() if k not in kids}
            self._rotation = RotationState(self._rotation.staged_kid, self._rotation.staged_at, retired)

    def _require(self) -> LoadedKeys:
        if self._loaded is None:
            raise KeyStoreError("the memory key store holds no key yet; rotate() one in")
        return self._loaded

    @classmethod
    def with_current(cls, key: LocalIdpSigningKey) -> MemoryLocalIdpKeyStore:
        """A store whose only key is ``key``."""
        return cls(LoadedKeys(key))

    def load_all(self) -> LoadedKeys:
        with self._lock:
            if self._loaded is None:
                raise KeyStoreError("the memory key store holds no key yet; rotate() one in")
            return self._loaded

    def rotate(self, new_current: LocalIdpSigningKey) -> None:
        if not isinstance(new_current, LocalIdpSigningKey):
            raise KeyStoreError("rotate() needs a LocalIdpSigningKey")
        with self._lock:
            if self._loaded is None:
                self._loaded = LoadedKeys(new_current)
                return
            if new_current.kid in self._loaded.kids():
                raise DuplicateKeyId(new_current.kid)
            self._loaded = LoadedKeys(new_current, self._loaded.all_keys)

    def __repr__(self) -> str:
        loaded = self._loaded
        current = loaded.current.kid if loaded is not None else None
        return f"<MemoryLocalIdpKeyStore current={current!r}>"


_CURRENT: Final = "current.kid"
_ROTATION: Final = "rotation.json"
_HISTORICAL: Final = "historical"
_LOCK: Final = ".lock"
_TMP_PREFIX: Final = ".tmp-"
_MAX_PEM_BYTES: Final = 64 * 1024
_MAX_KID_FILE_BYTES: Final = 128
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` (0600, must not exist) with ``data`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # umask cannot widen it, but be explicit
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


_ALG_LINE_PREFIX: Final = b"alg: "


def _split_algorithm_line(data: bytes) -> tuple[str | None, bytes]:
    """``(algorithm, pem)`` from a key file: ``alg: <name>`` then the PEM.

    Files written before the algorithm was stored hold only the PEM (``None``:
    inferred from the key).
    """
    if not data.startswith(_ALG_LINE_PREFIX):
        return None, data
    line, _, pem = data.partition(b"\n")
    try:
        algorithm = line[len(_ALG_LINE_PREFIX) :].decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise KeyStoreError("a key file has an unreadable algorithm line") from exc
    return algorithm, pem


class FileLocalIdpKeyStore:
    """Keys in a directory: ``historical/<kid>.pem`` for every key plus ``current.kid``.

    Layout::

        <directory>/            0700
          current.kid           0600  the current key's kid and a newline
          historical/           0700
            <kid>.pem           0600  "alg: <algorithm>" line + PKCS#8 private key, one per key
          .lock                 0600  serialises rotations between processes (flock)

    Rotation writes the new PEM to a temporary file, fsyncs it and renames it into
    ``historical/``, then replaces ``current.kid`` the same way and fsyncs the
    directory. A crash at any point therefore leaves either the old or the new
    current key, never a pointer to a missing or partial file. Loading refuses
    key files readable by group or others, and a ``current.kid`` that is not a
    plain key id (so it cannot point outside ``historical/``).

    Each key file starts with its algorithm (``alg: PS256``); files written
    without that line (older versions) get it inferred: RSA → RS256, P-256 →
    ES256, P-384 → ES384, Ed25519 → EdDSA. The directory and ``historical/``
    must not be writable by group or others, and ``historical/`` must not be a
    symlink. POSIX only (uses ``flock``).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._dir = Path(directory)
        self._historical = self._dir / _HISTORICAL
        self._thread_lock = threading.Lock()

    @property
    def directory(self) -> Path:
        return self._dir

    @classmethod
    def initialize(cls, directory: str | os.PathLike[str], key: LocalIdpSigningKey) -> FileLocalIdpKeyStore:
        """Create a new store in ``directory`` (created 0700 if missing) with ``key`` current.

        Refuses a directory that already holds a store.
        """
        store = cls(directory)
        try:
            store._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(store._dir, 0o700)
            store._historical.mkdir(mode=0o700, exist_ok=True)
            os.chmod(store._historical, 0o700)
        except OSError as exc:
            raise KeyStoreError(f"cannot create the key store directory: {exc.strerror}") from exc
        with store._locked():
            if os.path.lexists(store._dir / _CURRENT):
                raise KeyStoreError(f"{store._dir} already holds a key store")
            store._rotate_locked(key, initial=True)
        return store

    def is_initialized(self) -> bool:
        return os.path.lexists(self._dir / _CURRENT)

    # -- reading -----------------------------------------------------------------------------------

    def _read_current_kid(self) -> str:
        path = self._dir / _CURRENT
        try:
            fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
        except FileNotFoundError as exc:
            raise KeyStoreError(f"{path} is missing: the key store is not initialized") from exc
        except OSError as exc:
            raise KeyStoreError(f"cannot open {path}: {exc.strerror} (symlinks are refused)") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise KeyStoreError(f"{path} is not a regular file")
            raw = os.read(fd, _MAX_KID_FILE_BYTES + 1)
        finally:
            os.close(fd)
        if len(raw) > _MAX_KID_FILE_BYTES:
            raise KeyStoreError(f"{path} is too long to hold a key id")
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError as exc:
            raise KeyStoreError(f"{path} does not hold a valid key id") from exc
        if text.endswith("\n"):
            text = text[:-1]
        try:
            return validate_kid(text)
        except SigningKeyError as exc:
            raise KeyStoreError(f"{path} does not hold a valid key id") from exc

    def _read_key(self, kid: str) -> LocalIdpSigningKey:
        path = self._historical / f"{kid}.pem"
        try:
            fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
        except FileNotFoundError as exc:
            raise KeyStoreError(f"key file {path} is missing") from exc
        except OSError as exc:
            raise KeyStoreError(
                f"cannot open key file {path}: {exc.strerror} (symlinks are refused)"
            ) from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise KeyStoreError(f"key file {path} is not a regular file")
            if info.st_mode & 0o077:
                raise KeyStoreError(
                    f"key file {path} is accessible by group or others "
                    f"(mode {stat.S_IMODE(info.st_mode):04o}); run chmod 600"
                )
            data = os.read(fd, _MAX_PEM_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > _MAX_PEM_BYTES:
            raise KeyStoreError(f"key file {path} is too large")
        algorithm, pem = _split_algorithm_line(data)
        try:
            return LocalIdpSigningKey.from_pem(pem, kid=kid, algorithm=algorithm)
        except SigningKeyError as exc:
            raise KeyStoreError(f"key file {path} is unusable: {exc.message}") from exc

    def _list_kids(self) -> list[str]:
        try:
            top = os.lstat(self._dir)
            if stat.S_ISLNK(os.lstat(self._historical).st_mode):
                raise KeyStoreError(f"{self._historical} is a symlink; the key store refuses it")
            info = os.stat(self._historical)
            names = os.listdir(self._historical)
        except FileNotFoundError as exc:
            raise KeyStoreError(f"{self._historical} is missing: the key store is not initialized") from exc
        except OSError as exc:
            raise KeyStoreError(f"cannot read {self._historical}: {exc.strerror}") from exc
        if top.st_mode & 0o022:
            raise KeyStoreError(f"{self._dir} is writable by group or others; run chmod 700")
        if info.st_mode & 0o022:
            raise KeyStoreError(f"{self._historical} is writable by group or others; run chmod 700")
        kids = []
        for name in names:
            if name.startswith("."):
                continue  # temporary files of an interrupted rotation
            if not name.endswith(".pem"):
                continue
            kid = name[: -len(".pem")]
            try:
                kids.append(validate_kid(kid))
            except SigningKeyError as exc:
                raise KeyStoreError(f"unexpected file {name!r} in {self._historical}") from exc
        return sorted(kids)

    def load_all(self) -> LoadedKeys:
        """Read every key; the current one is named by ``current.kid``.

        Rotations only ever add files, so reading the pointer before and after the
        directory listing and getting the same answer proves a consistent view.
        """
        for _ in range(10):
            current_kid = self._read_current_kid()
            kids = self._list_kids()
            if current_kid not in kids:
                raise KeyStoreError(
                    f"current.kid names {current_kid!r} but historical/{current_kid}.pem is missing"
                )
            keys = {kid: self._read_key(kid) for kid in kids}
            if self._read_current_kid() == current_kid:
                current = keys.pop(current_kid)
                return LoadedKeys(current, keys.values())
        raise KeyStoreError("the key store kept changing while being read")

    # -- rotating ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._thread_lock:
            try:
                fd = os.open(self._dir / _LOCK, os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
            except OSError as exc:
                raise KeyStoreError(f"cannot open the key store lock: {exc.strerror}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def rotate(self, new_current: LocalIdpSigningKey) -> None:
        """Make ``new_current`` current; the previous current stays as historical."""
        if not isinstance(new_current, LocalIdpSigningKey):
            raise KeyStoreError("rotate() needs a LocalIdpSigningKey")
        with self._locked():
            self._rotate_locked(new_current, initial=False)

    def _rotate_locked(self, key: LocalIdpSigningKey, *, initial: bool) -> None:
        if not initial:
            self._read_current_kid()  # refuse to rotate an uninitialized or corrupt store
        self._add_key_locked(key)
        self._replace_locked(_CURRENT, f"{key.kid}\n".encode("ascii"), "rotation")

    def _add_key_locked(self, key: LocalIdpSigningKey) -> None:
        """Write the PEM under its final name, fully on disk (published from then on)."""
        if key.kid in self._list_kids():
            raise DuplicateKeyId(key.kid)
        self._remove_stale_temp_files()
        try:
            tmp = self._historical / f"{_TMP_PREFIX}{secrets.token_hex(8)}"
            _write_new_file(tmp, _ALG_LINE_PREFIX + key.algorithm.encode("ascii") + b"\n" + key.private_pem())
            os.rename(tmp, self._historical / f"{key.kid}.pem")
            _fsync_dir(self._historical)
        except OSError as exc:
            raise KeyStoreError(f"writing key {key.kid} failed: {exc.strerror}") from exc

    def _replace_locked(self, name: str, data: bytes, what: str) -> None:
        """Replace ``name`` in the store folder atomically (temp file, fsync, rename)."""
        try:
            tmp = self._dir / f"{_TMP_PREFIX}{secrets.token_hex(8)}"
            _write_new_file(tmp, data)
            os.replace(tmp, self._dir / name)
            _fsync_dir(self._dir)
        except OSError as exc:
            raise KeyStoreError(f"{what} failed: {exc.strerror}") from exc

    # -- staged rotation ---------------------------------------------------------------------------

    def staged_rotation(self) -> StagedRotationStore:
        """This store: it keeps staged rotation."""
        return self

    def rotation_state(self) -> RotationState:
        """The staged key and retirement times (``rotation.json``), consistent with ``current.kid``."""
        path = self._dir / _ROTATION
        try:
            doc: Any = json.loads(path.read_bytes()) if path.exists() else {}
        except (OSError, ValueError) as exc:
            raise KeyStoreError(f"{path} is unreadable: restore it or remove it") from exc
        if not isinstance(doc, dict):
            raise KeyStoreError(f"{path} is not a JSON object")
        try:
            staged = doc.get("staged")
            retired = {
                validate_kid(k): datetime.fromisoformat(v) for k, v in dict(doc.get("retired", {})).items()
            }
            staged_kid = validate_kid(staged["kid"]) if staged else None
            staged_at = datetime.fromisoformat(staged["at"]) if staged else None
        except (KeyError, TypeError, ValueError, SigningKeyError) as exc:
            raise KeyStoreError(f"{path} is malformed") from exc
        if staged_kid is not None and staged_kid == self._read_current_kid():
            staged_kid, staged_at = None, None  # activation finished but crashed before the bookkeeping
        return RotationState(staged_kid, staged_at, retired)

    def _write_rotation_locked(self, state: RotationState) -> None:
        doc = {
            "staged": (
                {"kid": state.staged_kid, "at": state.staged_at.isoformat()}
                if state.staged_kid is not None and state.staged_at is not None
                else None
            ),
            "retired": {kid: at.isoformat() for kid, at in state.retired_at.items()},
        }
        self._replace_locked(
            _ROTATION, json.dumps(doc, sort_keys=True).encode("ascii"), "rotation bookkeeping"
        )

    def stage(self, key: LocalIdpSigningKey, at: datetime) -> None:
        if not isinstance(key, LocalIdpSigningKey):
            raise KeyStoreError("stage() needs a LocalIdpSigningKey")
        with self._locked():
            state = self.rotation_state()
            if state.staged_kid is not None:
                raise RotationRefused(f"key {state.staged_kid!r} is already staged: activate it first")
            self._add_key_locked(key)
            self._write_rotation_locked(RotationState(key.kid, at, state.retired_at))

    def activate(self, at: datetime) -> str:
        with self._locked():
            state = self.rotation_state()
            if state.staged_kid is None:
                raise RotationRefused("no staged key to activate")
            previous = self._read_current_kid()
            self._replace_locked(_CURRENT, f"{state.staged_kid}\n".encode("ascii"), "activation")
            self._write_rotation_locked(RotationState(None, None, {**state.retired_at, previous: at}))
            return state.staged_kid

    def prune(self, kids: Collection[str]) -> None:
        with self._locked():
            state = self.rotation_state()
            _check_prunable(self.load_all(), state, kids)
            try:
                for kid in kids:
                    os.unlink(self._historical / f"{validate_kid(kid)}.pem")
                _fsync_dir(self._historical)
            except OSError as exc:
                raise KeyStoreError(f"pruning failed: {exc.strerror}") from exc
            retired = {k: v for k, v in state.retired_at.items() if k not in kids}
            self._write_rotation_locked(RotationState(state.staged_kid, state.staged_at, retired))

    def _remove_stale_temp_files(self) -> None:
        # Only called under the lock, so every temp file belongs to a crashed rotation.
        for folder in (self._dir, self._historical):
            for name in os.listdir(folder):
                if name.startswith(_TMP_PREFIX):
                    with contextlib.suppress(OSError):
                        os.unlink(folder / name)

    def __repr__(self) -> str:
        return f"<FileLocalIdpKeyStore {str(self._dir)!r}>"
