"""docs/views.rst lists every endpoint the package registers: the list is checked against
``app.url_map`` of an app with every feature on (the ready views, sign-up, reset, a provider,
the local issuer), and of one whose views register their own logout route."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

from flask import Flask

from flask_authflow import AuthFlow

DOC = Path(__file__).resolve().parent.parent / "docs" / "views.rst"
#: The package's blueprints: an endpoint of any of them belongs on the page.
BLUEPRINTS = ("authflow_views", "authflow_logout", "authflow_oauth", "authflow_issuer")
#: A row of the endpoint tables: ``endpoint``  METHODS  ``path`` [remarks].
ROW = re.compile(
    r"^``(?P<endpoint>authflow_\w+\.\w+)``\s+(?P<methods>[A-Z]+(?:, [A-Z]+)*)\s+``(?P<path>[^`]+)``"
)

Endpoint = tuple[str, str]  # (methods, path)


def _full_app(**config: object) -> Flask:
    app = Flask("every_endpoint")
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_urlsafe(48),
        AUTHFLOW_VIEWS=True,
        AUTHFLOW_ISSUER="https://issuer.test",
        AUTHFLOW_ISSUER_KEY_STORE="memory",
        AUTHFLOW_OAUTH_PROVIDERS={
            "corp": {
                "discovery_url": "https://op.test/.well-known/openid-configuration",
                "client_id": "client",
                "client_secret": "secret",
                "redirect_uri": "https://app.test/auth/callback/corp",
            }
        },
        **config,
    )
    AuthFlow(app)
    return app


def registered(app: Flask) -> dict[str, Endpoint]:
    """The package's endpoints of ``app``: methods (without HEAD and OPTIONS) and path."""
    found: dict[str, Endpoint] = {}
    for rule in app.url_map.iter_rules():
        if rule.endpoint.split(".", 1)[0] in BLUEPRINTS:
            methods = sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})
            found[rule.endpoint] = (", ".join(methods), rule.rule)
    return found


def documented(text: str) -> dict[str, Endpoint]:
    """The rows of the page's endpoint tables (the section "Endpoints")."""
    section = text.split("\nEndpoints\n---------\n", 1)[1].split("\n----", 1)[0]
    rows: dict[str, Endpoint] = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            assert match["endpoint"] not in rows, f"listed twice: {match['endpoint']}"
            methods = ", ".join(sorted(match["methods"].split(", ")))
            rows[match["endpoint"]] = (methods, match["path"])
    return rows


def every_endpoint() -> dict[str, Endpoint]:
    endpoints = registered(_full_app())
    # With AUTHFLOW_LOGOUT_URL_PREFIX = None the views register the logout route themselves.
    endpoints.update(registered(_full_app(AUTHFLOW_LOGOUT_URL_PREFIX=None)))
    return endpoints


def test_every_endpoint_of_the_package_is_on_the_views_page() -> None:
    endpoints = every_endpoint()
    rows = documented(DOC.read_text(encoding="utf-8"))
    missing = sorted(set(endpoints) - set(rows))
    assert missing == [], f"docs/views.rst lacks {missing}"
    wrong = {name: (rows[name], actual) for name, actual in endpoints.items() if rows[name] != actual}
    assert wrong == {}, "docs/views.rst has other methods or paths (page, app)"
    stale = sorted(set(rows) - set(endpoints))
    assert stale == [], f"docs/views.rst lists endpoints that do not exist: {stale}"


def test_the_app_really_has_every_feature_on() -> None:
    """The check above means something only if the app registers each blueprint."""
    endpoints = every_endpoint()
    assert {name.split(".", 1)[0] for name in endpoints} == set(BLUEPRINTS)
    assert len([name for name in endpoints if name.startswith("authflow_views.")]) >= 33


def test_the_check_finds_a_missing_row_and_a_wrong_path() -> None:
    text = DOC.read_text(encoding="utf-8")
    rows = documented(text)
    without = documented(text.replace("``authflow_views.csrf``", "``csrf``"))
    assert set(rows) - set(without) == {"authflow_views.csrf"}
    moved = documented(text.replace("``/account/factors/totp/confirm``", "``/account/totp/confirm``"))
    assert moved["authflow_views.confirm_totp"] != every_endpoint()["authflow_views.confirm_totp"]
