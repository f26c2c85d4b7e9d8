"""Sign-in with an OpenID provider: the list of providers, the redirect flow for a browser
(the API answers the provider's URL; the provider's callback finishes the login as it does
for the pages), and for apps the **native hand-over**: the app asks for a nonce, its
native SDK signs the user in with the provider, and the app posts the provider's ID token
(or an authorization code and its PKCE verifier). The token is verified by the same
federation code as the callback's (:meth:`~flask_authflow.federation._login.
FederationService.finish_native`): issuer, audience, the nonce, the signature through the
JWKS cache, then the same linking rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask_authflow._i18n import N_
from flask_authflow._web.headless.clients import APP, BROWSER
from flask_authflow._web.headless.login import STEP, step_reply
from flask_authflow._web.headless.routes import Answer, Call, Refusal, Reply, Routes
from flask_authflow._web.headless.schema import Array, Object, String
from flask_authflow._web.next_url import safe_next
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow.audit._context import audit_context

if TYPE_CHECKING:  # the federation feature (and its token library) loads only when configured
    from flask_authflow.federation._login import FederationService

__all__ = ["routes"]

routes = Routes("providers")

#: A provider's name in a path (the registry's rule, checked again by the registry).
PROVIDER = String(64, min_length=1, pattern=r"[A-Za-z0-9][A-Za-z0-9_.-]*")

PROVIDERS = Object(
    {
        "providers": Array(
            Object({"name": String(64)}, required=("name",), name="Provider"),
            256,
        )
    },
    required=("providers",),
    name="Providers",
)
REDIRECT_BODY = Object(
    {"next": String(2048, description="A path on this site to land on after the callback.")},
    name="ProviderRedirect",
)
REDIRECT = Object(
    {"location": String(8192, description="The provider's authorize URL: send the browser there.")},
    required=("location",),
    name="ProviderLocation",
)
NONCE = Object(
    {"nonce": String(256, description="Hand it to the native SDK (the ID token must carry it).")},
    required=("nonce",),
    name="ProviderNonce",
)
NATIVE_BODY = Object(
    {
        "id_token": String(16384, min_length=1, description="The provider's ID token."),
        "code": String(4096, min_length=1, description="Or: an authorization code (PKCE)."),
        "code_verifier": String(128, min_length=43, description="The PKCE verifier of ``code``."),
    },
    name="ProviderHandover",
)
_OAUTH_ERRORS = {
    401: ("csrf_mismatch", "ceremony_expired", "issuer_mismatch", "token_exchange_failed", "id_token_invalid",
          "unknown_kid", "userinfo_failed", "oauth_error"),
    403: ("user_not_linked", "account_disabled", "locked"),
    404: ("unknown_provider",),
    503: ("discovery_failed", "provider_unreachable"),
}  # fmt: skip
_PARAMS = {"provider": PROVIDER}


def _federation() -> FederationService:
    service: FederationService | None = get_state().federation
    if service is None:
        raise Refusal("unknown_provider", N_("No provider is configured."), 404)
    return service


@routes.get(
    "/providers", "listProviders", "The configured providers", answers={200: Answer("Providers", PROVIDERS)}
)
def list_providers(call: Call) -> Reply:
    """The providers a user may sign in with, by name."""
    service: FederationService | None = get_state().federation
    names = service.registry.names() if service is not None else []
    return Reply({"providers": [{"name": name} for name in names]})


@routes.post(
    "/providers/{provider}/redirect",
    "providerRedirect",
    "Begin a sign-in with a provider (browser)",
    body=REDIRECT_BODY,
    params=_PARAMS,
    answers={200: Answer("Where to send the browser", REDIRECT)},
    errors={404: ("unknown_provider",), 503: ("discovery_failed", "provider_unreachable")},
    kinds=(BROWSER,),
)
def redirect(call: Call) -> Reply:
    """The provider's authorize URL; the provider's callback (``/auth/callback/<provider>``)
    finishes the login with the browser's cookie, as for the pages, and lands on ``next``."""
    from flask_authflow.federation._login import OAuthLoginOptions  # configured: loaded already

    target = safe_next(call.body.get("next"))
    url = _federation().begin(
        current_auth_session(), call.params["provider"], OAuthLoginOptions(return_to=target)
    )
    return Reply({"location": url})


@routes.post(
    "/providers/{provider}/native/begin",
    "providerNativeBegin",
    "Begin a native sign-in with a provider (app)",
    params=_PARAMS,
    answers={200: Answer("The nonce for the native SDK", NONCE)},
    errors={404: ("unknown_provider",), 503: ("discovery_failed", "provider_unreachable")},
    kinds=(APP,),
)
def native_begin(call: Call) -> Reply:
    """A nonce, kept in the app's session until the hand-over (single use, the provider's
    ceremony timeout)."""
    return Reply({"nonce": _federation().begin_native(current_auth_session(), call.params["provider"])})


@routes.post(
    "/providers/{provider}/native",
    "providerNativeFinish",
    "Hand over what the native SDK obtained (app)",
    body=NATIVE_BODY,
    params=_PARAMS,
    answers={200: Answer("The next step, or the completed login", STEP)},
    errors=_OAUTH_ERRORS,
    kinds=(APP,),
)
def native_finish(call: Call) -> Reply:
    """The provider's ``id_token`` (or ``code`` and ``code_verifier``), verified as the
    callback's; then the account it maps to signs in (its second factor still asked)."""
    body = call.body
    if ("id_token" in body) == ("code" in body) or ("code" in body) != ("code_verifier" in body):
        raise Refusal("invalid_input", N_("Send an id_token, or a code with its code_verifier."), 400)
    handle = get_state().service.with_audit_context(audit_context())
    result = _federation().finish_native(
        handle,
        current_auth_session(),
        call.params["provider"],
        id_token=body.get("id_token"),
        code=body.get("code"),
        code_verifier=body.get("code_verifier"),
    )
    return step_reply(call.kind, result.outcome)
