"""Chromium's virtual WebAuthn authenticator, driven through the DevTools protocol.

A virtual authenticator belongs to the browser tab it was added to: the page's
``navigator.credentials.create`` / ``get`` talk to it as to a platform authenticator
(Touch ID, Windows Hello) that always finds its user present and verified, so a browser
test can register a security key or a passkey and sign in with it without a person.
"""

from __future__ import annotations

from typing import Any

#: A platform authenticator (CTAP2, "internal") that stores discoverable credentials
#: (passkeys) and verifies its user, answering every prompt at once.
PLATFORM_AUTHENTICATOR = {
    "protocol": "ctap2",
    "transport": "internal",
    "hasResidentKey": True,
    "hasUserVerification": True,
    "isUserVerified": True,
    "automaticPresenceSimulation": True,
}


def add_virtual_authenticator(driver: Any, **options: Any) -> str:
    """Enable the WebAuthn domain on ``driver``'s tab and add an authenticator; its id."""
    driver.execute_cdp_cmd("WebAuthn.enable", {})
    answer = driver.execute_cdp_cmd(
        "WebAuthn.addVirtualAuthenticator", {"options": {**PLATFORM_AUTHENTICATOR, **options}}
    )
    return str(answer["authenticatorId"])


def stored_credentials(driver: Any, authenticator_id: str) -> list[dict[str, Any]]:
    """The credentials the authenticator holds (``credentialId``, ``isResidentKey``,
    ``rpId``, ``userHandle``, ``signCount`` ..., binary fields in base64)."""
    answer = driver.execute_cdp_cmd("WebAuthn.getCredentials", {"authenticatorId": authenticator_id})
    return list(answer["credentials"])
