"""Key stores: memory, file (layout, permissions, crash safety) and SQL (SQLite + PostgreSQL)."""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from flask_authflow.errors import DuplicateKeyId, KeyStoreError
from flask_authflow.issuer import FileLocalIdpKeyStore, LocalIdpSigningKey, MemoryLocalIdpKeyStore
from flask_authflow.issuer._keys import LoadedKeys
from flask_authflow.issuer._keystores import LocalIdpKeyStore
from flask_authflow.storage._sql.engine import resolve_engine
from flask_authflow.storage._sql.keystore import SqlAlchemyLocalIdpKeyStore
from tests.protocols import missing_members

ROOT = Path(__file__).resolve().parent.parent


def es() -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_es256()


# -- memory -----------------------------------------------------------------------------------------


def test_memory_store_rotation() -> None:
    a, b = es(), es()
    store = MemoryLocalIdpKeyStore.with_current(a)
    assert missing_members(store, LocalIdpKeyStore) == []
    store.rotate(b)
    loaded = store.load_all()
    assert loaded.current == b and loaded.historical == (a,)
    with pytest.raises(DuplicateKeyId):
        store.rotate(a)
    with pytest.raises(DuplicateKeyId):
        store.rotate(b)
    assert store.load_all() == loaded
    assert a.kid not in repr(store) or b.kid in repr(store)


def test_memory_store_empty() -> None:
    store = MemoryLocalIdpKeyStore()
    with pytest.raises(KeyStoreError):
        store.load_all()
    key = es()
    store.rotate(key)
    assert store.load_all().current == key
    with pytest.raises(KeyStoreError):
        store.rotate("nope")  # type: ignore[arg-type]


# -- file -------------------------------------------------------------------------------------------


@pytest.fixture
def file_store(tmp_path: Path) -> FileLocalIdpKeyStore:
    return FileLocalIdpKeyStore.initialize(tmp_path / "keys", es().with_key_id("first"))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_file_store_layout_and_permissions(file_store: FileLocalIdpKeyStore) -> None:
    d = file_store.directory
    assert (d / "current.kid").read_text() == "first\n"
    assert (d / "historical" / "first.pem").exists()
    assert mode(d) == 0o700
    assert mode(d / "historical") == 0o700
    assert mode(d / "current.kid") == 0o600
    assert mode(d / "historical" / "first.pem") == 0o600
    file_store.rotate(es().with_key_id("second"))
    assert (d / "current.kid").read_text() == "second\n"
    assert mode(d / "historical" / "second.pem") == 0o600
    assert mode(d / "current.kid") == 0o600
    assert sorted(p.name for p in (d / "historical").iterdir()) == ["first.pem", "second.pem"]
    assert not [p for p in d.rglob(".tmp-*")]


def test_file_store_round_trip(file_store: FileLocalIdpKeyStore) -> None:
    first = file_store.load_all().current
    second = es().with_key_id("second")
    file_store.rotate(second)
    loaded = FileLocalIdpKeyStore(file_store.directory).load_all()
    assert loaded.current == second
    assert loaded.historical == (first,)
    rsa = LocalIdpSigningKey.generate_rs256(bits=2048).with_key_id("rsa")
    file_store.rotate(rsa)
    loaded = file_store.load_all()
    assert loaded.current.algorithm == "RS256"
    assert set(loaded.kids()) == {"first", "second", "rsa"}


def test_file_store_refuses_duplicate_kid(file_store: FileLocalIdpKeyStore) -> None:
    with pytest.raises(DuplicateKeyId):
        file_store.rotate(es().with_key_id("first"))
    assert file_store.load_all().current.kid == "first"


def test_initialize_twice_refused(file_store: FileLocalIdpKeyStore) -> None:
    with pytest.raises(KeyStoreError, match="already"):
        FileLocalIdpKeyStore.initialize(file_store.directory, es())


def test_uninitialized_store(tmp_path: Path) -> None:
    store = FileLocalIdpKeyStore(tmp_path / "nothing")
    assert not store.is_initialized()
    with pytest.raises(KeyStoreError, match="not initialized"):
        store.load_all()
    (tmp_path / "nothing").mkdir()
    with pytest.raises(KeyStoreError):
        store.rotate(es())


def test_missing_current_kid(file_store: FileLocalIdpKeyStore) -> None:
    (file_store.directory / "current.kid").unlink()
    with pytest.raises(KeyStoreError, match=r"current\.kid"):
        file_store.load_all()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\n",
        b"../current\n",
        b"/dev/null\n",
        b"../../etc/passwd",
        b"first\x00.pem",
        b"k" * 1024,
        b"\xff\xfe",
        b"first\n\n",
        b" first",
    ],
)
def test_malformed_current_kid(file_store: FileLocalIdpKeyStore, content: bytes) -> None:
    (file_store.directory / "current.kid").write_bytes(content)
    with pytest.raises(KeyStoreError, match=r"current\.kid"):
        file_store.load_all()


def test_current_kid_symlink_refused(file_store: FileLocalIdpKeyStore, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("first\n")
    path = file_store.directory / "current.kid"
    path.unlink()
    path.symlink_to(target)
    with pytest.raises(KeyStoreError, match="symlink"):
        file_store.load_all()


def test_current_kid_names_missing_pem(file_store: FileLocalIdpKeyStore) -> None:
    (file_store.directory / "current.kid").write_text("ghost\n")
    with pytest.raises(KeyStoreError, match="missing"):
        file_store.load_all()


@pytest.mark.parametrize("bad_mode", [0o640, 0o604, 0o644, 0o660, 0o666])
def test_group_or_world_readable_key_refused(file_store: FileLocalIdpKeyStore, bad_mode: int) -> None:
    pem = file_store.directory / "historical" / "first.pem"
    os.chmod(pem, bad_mode)
    with pytest.raises(KeyStoreError, match="chmod 600"):
        file_store.load_all()


def test_world_writable_historical_dir_refused(file_store: FileLocalIdpKeyStore) -> None:
    os.chmod(file_store.directory / "historical", 0o777)
    with pytest.raises(KeyStoreError, match="writable"):
        file_store.load_all()


def test_malformed_pem_refused(file_store: FileLocalIdpKeyStore) -> None:
    pem = file_store.directory / "historical" / "first.pem"
    pem.write_bytes(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    with pytest.raises(KeyStoreError, match="unusable"):
        file_store.load_all()


def test_pem_symlink_refused(file_store: FileLocalIdpKeyStore, tmp_path: Path) -> None:
    pem = file_store.directory / "historical" / "first.pem"
    target = tmp_path / "moved.pem"
    target.write_bytes(pem.read_bytes())
    os.chmod(target, 0o600)
    pem.unlink()
    pem.symlink_to(target)
    with pytest.raises(KeyStoreError, match="symlink"):
        file_store.load_all()


def test_unexpected_pem_name_refused(file_store: FileLocalIdpKeyStore) -> None:
    bad = file_store.directory / "historical" / "bad name.pem"
    bad.write_bytes(b"x")
    with pytest.raises(KeyStoreError, match="unexpected file"):
        file_store.load_all()


def test_leftover_temp_files_are_ignored_and_cleaned(file_store: FileLocalIdpKeyStore) -> None:
    (file_store.directory / "historical" / ".tmp-deadbeef").write_bytes(b"partial")
    (file_store.directory / ".tmp-cafe").write_bytes(b"sec")
    assert file_store.load_all().current.kid == "first"
    file_store.rotate(es().with_key_id("next"))
    assert not list(file_store.directory.rglob(".tmp-*"))


def test_concurrent_rotations_in_threads(file_store: FileLocalIdpKeyStore) -> None:
    keys = [es().with_key_id(f"t{i}") for i in range(12)]
    threads = [threading.Thread(target=file_store.rotate, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loaded = file_store.load_all()
    assert len(loaded.all_keys) == 13
    assert loaded.current.kid in {k.kid for k in keys}


CHILD = textwrap.dedent(
    """
    import sys
    from flask_authflow.issuer import FileLocalIdpKeyStore, LocalIdpSigningKey
    store = FileLocalIdpKeyStore(sys.argv[1])
    keys = [LocalIdpSigningKey.generate_es256() for _ in range(50)]
    print("ready", flush=True)
    i = 0
    while True:
        store.rotate(keys[i % 50].with_key_id(f"{sys.argv[2]}-{i}"))
        i += 1
    """
)


@pytest.mark.slow  # a subprocess killed in the middle of a rotation
def test_crash_during_rotation_leaves_a_loadable_store(tmp_path: Path) -> None:
    store = FileLocalIdpKeyStore.initialize(tmp_path / "keys", es().with_key_id("genesis"))
    rng = random.Random(1234)
    for round_ in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(store.directory), f"r{round_}"],
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.02, 0.25))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
        loaded = store.load_all()
        current = (store.directory / "current.kid").read_text().strip()
        assert loaded.current.kid == current
        pems = {p.stem for p in (store.directory / "historical").glob("*.pem")}
        assert set(loaded.kids()) == pems
        assert current in pems
    # Still usable for rotation after all those crashes.
    fresh = es().with_key_id("after-crashes")
    store.rotate(fresh)
    assert store.load_all().current == fresh
    assert len(store.load_all().all_keys) > 6


# -- SQL ----------------------------------------------------------------------------------------------


@pytest.fixture
def sql_stores() -> Iterator[Callable[[Any], SqlAlchemyLocalIdpKeyStore]]:
    """A factory of SQL stores whose engines are disposed at teardown."""
    made: list[SqlAlchemyLocalIdpKeyStore] = []

    def make(source: Any) -> SqlAlchemyLocalIdpKeyStore:
        store = SqlAlchemyLocalIdpKeyStore(source)
        made.append(store)
        return store

    yield make
    for store in made:
        store.engine.dispose()


def test_sql_store_round_trip(
    database_url: str, sql_stores: Callable[[Any], SqlAlchemyLocalIdpKeyStore]
) -> None:
    store = sql_stores(database_url)
    assert missing_members(store, LocalIdpKeyStore) == []
    assert not store.is_initialized()
    with pytest.raises(KeyStoreError, match="exactly one current"):
        store.load_all()
    a = es().with_key_id("a")
    b = LocalIdpSigningKey.generate_rs256(bits=2048).with_key_id("b").with_algorithm("RS384")
    store.rotate(a)
    assert store.load_all() == LoadedKeys(a)
    store.rotate(b)
    loaded = sql_stores(database_url).load_all()
    assert loaded.current == b
    assert loaded.current.algorithm == "RS384"  # the alg column keeps it
    assert loaded.historical == (a,)
    with pytest.raises(DuplicateKeyId):
        store.rotate(a.with_key_id("a"))
    assert store.load_all().current.kid == "b"
    assert "a" not in repr(store) or "sqlite" in repr(store) or "postgresql" in repr(store)


def test_sql_store_ensure_current(
    database_url: str, sql_stores: Callable[[Any], SqlAlchemyLocalIdpKeyStore]
) -> None:
    store = sql_stores(database_url)
    first = store.ensure_current(es)
    again = store.ensure_current(es)
    assert first.current == again.current


def test_sql_one_current_is_enforced_by_the_database(
    database_url: str, sql_stores: Callable[[Any], SqlAlchemyLocalIdpKeyStore]
) -> None:
    store = sql_stores(database_url)
    store.rotate(es().with_key_id("a"))
    table = sa.Table("authflow_issuer_keys", sa.MetaData(), autoload_with=store.engine)
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(
            table.insert().values(kid="b", pem="x", alg="ES256", is_current=True, created_at=sa.func.now())
        )


def test_sql_store_refuses_corrupt_rows(
    database_url: str, sql_stores: Callable[[Any], SqlAlchemyLocalIdpKeyStore]
) -> None:
    store = sql_stores(database_url)
    store.rotate(es().with_key_id("a"))
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE authflow_issuer_keys SET pem = 'garbage'"))
    with pytest.raises(KeyStoreError, match="unusable"):
        store.load_all()


def test_sql_concurrent_rotation_from_two_engines(database_url: str) -> None:
    engines = [resolve_engine(database_url), resolve_engine(database_url)]
    stores = [SqlAlchemyLocalIdpKeyStore(e) for e in engines]
    stores[0].rotate(es().with_key_id("genesis"))
    per_thread = 8
    keys = [[es().with_key_id(f"e{i}-{n}") for n in range(per_thread)] for i in range(2)]
    errors: list[Exception] = []
    barrier = threading.Barrier(4)

    def work(store: SqlAlchemyLocalIdpKeyStore, mine: list[LocalIdpSigningKey]) -> None:
        try:
            barrier.wait()
            for key in mine:
                store.rotate(key)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=(stores[0], keys[0][:4])),
        threading.Thread(target=work, args=(stores[1], keys[1][:4])),
        threading.Thread(target=work, args=(stores[0], keys[0][4:])),
        threading.Thread(target=work, args=(stores[1], keys[1][4:])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for store in stores:
        loaded = store.load_all()
        assert len(loaded.all_keys) == 1 + 2 * per_thread
    with engines[0].connect() as conn:
        current = conn.execute(sa.text("SELECT count(*) FROM authflow_issuer_keys WHERE is_current")).scalar()
    assert current == 1
    for e in engines:
        e.dispose()


# -- the algorithm survives a reload and unsafe folders -------------------

ALL_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]


def _generate(algorithm: str) -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate(algorithm, rsa_bits=2048)


@pytest.mark.parametrize("algorithm", ALL_ALGORITHMS)
def test_file_store_keeps_the_algorithm(tmp_path: Path, algorithm: str) -> None:
    first = _generate(algorithm)
    store = FileLocalIdpKeyStore.initialize(tmp_path / "keys", first)
    second = _generate(algorithm)
    store.rotate(second)
    loaded = FileLocalIdpKeyStore(tmp_path / "keys").load_all()
    assert loaded.current.algorithm == algorithm
    assert [k.algorithm for k in loaded.all_keys] == [algorithm, algorithm]
    assert loaded.current == second


@pytest.mark.parametrize("algorithm", ALL_ALGORITHMS)
def test_memory_store_keeps_the_algorithm(algorithm: str) -> None:
    store = MemoryLocalIdpKeyStore.with_current(_generate(algorithm))
    store.rotate(_generate(algorithm))
    assert {k.algorithm for k in store.load_all().all_keys} == {algorithm}


@pytest.mark.parametrize("algorithm", ALL_ALGORITHMS)
def test_sql_store_keeps_the_algorithm(
    tmp_path: Path, sql_stores: Callable[[Any], SqlAlchemyLocalIdpKeyStore], algorithm: str
) -> None:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    sql_stores(url).ensure_current(lambda: _generate(algorithm))
    sql_stores(url).rotate(_generate(algorithm))
    assert {k.algorithm for k in sql_stores(url).load_all().all_keys} == {algorithm}


def test_file_store_reads_the_old_layout_without_an_algorithm_line(tmp_path: Path) -> None:
    store = FileLocalIdpKeyStore.initialize(tmp_path / "keys", es().with_key_id("old"))
    pem = store.directory / "historical" / "old.pem"
    pem.write_bytes(es().with_key_id("old").private_pem())  # what older versions wrote
    assert pem.read_bytes().startswith(b"-----BEGIN")
    assert store.load_all().current.algorithm == "ES256"


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757])
def test_store_folder_writable_by_others_refused(file_store: FileLocalIdpKeyStore, mode: int) -> None:
    os.chmod(file_store.directory, mode)
    try:
        with pytest.raises(KeyStoreError, match="writable by group or others"):
            file_store.load_all()
    finally:
        os.chmod(file_store.directory, 0o700)


def test_symlinked_historical_refused(file_store: FileLocalIdpKeyStore, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    (file_store.directory / "historical").rename(real)
    (file_store.directory / "historical").symlink_to(real)
    with pytest.raises(KeyStoreError, match="symlink"):
        file_store.load_all()
