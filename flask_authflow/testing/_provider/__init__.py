"""An in-process OpenID Connect provider for tests (no network, no real provider).

:class:`TestOpenIDProvider` is a small Flask app that answers like an OpenID
provider: discovery, ``/authorize`` (automatic consent for the subject chosen with
:meth:`~TestOpenIDProvider.login_as`), ``/token``, ``/jwks``, ``/userinfo`` and
``/end_session``. It can rotate its signing key, send a back-channel logout token
to your app, and produce faulty tokens on purpose (:data:`Tamper`) for negative
tests. It is scriptable to emulate what real providers and certification suites do:
keys published without ``alg`` (``publish_alg``), discovery members and headers changed
(``discovery_overrides``, ``discovery_cache_control``), an issuer ending in ``/``
(``trailing_slash=True``), a client held to one ``token_endpoint_auth_method``, the
``state`` it returns after logout (``logout_state``), and keys
for RS/PS 256/384/512, ES256/384/512, EdDSA and ``Ed25519``. Mount
:meth:`~TestOpenIDProvider.requests_adapter` on a ``requests`` session (or pass it to
the federation ``HttpClient``) to reach it in-process::

    provider = TestOpenIDProvider()
    provider.register_client("app", "secret", ["https://app.test/auth/callback/op"])
    provider.login_as("alice", email="alice@example.com", email_verified=True)
    session = requests.Session()
    session.mount(provider.base_url, provider.requests_adapter())

Tokens are signed with :class:`~flask_authflow.issuer._keys.LocalIdpSigningKey`
(the library's own signing path); nothing here is meant for production.
"""

from __future__ import annotations

from typing import Final

from flask_authflow.testing._provider import _tamper, _tokens
from flask_authflow.testing._provider._backchannel import BackchannelLogoutResult
from flask_authflow.testing._provider._clients import RegisteredClient
from flask_authflow.testing._provider._end_session import LogoutState as LogoutState
from flask_authflow.testing._provider._provider import TestOpenIDProvider
from flask_authflow.testing._provider._wsgi import query_params as query_params
from flask_authflow.testing._provider._wsgi import wsgi_adapter as wsgi_adapter

__all__ = [
    "BACKCHANNEL_LOGOUT_EVENT",
    "BackchannelLogoutResult",
    "RegisteredClient",
    "Tamper",
    "TestOpenIDProvider",
]

#: The ``events`` member of a back-channel logout token (OpenID Connect Back-Channel Logout 1.0).
BACKCHANNEL_LOGOUT_EVENT: Final = _tokens.BACKCHANNEL_LOGOUT_EVENT

#: Ways to spoil the next token on purpose (negative tests of a relying party).
Tamper = _tamper.Tamper
