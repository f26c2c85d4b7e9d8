"""Federated login as an OpenID Connect relying party (code flow + PKCE), back-channel
and RP-initiated logout. See :doc:`/federation`."""
