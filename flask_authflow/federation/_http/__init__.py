"""The one HTTP layer of provider traffic: discovery, JWKS, userinfo and the token request.

Every request to an OpenID provider goes through an :class:`HttpClient`, so the rules
live in one place:

* **https only**, except plain http on a loopback host (``127.0.0.1``, ``::1``,
  ``localhost``) for development and tests; no credentials and no fragment in the URL
  (:func:`check_provider_url`, also used to check the endpoints of a discovery document);
* **timeouts** on connecting and on each read (5 s and 10 s by default), and a **total
  deadline** per exchange (15 s by default): an answer trickled a few bytes at a time is
  cut off when the deadline passes, however steadily the bytes come;
* **a size cap** on every answer (1 MiB by default), enforced while the body streams in,
  so an answer without ``Content-Length`` cannot grow past it either, and refused at once
  when ``Content-Length`` already says it is too large;
* **no redirects**: a provider endpoint that answers 3xx is misconfigured or
  compromised, so a 3xx raises :class:`ProviderUnreachable` (to any host, the same one
  included) instead of being followed;
* **mutual TLS** only when asked: ``tls=`` (a
  :class:`~flask_authflow.federation._mtls.ClientCertificate`) passes the client
  certificate and the provider's CA bundle to ``requests`` (``cert=``, ``verify=``);
* transport failures (timeouts, refused connections, TLS errors, oversize answers)
  raise :class:`ProviderUnreachable` naming the host and the kind of failure, never the
  body. Other statuses (4xx, 5xx) are returned: callers know what each one means.

:class:`RequestsHttpClient` implements it on a :class:`requests.Session` whose adapters
enforce the rules. The token request goes through :meth:`~HttpClient.post_form` like
every other call; :meth:`~HttpClient.mount_into` puts the same adapters on another
session (an application's own Authlib ``OAuth2Session``, say), so it obeys them too.
``requests`` (a dependency) is imported only when a :class:`RequestsHttpClient` is built.
"""

from __future__ import annotations

from typing import Final

from flask_authflow.federation._http import _urls
from flask_authflow.federation._http._requests import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_BYTES,
    DEFAULT_READ_TIMEOUT,
    RequestsHttpClient,
)
from flask_authflow.federation._http._response import HttpClient, HttpResponse, ResponseHeaders
from flask_authflow.federation._http._transport import DEFAULT_TOTAL_TIMEOUT
from flask_authflow.federation._http._urls import check_provider_url

#: Hosts on which plain http is allowed (development servers and tests).
LOOPBACK_HOSTS: Final = _urls.LOOPBACK_HOSTS

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_READ_TIMEOUT",
    "DEFAULT_TOTAL_TIMEOUT",
    "LOOPBACK_HOSTS",
    "HttpClient",
    "HttpResponse",
    "RequestsHttpClient",
    "ResponseHeaders",
    "check_provider_url",
]
