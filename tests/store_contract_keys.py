"""The store contract of the issuer's key stores (``LocalIdpKeyStore``).

Mixed into a test class whose module gives a ``key_store`` fixture: a store that holds
``first_key`` as its current key (tests/test_key_store_contracts.py runs it on the memory,
file, SQLite and PostgreSQL stores; their staged rotation is
tests/test_issuer_staged_rotation.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from flask_authflow.errors import DuplicateKeyId, KeyStoreError
from flask_authflow.issuer import LocalIdpSigningKey
from flask_authflow.issuer._keystores import LocalIdpKeyStore, StagedRotationStore
from tests.protocols import missing_members
from tests.store_contract import RACERS, race


def es256(kid: str) -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_es256().with_key_id(kid)


class KeysContract:
    """The current key and the keys it replaced, rotated atomically, a kid never held twice."""

    def test_implements_the_ports(self, key_store: Any) -> None:
        assert missing_members(key_store, LocalIdpKeyStore) == []
        assert missing_members(key_store, StagedRotationStore) == []
        assert key_store.staged_rotation() is key_store  # every shipped store declares it

    def test_loads_the_key_it_holds(self, key_store: Any, first_key: LocalIdpSigningKey) -> None:
        loaded = key_store.load_all()
        assert loaded.current == first_key and loaded.historical == ()

    def test_a_rotation_makes_the_new_key_current_and_keeps_the_old_ones(
        self, key_store: Any, first_key: LocalIdpSigningKey
    ) -> None:
        second, third = es256("second"), es256("third")
        key_store.rotate(second)
        key_store.rotate(third)
        loaded = key_store.load_all()
        assert loaded.current == third
        assert sorted(key.kid for key in loaded.historical) == sorted([first_key.kid, "second"])
        assert {key.kid: key for key in loaded.all_keys}["second"] == second  # the key itself, kept

    def test_a_kid_the_store_holds_is_refused(self, key_store: Any, first_key: LocalIdpSigningKey) -> None:
        key_store.rotate(es256("second"))
        before = key_store.load_all()
        for kid in (first_key.kid, "second"):  # a historical kid, the current one
            with pytest.raises(DuplicateKeyId):
                key_store.rotate(es256(kid))
        assert key_store.load_all() == before  # the refusals changed nothing

    def test_what_is_not_a_key_is_refused(self, key_store: Any) -> None:
        before = key_store.load_all()
        with pytest.raises(KeyStoreError):
            key_store.rotate("not a key")
        assert key_store.load_all() == before

    def test_parallel_rotations_to_one_kid_have_one_winner(self, key_store: Any) -> None:
        candidates = [es256("raced") for _ in range(RACERS)]

        def rotate(index: int) -> bool:
            try:
                key_store.rotate(candidates[index])
            except DuplicateKeyId:
                return False
            return True

        won = race(RACERS, rotate)
        assert won.count(True) == 1
        assert key_store.load_all().current == candidates[won.index(True)]
