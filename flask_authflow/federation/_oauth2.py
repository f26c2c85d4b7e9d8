"""Plain OAuth 2.0 providers without ID tokens (GitHub): a separate kind, never OpenID Connect.

Such a provider authenticates nobody by itself: the login gets an access token (code
flow with state and PKCE S256, no nonce) and asks the provider's user API who it belongs
to. No ID token is read from its token answer and ``openid`` is never asked for; the
identity is the user API's numeric ``id`` under the configured ``issuer`` namespace, and
the e-mail is the *verified primary* one of the e-mail API (a login without one is
refused).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final
from urllib.parse import urlencode, urlsplit, urlunsplit

from flask_authflow._clock import Clock, SystemClock
from flask_authflow._core.encoding import STRICT_JSON
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._ceremony import Ceremony
from flask_authflow.federation._errors import ProviderUnreachable, TokenExchange, UserInfo
from flask_authflow.federation._http import HttpClient, HttpResponse, RequestsHttpClient, check_provider_url

__all__ = ["GITHUB", "OAuth2Provider", "OAuth2ProviderConfig", "PlainIdentity"]

#: GitHub's endpoints (``github`` preset).
GITHUB: Final = {
    "issuer": "https://github.com",
    "authorization_endpoint": "https://github.com/login/oauth/authorize",
    "token_endpoint": "https://github.com/login/oauth/access_token",
    "user_endpoint": "https://api.github.com/user",
    "emails_endpoint": "https://api.github.com/user/emails",
    "scopes": ("read:user", "user:email"),
}
_API_HEADERS: Final = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
_MAX_EMAILS: Final = 100


@dataclass(frozen=True)
class OAuth2ProviderConfig:
    """A plain OAuth 2.0 provider: its endpoints, the client, and the login options.

    :param issuer: the namespace its identities are linked under (``https://github.com``).
    :param user_endpoint: the user API (its ``id`` is the subject).
    :param emails_endpoint: the e-mail API (a list of ``email``, ``primary``, ``verified``).
    """

    authorization_endpoint: str
    token_endpoint: str
    user_endpoint: str
    emails_endpoint: str
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    redirect_uri: str
    scopes: tuple[str, ...] = ("read:user", "user:email")
    ceremony_timeout: timedelta = timedelta(minutes=15)
    post_login_redirect: str = "/"
    link_by_email: bool = False
    tenant: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "authorization_endpoint",
            "token_endpoint",
            "user_endpoint",
            "emails_endpoint",
            "issuer",
        ):
            check_provider_url(getattr(self, name), name, error=ConfigurationError)
        check_provider_url(self.redirect_uri, "redirect_uri", error=ConfigurationError)
        for name in ("client_id", "client_secret"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ConfigurationError(f"OAuth provider {name} must be a non-empty string")
        scopes = self.scopes
        if isinstance(scopes, str) or not isinstance(scopes, Iterable):
            raise ConfigurationError("scopes must be a list of strings")
        object.__setattr__(self, "scopes", tuple(scopes))
        if "openid" in self.scopes:
            raise ConfigurationError("a plain OAuth 2.0 provider is not OpenID Connect: leave out 'openid'")
        if not isinstance(self.post_login_redirect, str) or not self.post_login_redirect.startswith("/"):
            raise ConfigurationError("post_login_redirect must be a path of this site, such as '/dashboard'")
        if isinstance(self.ceremony_timeout, int | float):
            object.__setattr__(self, "ceremony_timeout", timedelta(seconds=self.ceremony_timeout))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, what: str = "provider") -> OAuth2ProviderConfig:
        try:
            return cls(**dict(values))
        except TypeError as exc:
            raise ConfigurationError(f"{what}: {exc}") from None


@dataclass(frozen=True)
class PlainIdentity:
    """Who the user API says the access token belongs to (``claims`` carries the verified
    primary e-mail as ``email`` with ``email_verified`` true)."""

    subject: str
    claims: Mapping[str, Any] = field(repr=False)
    access_token: str = field(repr=False)


class OAuth2Provider:
    """One plain OAuth 2.0 provider (see the module docstring)."""

    #: Never OpenID Connect: no ID token, no nonce, no logout tokens.
    is_openid: Final = False

    def __init__(
        self,
        name: str,
        config: OAuth2ProviderConfig,
        *,
        http: HttpClient | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.http: HttpClient = http if http is not None else RequestsHttpClient()
        self.clock: Clock = clock if clock is not None else SystemClock()
        #: Built by configuration, never rediscovered.
        self.fresh_until = None

    @property
    def issuer(self) -> str:
        return self.config.issuer

    def is_stale(self, now: Any) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<OAuth2Provider {self.name!r} issuer={self.issuer!r}>"

    def authorization_url(
        self, ceremony: Ceremony, *, scopes: Iterable[str] | None = None, **extra: str
    ) -> str:
        """The authorize URL: code flow, state and PKCE S256 (no nonce, no ``openid``)."""
        chosen = tuple(scopes) if scopes is not None else self.config.scopes
        params = {
            "response_type": "code",
            "client_id": self.config.client_id,
            "redirect_uri": self.config.redirect_uri,
            "scope": " ".join(s for s in chosen if s != "openid"),
            "state": ceremony.state,
            "code_challenge": ceremony.code_challenge,
            "code_challenge_method": "S256",
            **{k: v for k, v in extra.items() if k in ("prompt", "login_hint")},
        }
        parts = urlsplit(self.config.authorization_endpoint)
        query = f"{parts.query}&{urlencode(params)}" if parts.query else urlencode(params)
        return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))

    def sign_in(self, code: str, code_verifier: str) -> PlainIdentity:
        """Exchange ``code`` (with the PKCE verifier) and ask the user API who signed in.

        :raises TokenExchange, ProviderUnreachable, UserInfo: as for OpenID providers;
            ``UserInfo`` also when the account has no verified primary e-mail.
        """
        access_token = self._exchange(code, code_verifier)
        user = self._get(self.config.user_endpoint, access_token).json_object()
        subject = user.get("id")
        if isinstance(subject, bool) or not isinstance(subject, int | str) or not str(subject):
            raise UserInfo("the user API answered no id")
        email = self._verified_primary_email(access_token)
        claims: dict[str, Any] = {
            "sub": str(subject),
            "email": email,
            "email_verified": True,
            "preferred_username": user.get("login") if isinstance(user.get("login"), str) else None,
            "name": user.get("name") if isinstance(user.get("name"), str) else None,
        }
        return PlainIdentity(str(subject), claims, access_token)

    def _exchange(self, code: str, code_verifier: str) -> str:
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "code_verifier": code_verifier,
            "redirect_uri": self.config.redirect_uri,
        }
        form.update(client_id=self.config.client_id, client_secret=self.config.client_secret)
        response = self.http.post_form(
            self.config.token_endpoint, form, headers={"Accept": "application/json"}
        )
        if response.status >= 500:
            raise ProviderUnreachable(f"the token endpoint answered HTTP {response.status}")
        token = response.json_object()
        error = token.get("error")  # GitHub answers errors with HTTP 200
        if response.status != 200 or error is not None:
            shown = error if isinstance(error, str) and error.isascii() and len(error) <= 64 else None
            raise TokenExchange(
                f"the token endpoint answered {shown or f'HTTP {response.status}'}", error=shown or ""
            )
        access = token.get("access_token")
        token_type = token.get("token_type", "bearer")
        if not isinstance(access, str) or not access:
            raise TokenExchange("the token endpoint answered without an access_token")
        if not isinstance(token_type, str) or token_type.lower() != "bearer":
            raise TokenExchange(f"unsupported token_type {str(token_type)[:32]!r}")
        return access

    def _get(self, url: str, access_token: str) -> HttpResponse:
        response = self.http.get(url, headers={**_API_HEADERS, "Authorization": f"Bearer {access_token}"})
        if response.status in (401, 403):
            raise UserInfo(
                f"the user API answered {response.status}: the scopes may lack read:user, user:email"
            )
        if response.status != 200:
            raise UserInfo(f"the user API answered HTTP {response.status}")
        return response

    def _verified_primary_email(self, access_token: str) -> str:
        response = self._get(self.config.emails_endpoint, access_token)
        try:
            entries = STRICT_JSON.decode(response.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise UserInfo("the e-mail API did not answer JSON") from None
        if not isinstance(entries, list):
            raise UserInfo("the e-mail API did not answer a list")
        for entry in entries[:_MAX_EMAILS]:
            if (
                isinstance(entry, dict)
                and entry.get("primary") is True
                and entry.get("verified") is True
                and isinstance(entry.get("email"), str)
                and entry["email"]
            ):
                return str(entry["email"])
        raise UserInfo("the account has no verified primary e-mail address")
