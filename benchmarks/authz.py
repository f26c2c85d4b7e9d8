"""Policy decisions per second beside a hand-written role check.

Three ways to answer "may this editor edit this document of their tenant?":

* a hand-written check in Python (``"editor" in roles and doc.tenant == user.tenant``),
  the floor: what an application writes without a policy engine;
* ``Evaluator.decide`` on the Cedar policies (the principal, its roles and the document
  built into Cedar entities, evaluated, logged);
* ``authflow.authorize`` inside a request of a signed-in user, the second and later
  decisions of that request (the principal's entities are built and parsed by Cedar once
  per request; each decision adds the document);
* ``authflow.authorize`` as the first decision of a fresh request (the request context
  from a ready WSGI environ, as a server hands it over, the session, the user, the roles
  hook and the entities all built for it);
* the bare ``cedarpy.is_authorized`` call on the benchmark's decision: the same request,
  the same prepared policy set, the entities as the list Cedar's docs show. The target of
  issue 30: ``authflow.authorize`` at least 0.5x this;
* and, for scale, one bare ``cedarpy.is_authorized`` call on a one-line policy with no
  entities: the engine's own floor per call.

Each is timed in windows taken round-robin, so drift in the machine's speed hits all alike;
the best window of each counts. The decision log is on (INFO to a null handler), as in
production. Most of a decision's time is the engine's floor per call (the request and
entities cross into Rust as JSON); building the entities and the log line add the rest.

    .venv/bin/python benchmarks/authz.py [--rounds 5] [--window 0.3]
"""

from __future__ import annotations

import argparse
import contextvars
import logging
import secrets
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cedarpy
from flask import Flask
from werkzeug.test import EnvironBuilder

from flask_authflow import AuthFlow
from flask_authflow._web.authz import authz_hooks, is_authorized
from flask_authflow.authz import AuthzSettings, Entity, Evaluator, Principal, load_policies
from flask_authflow.authz._entities import entity_json
from flask_authflow.login._password import PasswordHasher
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import login_test_client

BARE = "bare cedarpy, the same decision"
AUTHORIZE = "authflow.authorize, in a request"
POLICIES = """
@id("editors-edit-own-tenant")
permit(principal in Role::"editor", action == Action::"edit", resource)
when { resource.tenant == principal.tenant };

@id("no-archive-edits")
forbid(principal, action == Action::"edit", resource == Document::"archive");
"""
SCHEMA = """
entity Role;
entity User in [Role] {
  id: String, tenant: String, roles: Set<String>,
  session: { factors: Set<String>, device_trusted: Bool, authenticated_at?: Long, auth_age?: Long },
};
entity Document { tenant: String };
action edit appliesTo { principal: [User], resource: [Document] };
"""


def per_second(variants: dict[str, Callable[[], object]], rounds: int, window: float) -> dict[str, float]:
    """Calls per second of each variant: the best of ``rounds`` windows, taken round-robin."""
    best = dict.fromkeys(variants, 0.0)
    for fn in variants.values():
        fn()  # warm up
    for _ in range(rounds):
        for name, fn in variants.items():
            calls, started = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - started) < window:
                for _ in range(20):
                    fn()
                calls += 20
            best[name] = max(best[name], calls / elapsed)
    return best


def web_decisions() -> tuple[Callable[[], object], Callable[[], object]]:
    """``authflow.authorize`` in a signed-in user's request (memory stores): (a decision in
    a request already open, where an earlier one prepared the principal; the first decision
    of a fresh request)."""
    app = Flask("authz_bench")
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_SESSION_STORE="memory",
        AUTHFLOW_AUTHZ_POLICIES=[POLICIES],
        AUTHFLOW_AUTHZ_SCHEMA=SCHEMA,
    )
    hasher = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)  # only the login uses it
    authflow = AuthFlow(backend=InMemoryBackend(), session_store=MemorySessionStore(), hasher=hasher)
    authz_hooks(authflow).roles_loader(lambda user: ("editor",))
    authflow.init_app(app)
    document = Entity("Document", "42", {"tenant": "default"})
    client = login_test_client(app, "alice")
    cookie = client.get_cookie(app.config["AUTHFLOW_COOKIE_NAME"])
    assert cookie is not None
    headers = {"Cookie": f"{cookie.key}={cookie.value}", "User-Agent": client.environ_base["HTTP_USER_AGENT"]}

    # The environ a WSGI server hands the app, built once: Werkzeug's test EnvironBuilder
    # (what test_request_context runs) is harness work no deployed request pays.
    builder = EnvironBuilder("/", headers=headers)
    environ = builder.get_environ()
    builder.close()

    def first_in_new_request() -> object:
        with app.request_context(dict(environ)):
            allowed = is_authorized("edit", document)
            assert allowed
            return allowed

    # Run in the context variables of before the long request below is pushed: otherwise
    # Flask reuses that request's app context (and its ``g``, where the principal's
    # entities are kept) for every new request, and the first decision would find them
    # prepared, which no request a server hands over does.
    outside = contextvars.copy_context()

    def first() -> object:
        return outside.run(first_in_new_request)

    context = app.test_request_context("/", headers=headers)
    context.push()  # kept open for the rest of the run: one long request
    assert is_authorized("edit", document)

    def again() -> object:
        allowed = is_authorized("edit", document)
        assert allowed
        return allowed

    return again, first


def bare_decision(
    evaluator: Evaluator, principal: Principal, document: Entity, now: datetime
) -> Callable[[], object]:
    """The benchmark's decision put to cedarpy directly: what ``decide`` sends, built once."""
    assert evaluator.policies is not None
    policy_set = evaluator.policies.policy_set
    request = {
        "principal": {"type": "User", "id": principal.id},
        "action": {"type": "Action", "id": "edit"},
        "resource": document.uid,
        "context": {},
    }
    entities = [*principal.entities(now), entity_json(document)]

    def bare_cedarpy() -> object:
        result = cedarpy.is_authorized(request, policy_set, entities)
        assert result.allowed
        return result

    return bare_cedarpy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=float, default=0.3, help="seconds per timed window")
    args = parser.parse_args()
    logging.getLogger("flask_authflow.authz").addHandler(logging.NullHandler())
    logging.getLogger("flask_authflow.authz").setLevel(logging.INFO)
    logging.getLogger("flask_authflow.authz").propagate = False

    now = datetime.now(UTC)
    evaluator = Evaluator(load_policies(AuthzSettings(policies=(POLICIES,), schema=SCHEMA)))
    signed_in = now - timedelta(minutes=1)
    principal = Principal(
        "u1", "acme", frozenset({"editor"}), authenticated_at=signed_in, factors=("password",)
    )
    document = Entity("Document", "42", {"tenant": "acme"})

    def by_hand() -> object:
        allowed = "editor" in principal.roles and document.attributes["tenant"] == principal.tenant
        return allowed and document.id != "archive"

    def by_policy() -> object:
        decision = evaluator.decide(principal, "edit", document, now=now)
        assert decision.allowed
        return decision

    floor_policy = cedarpy.PolicySet.from_str("permit(principal, action, resource);")
    floor_request = {
        "principal": {"type": "User", "id": "u1"},
        "action": {"type": "Action", "id": "edit"},
        "resource": {"type": "Document", "id": "42"},
        "context": {},
    }

    def engine_floor() -> object:
        return cedarpy.is_authorized(floor_request, floor_policy, [])

    again, first = web_decisions()
    rates = per_second(
        {
            "hand-written role check": by_hand,
            "cedarpy floor (no entities)": engine_floor,
            BARE: bare_decision(evaluator, principal, document, now),
            "Evaluator.decide": by_policy,
            AUTHORIZE: again,
            "authflow.authorize, new request": first,
        },
        args.rounds,
        args.window,
    )
    floor = rates["hand-written role check"]
    print(f"Python {sys.version.split()[0]}; best of {args.rounds} x {args.window}s windows; decisions/s")
    for name, rate in rates.items():
        ratio = "" if rate == floor else f"   hand-written/this = {floor / rate:8.1f}x"
        print(f"  {name:<40}{rate:>12,.0f}/s  {1e6 / rate:8.2f} us{ratio}")
    target = rates[AUTHORIZE] / rates[BARE]
    print(f"authflow.authorize / bare cedarpy on the same decision: {target:.2f}x (target >= 0.5x)")
    first_ratio = rates["authflow.authorize, new request"] / rates[BARE]
    print(
        f"the first decision of a new request / bare cedarpy: {first_ratio:.2f}x (target >= 0.5x; "
        "it includes the request context and the session)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
