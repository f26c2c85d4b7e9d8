"""The access token handed out: :class:`ProviderToken`, a ``str`` with its ``requests`` auth."""

from __future__ import annotations

import requests

__all__ = ["ProviderToken"]


class ProviderToken(str):
    """A provider access token (it is the ``str``), with its ``token_type`` (``Bearer`` or
    ``DPoP``) and ``auth``: a ``requests`` auth object for the app's resource calls, which
    sets ``Authorization`` and, for a DPoP-bound token, a fresh proof per request (the
    resource server's ``use_dpop_nonce`` answered by one retry)::

        token = authflow.federation.token("bank")
        requests.get("https://api.bank.example/accounts", auth=token.auth, timeout=10)

    A token bound to the provider's client certificate (mutual TLS, RFC 8705) also carries
    ``cert`` (the certificate and key files) and ``verify`` (the provider's CA bundle, or
    ``True``) for ``requests``; for other tokens they are ``None`` and ``True``, requests'
    defaults, so one call fits every token::

        requests.get(url, auth=token.auth, cert=token.cert, verify=token.verify, timeout=10)
    """

    __slots__ = ("auth", "cert", "token_type", "verify")
    token_type: str
    auth: requests.auth.AuthBase
    cert: tuple[str, str] | None
    verify: str | bool

    def __new__(
        cls,
        access_token: str,
        token_type: str,
        auth: requests.auth.AuthBase,
        cert: tuple[str, str] | None = None,
        verify: str | bool = True,
    ) -> ProviderToken:
        made = super().__new__(cls, access_token)
        made.token_type = token_type
        made.auth = auth
        made.cert = cert
        made.verify = verify
        return made

    def __getnewargs__(  # type: ignore[override]
        self,
    ) -> tuple[str, str, requests.auth.AuthBase, tuple[str, str] | None, str | bool]:
        # pickled (a worker process hands its token back): rebuilt with its type, auth and certificate
        return str(self), self.token_type, self.auth, self.cert, self.verify

    def __repr__(self) -> str:
        return f"<ProviderToken {self.token_type}>"
