"""Users with passwords for tests: the password is hashed here, the store receives the hash.

The storage adapters never hash (``create_user(..., password_hash=...)``); an application
creates accounts through ``AccountAdmin`` (its policy, its hooks, the app's hasher). A test
that only needs a user in a store calls :func:`add_user`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from flask_authflow._core.ports import IdentityStore, UserRecord
from flask_authflow.login._password import PasswordHasher

__all__ = ["add_user"]

#: The plugin's ``authflow_hasher`` parameters (real Argon2id, minimal cost): a user added
#: with it logs in on an app wired with that fixture without a rehash.
_FAST: Final = PasswordHasher.fast_for_tests()


def add_user(
    store: IdentityStore,
    tenant: str,
    identifier: str,
    password: str | None = None,
    *,
    hasher: PasswordHasher | None = None,
    email: str | None = None,
    email_verified_at: datetime | None = None,
) -> UserRecord:
    """Add a user to ``store`` with ``password`` hashed by ``hasher`` (default: the fast test
    hasher; pass the app's when it hashes with other parameters), or without a password.
    No password policy and no application hook: tests only."""
    hashed = (hasher or _FAST).hash(password) if password is not None else None
    return store.create_user(
        tenant, identifier, password_hash=hashed, email=email, email_verified_at=email_verified_at
    )
