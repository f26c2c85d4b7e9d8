"""The module paths 0.8 made private still import until 0.9, as the same modules, and warn
with where to import from instead (flask_authflow/_moved.py).

Each check runs in a fresh interpreter: importing an old path adds it to ``sys.modules``
and to its parent package, which the rest of the suite must not see.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

from flask_authflow._moved import MOVED, private_path, public_home


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _passes(code: str) -> None:
    """``code`` runs in a fresh interpreter and prints ``ok`` (its asserts all held)."""
    result = _run(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"


def test_every_moved_path_has_its_private_module() -> None:
    missing = [old for old, new in MOVED.items() if importlib.util.find_spec(new) is None]
    assert missing == []
    assert len(MOVED) > 50


def test_a_path_under_a_moved_package_follows_it() -> None:
    assert private_path("flask_authflow.web.views.signin") == "flask_authflow._web.views.signin"
    assert private_path("flask_authflow.storage.sql.backend") == "flask_authflow.storage._sql.backend"
    assert private_path("flask_authflow.login.password") == "flask_authflow.login._password"
    assert private_path("flask_authflow.login") is None  # public: never moved
    assert private_path("flask_authflow.errors") is None
    assert public_home("flask_authflow.login.password") == "flask_authflow.login"
    assert public_home("flask_authflow.web.views") == "flask_authflow"


@pytest.mark.slow  # a fresh interpreter
def test_an_old_path_is_the_same_module_and_warns_where_to_import_from() -> None:
    _passes(
        """
        import warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            from flask_authflow.login.password import PasswordHasher as Old
            import flask_authflow.storage.sql.backend as old_backend
        import flask_authflow.login._password as private
        import flask_authflow.storage._sql.backend as private_backend
        from flask_authflow.login import PasswordHasher
        assert Old is PasswordHasher is private.PasswordHasher
        assert old_backend is private_backend
        assert private.__spec__.name == "flask_authflow.login._password"  # its own spec, kept
        messages = [str(w.message) for w in caught]
        assert all(w.category is DeprecationWarning for w in caught)
        assert all(w.filename == "<string>" for w in caught), [w.filename for w in caught]
        assert any(m.startswith("flask_authflow.login.password ") and "from flask_authflow.login" in m
                   for m in messages)
        assert any(m.startswith("flask_authflow.storage.sql.backend is private") for m in messages)
        print("ok")
        """
    )


@pytest.mark.slow  # a fresh interpreter
def test_an_old_path_loads_no_second_copy_and_an_unknown_one_fails() -> None:
    _passes(
        """
        import sys, warnings
        warnings.simplefilter("ignore")
        import flask_authflow.web.views.signin as old
        import flask_authflow._web.views.signin as new
        assert old is new
        copies = [name for name, module in sys.modules.items() if module is new]
        names = ["flask_authflow._web.views.signin", "flask_authflow.web.views.signin"]
        assert sorted(copies) == names, copies
        try:
            import flask_authflow.web.no_such_module
        except ModuleNotFoundError:
            print("ok")
        """
    )


@pytest.mark.slow  # a fresh interpreter
def test_a_deprecated_function_at_its_old_path_still_works_and_warns_twice() -> None:
    """The 0.8 deprecation table promised ``flask_authflow.web.roles.create_role``."""
    _passes(
        """
        import warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            from flask_authflow.web.roles import create_role
        import flask_authflow._web.roles as roles
        assert create_role is roles.create_role
        assert [w.category for w in caught] == [DeprecationWarning, DeprecationWarning]  # web, web.roles
        print("ok")
        """
    )


@pytest.mark.slow  # a fresh interpreter
def test_under_error_filters_an_old_import_fails_loudly() -> None:
    """``-W error::DeprecationWarning`` (pytest's ``-W error``) turns an old import into an
    error naming the new home, which is how an application finds the imports to move."""
    result = _run(
        """
        import warnings
        warnings.simplefilter("error", DeprecationWarning)
        try:
            import flask_authflow.core.ports
        except DeprecationWarning as warning:
            print(warning)
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "flask_authflow.core is private since 0.8" in result.stdout
    assert "import its documented names from flask_authflow" in result.stdout
