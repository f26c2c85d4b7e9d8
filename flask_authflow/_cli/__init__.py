"""The ``flask authflow`` command group.

Passwords are read from a hidden prompt or from standard input
(``--password-stdin``), never from the command line, where they would land in shell
history and ``ps`` output. Commands print no secret or key material, and session ids
only hashed; the two exceptions are what an operator asks for and must hand to the user,
printed once: the ``otpauth://`` URI of ``enroll-totp`` (it holds the new key) and the codes
of ``recovery-codes regenerate``, and the new API token of ``tokens create``.

Every command takes ``--json``: its result is then one JSON document on standard
output, and so is an error (``{"error": code, "message": ...}``). Without ``--json`` an
error is ``Error: <message>`` on standard error. Either way a failed command exits with
status 1 (2 for a usage error) and never prints a traceback: :class:`AuthflowGroup`
turns library errors, database errors and operating-system errors into that message, and
:func:`store_refusal` does the same for a database that ``init_app`` cannot open while the
CLI loads the app.
"""

from flask_authflow._cli import (
    audit,
    db,
    devices,
    factors,
    import_users,
    keys,
    roles,
    sessions,
    ssf,
    tokens,
    users,
)
from flask_authflow._cli.base import (
    SCHEMA_ERROR_KEY,
    AuthflowGroup,
    CommandFailed,
    authflow_cli,
    defer_schema_refusal,
    store_refusal,
)

__all__ = [
    "SCHEMA_ERROR_KEY",
    "AuthflowGroup",
    "CommandFailed",
    "audit",
    "authflow_cli",
    "db",
    "defer_schema_refusal",
    "devices",
    "factors",
    "import_users",
    "keys",
    "roles",
    "sessions",
    "ssf",
    "store_refusal",
    "tokens",
    "users",
]
