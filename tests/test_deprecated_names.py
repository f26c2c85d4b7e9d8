"""Names kept one more release with a DeprecationWarning (their replacement in the message):
``SqlAlchemyBackend.unit_of_work()`` (nothing used it; ``begin_unit()`` is the port's way).
``flask_authflow._outcomes.InvalidCredentials`` is tested in tests/test_authn_outcomes.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user


def test_unit_of_work_warns_and_still_commits_or_rolls_back(tmp_path: Path) -> None:
    backend = SqlAlchemyBackend(f"sqlite:///{tmp_path / 'a.db'}")
    try:
        with pytest.warns(DeprecationWarning, match=r"unit_of_work\(\).*begin_unit\(\)") as caught:
            with backend.unit_of_work():
                add_user(backend, "default", "alice", "plum tuesday kettle orbit 47")
        assert caught[0].filename == __file__  # the warning points at the caller
        assert backend.find_user("default", "alice") is not None
        with pytest.warns(DeprecationWarning), pytest.raises(LookupError):
            with backend.unit_of_work():
                add_user(backend, "default", "bob", "plum tuesday kettle orbit 47")
                raise LookupError("the block fails")
        assert backend.find_user("default", "bob") is None
    finally:
        backend.close()
