"""A password reset completion racing the confirmation of a change of e-mail for the same
account, from two processes against PostgreSQL (docs/security.rst, "Transactions").

The attack: someone with the password asked to move the account's mail to his address; the
owner resets her password. If his confirmation arrives while her reset runs, the outcome
must still be one of the two orders, decided by the database's row locks:

* the reset first: it voids the pending change, the confirmation answers 410, the account
  keeps the owner's address;
* the confirmation first: the address is his, and the reset, ordered after it, finds no
  pending change to void (it still sets the password and ends everything else).

Never both (the change confirmed *and* reported voided), never neither (a change left
pending after a completed reset), never a lost write (his address reported confirmed but
hers kept). A request that lost a deadlock or a lock wait answers 503 and is sent again.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flask_authflow._core.session import AuthSession, new_guest_record
from flask_authflow._web.state import account_admin, get_state
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import AuthFlowError, StoreUnavailable
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login import _email_change as email_change
from flask_authflow.login import _password_reset as password_reset
from flask_authflow.login._password import PasswordHasher
from flask_authflow.storage._sql.migrations import upgrade
from tests.appfactory import make_app
from tests.parts import child_processes

# The app's own SQL stores (the plugin's in-memory ones would replace them in this process).
pytestmark = [pytest.mark.postgres, pytest.mark.multiprocess, pytest.mark.authflow_stores("sql")]

ROUNDS = 16
#: How long the confirmation waits after the barrier, by round (the reset does more first:
#: it hashes the password and ends the sessions before its unit of work begins).
STAGGER = (0.0, 0.005, 0.02, 0.05)
PASSWORD = "the owners old passphrase"
NEW_PASSWORD = "the owners new passphrase"
SPAWN = child_processes()


def _app(url: str, folder: str) -> Any:
    return make_app(
        AUTHFLOW_DATABASE_URL=url,
        instance_path=Path(folder),
        hasher=PasswordHasher.fast_for_tests(),
    )


def _guest() -> AuthSession:
    return AuthSession(new_guest_record(datetime.now(UTC)), new=True)


def _once(call: Any) -> str:
    """``call()`` as the view would answer it: ``"ok"`` or the error's code; a request
    that lost a deadlock or a lock wait (503) is sent again, as a client would."""
    for _ in range(5):
        try:
            call()
        except StoreUnavailable:
            continue
        except AuthFlowError as exc:
            return exc.code
        return "ok"
    return "store_unavailable"


def _reset(service: Any, token: str) -> tuple[str, int | None]:
    """Complete the reset: its answer and how many pending changes of e-mail it voided."""
    done: list[Any] = []

    def call() -> None:
        done.append(
            password_reset.reset_password(service, AuditContext.unknown(), _guest(), token, NEW_PASSWORD)
        )

    answer = _once(call)
    return answer, done[-1].ended.account_tokens.get("email_change", 0) if done else None


def _confirm(service: Any, token: str) -> str:
    return _once(lambda: email_change.confirm_email_change(service, AuditContext.unknown(), _guest(), token))


def _racer(role: str, url: str, folder: str, tokens: list[str], barrier: Any, out: Any) -> None:
    """Each round: wait for the other process, then complete the reset (``role`` "reset")
    or confirm the change of e-mail ("confirm") with the round's token; report the
    answers, or the error (the barrier is broken then, so the other stops too)."""
    app = _app(url, folder)
    answers: list[Any] = []
    try:
        with app.app_context():
            service = get_state(app).service
            for round_, token in enumerate(tokens):
                barrier.wait(60)
                if role == "confirm":  # a spread of starts, so the rounds interleave both ways
                    time.sleep(STAGGER[round_ % len(STAGGER)])
                answers.append(_reset(service, token) if role == "reset" else _confirm(service, token))
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
        barrier.abort()
        out.put((role, repr(exc)))
    else:
        out.put((role, answers))


def _prepare(app: Any, round_: int) -> tuple[str, str, str]:
    """An owner with a verified address, his pending change to his address and her reset
    link: (user id, reset token, change token)."""
    now = datetime.now(UTC)
    with app.app_context():
        user = account_admin(app).create_user(
            "default", f"owner{round_}", PASSWORD, email=f"owner{round_}@example.com", email_verified_at=now
        )
        store = account_tokens.token_store(get_state(app).backend)
        change = account_tokens.issue(
            store,
            kind=email_change.KIND,
            tenant="default",
            user_id=user.user_id,
            now=now,
            ttl=timedelta(hours=1),
            payload={"email": f"mallory{round_}@evil.example"},
        )
        reset = account_tokens.issue(
            store,
            kind=password_reset.KIND,
            tenant="default",
            user_id=user.user_id,
            now=now,
            ttl=timedelta(hours=1),
            payload={"email": user.email},
        )
    return user.user_id, reset.token, change.token


def test_a_reset_racing_an_email_change_confirmation_is_one_order_or_the_other(
    postgres_server: Any, tmp_path: Path
) -> None:
    url = postgres_server.new_database()
    upgrade(url)
    app = _app(url, str(tmp_path))
    rounds = [_prepare(app, round_) for round_ in range(ROUNDS)]
    barrier, out = SPAWN.Barrier(2), SPAWN.Queue()
    work = {"reset": [r[1] for r in rounds], "confirm": [r[2] for r in rounds]}
    processes = [
        SPAWN.Process(target=_racer, args=(role, url, str(tmp_path), tokens, barrier, out))
        for role, tokens in work.items()
    ]
    for process in processes:
        process.start()
    reports = dict(out.get(timeout=180) for _ in processes)
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    assert all(isinstance(answers, list) for answers in reports.values()), reports
    orders = []
    with app.app_context():
        backend = get_state(app).backend
        for round_, (user_id, _, change) in enumerate(rounds):
            (reset, voided), confirmed = reports["reset"][round_], reports["confirm"][round_]
            account = backend.get_user("default", user_id)
            assert account is not None and reset == "ok", (round_, reports)
            left = backend.find_account_token(account_tokens.token_digest(change))
            assert left is not None and left.used_at is not None  # no change left pending
            if confirmed == "ok":  # the confirmation first: the reset found nothing to void
                assert voided == 0 and account.email == f"mallory{round_}@evil.example"
                orders.append("confirmation first")
            else:  # the reset first: it voided the change, which then could not be used
                assert confirmed == "account_token_used" and voided == 1, (round_, confirmed, voided)
                assert account.email == f"owner{round_}@example.com"
                orders.append("reset first")
    print({order: orders.count(order) for order in set(orders)})  # how the rounds interleaved
