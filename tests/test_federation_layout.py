"""Federated login is cut as the login engine is (issue 33 point 4): small private modules
per concept or flow, whose names are imported from the packages above them."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import flask_authflow

FEDERATION = Path(flask_authflow.__file__).parent / "federation"
FLOWS = ("_begin", "_finish", "_native", "_linking", "_logout")


def _imported(path: Path) -> set[str]:
    """The ``flask_authflow.federation._login`` modules ``path`` imports (any depth)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "flask_authflow.federation._login":
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "flask_authflow.federation._login."
        ):
            found.add((node.module or "").split(".")[3])
    return found


def test_the_flows_never_import_the_service() -> None:
    """Each flow receives the service through its protocol; only the service imports the flows."""
    login = FEDERATION / "_login"
    graph = {path.stem: _imported(path) for path in login.glob("*.py")}
    assert set(FLOWS) <= set(graph)
    assert set(FLOWS) <= graph["_service"]
    assert not any("_service" in graph[module] for module in graph if module not in ("_service", "__init__"))
    assert all("_services" in graph[flow] for flow in FLOWS)


def test_no_federation_module_is_over_400_lines() -> None:
    long = {
        str(path.relative_to(FEDERATION)): lines
        for path in FEDERATION.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}


@pytest.mark.parametrize(
    ("module", "names"),
    [
        (
            "flask_authflow.federation._provider",
            "OAuthProvider OAuthProviderConfig ProviderMetadata ProviderRegistry TokenSet "
            "PROVIDER_CONFIG_KEYS PROVIDER_NAME_RE check_provider_name checked_token_type",
        ),
        (
            "flask_authflow.federation._login",
            "FederationService FederatedIdentity FederatedLogin OAuthLoginOptions ClaimsMapper "
            "default_claims_mapper email_link_key email_linked_user",
        ),
        ("flask_authflow.federation._provider_tokens", "ProviderTokens ProviderToken Sealer TokenAudit"),
        ("flask_authflow.federation._http", "HttpClient HttpResponse RequestsHttpClient LOOPBACK_HOSTS"),
    ],
)
def test_the_names_of_the_cut_modules_import_from_where_they_did(module: str, names: str) -> None:
    """The cut moved code, not import paths: the private modules below are never named."""
    package = importlib.import_module(module)
    for name in names.split():
        assert name in package.__all__
        assert getattr(package, name) is not None
    assert not [name for name in package.__all__ if name.startswith("_")]
