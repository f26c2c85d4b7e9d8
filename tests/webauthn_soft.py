"""A software WebAuthn authenticator (and the browser around it) for tests.

It answers the options the server hands out the way a browser with an authenticator does,
as the JSON a page posts back (``JSON.stringify`` of the ``PublicKeyCredential``, binary
fields base64url):

* :meth:`SoftAuthenticator.register`: a registration response with attestation ``none``,
  an EC P-256 key (COSE, ES256), flags UP/UV/BE/BS as asked, a sign count and the
  ``credProps`` extension result;
* :meth:`SoftAuthenticator.assert_`: an assertion: ``authenticatorData`` = SHA-256(rp id)
  | flags | counter, ``clientDataJSON`` with type, challenge and origin, an ECDSA signature
  over ``authenticatorData || SHA-256(clientDataJSON)``, and the user handle.

Every field can be overridden to build the wrong responses tests need (another origin,
RP id or challenge, no user verification, a counter that goes back).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

UP = 0x01
UV = 0x04
BE = 0x08
BS = 0x10
AT = 0x40

DEFAULT_AAGUID = bytes.fromhex("f1d0f1d0f1d0f1d0f1d0f1d0f1d0f1d0")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def from_b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def cose_es256(public_key: ec.EllipticCurvePublicKey) -> bytes:
    """The COSE_Key of a P-256 public key (kty EC2, alg ES256, crv P-256, x, y)."""
    numbers = public_key.public_numbers()
    return cbor2.dumps(
        {1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big")}
    )


def flags_byte(*, up: bool, uv: bool, be: bool, bs: bool, at: bool = False) -> int:
    return (UP if up else 0) | (UV if uv else 0) | (BE if be else 0) | (BS if bs else 0) | (AT if at else 0)


@dataclass
class SoftCredential:
    """One credential held by the authenticator.

    ``counter_step`` is how much the signature counter grows per assertion (0: an
    authenticator that does not count, as synced passkeys do)."""

    credential_id: bytes
    private_key: ec.EllipticCurvePrivateKey
    rp_id: str
    user_handle: bytes
    discoverable: bool
    backup_eligible: bool = False
    backed_up: bool = False
    sign_count: int = 0
    counter_step: int = 1

    @property
    def id(self) -> str:
        return b64url(self.credential_id)


@dataclass
class SoftAuthenticator:
    """A software authenticator inside a browser at ``origin``."""

    origin: str = "https://example.com"
    aaguid: bytes = DEFAULT_AAGUID
    transports: Sequence[str] = ("usb",)
    credentials: dict[bytes, SoftCredential] = field(default_factory=dict)

    # --- navigator.credentials.create ---------------------------------------------------------

    def register(
        self,
        options: Mapping[str, Any],
        *,
        origin: str | None = None,
        rp_id: str | None = None,
        challenge: str | None = None,
        client_type: str = "webauthn.create",
        up: bool = True,
        uv: bool = True,
        discoverable: bool | None = None,
        backup_eligible: bool = False,
        backed_up: bool = False,
        sign_count: int = 0,
        counter_step: int = 1,
        credential_id: bytes | None = None,
        cred_props: bool = True,
        raw_id: bytes | None = None,
    ) -> tuple[str, SoftCredential]:
        """Answer creation ``options`` (the ``publicKey`` member the server sent).

        ``discoverable`` defaults to what the options ask (``residentKey: required``);
        ``credential_id`` reuses an id (a duplicate registration); ``raw_id`` names another
        credential than the attested one.
        """
        rp = rp_id if rp_id is not None else options["rp"]["id"]
        if discoverable is None:
            discoverable = options.get("authenticatorSelection", {}).get("residentKey") == "required"
        private_key = ec.generate_private_key(ec.SECP256R1())
        cred_id = credential_id if credential_id is not None else os.urandom(32)
        credential = SoftCredential(
            credential_id=cred_id,
            private_key=private_key,
            rp_id=rp,
            user_handle=from_b64url(options["user"]["id"]),
            discoverable=discoverable,
            backup_eligible=backup_eligible,
            backed_up=backed_up,
            sign_count=sign_count,
            counter_step=counter_step,
        )
        auth_data = (
            hashlib.sha256(rp.encode()).digest()
            + bytes([flags_byte(up=up, uv=uv, be=backup_eligible, bs=backed_up, at=True)])
            + sign_count.to_bytes(4, "big")
            + self.aaguid
            + len(cred_id).to_bytes(2, "big")
            + cred_id
            + cose_es256(private_key.public_key())
        )
        client_data = self._client_data(
            client_type, challenge if challenge is not None else options["challenge"], origin
        )
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        named = raw_id if raw_id is not None else cred_id
        body: dict[str, Any] = {
            "id": b64url(named),
            "rawId": b64url(named),
            "type": "public-key",
            "authenticatorAttachment": "cross-platform",
            "response": {
                "clientDataJSON": b64url(client_data),
                "attestationObject": b64url(attestation),
                "transports": list(self.transports),
            },
            "clientExtensionResults": {"credProps": {"rk": discoverable}} if cred_props else {},
        }
        self.credentials[cred_id] = credential
        return json.dumps(body), credential

    # --- navigator.credentials.get ------------------------------------------------------------

    def pick(self, options: Mapping[str, Any]) -> SoftCredential:
        """The credential a browser would use: one named in ``allowCredentials``, or a
        discoverable one for the RP when the list is empty."""
        rp = options["rpId"]
        allowed = [from_b64url(c["id"]) for c in options.get("allowCredentials") or ()]
        for credential in self.credentials.values():
            if credential.rp_id != rp:
                continue
            if allowed and credential.credential_id in allowed:
                return credential
            if not allowed and credential.discoverable:
                return credential
        raise LookupError("no credential of this authenticator fits the options")

    def assert_(
        self,
        options: Mapping[str, Any],
        credential: SoftCredential | None = None,
        *,
        origin: str | None = None,
        rp_id: str | None = None,
        challenge: str | None = None,
        client_type: str = "webauthn.get",
        up: bool = True,
        uv: bool = True,
        sign_count: int | None = None,
        user_handle: bytes | bool | None = True,
        tamper_signature: bool = False,
    ) -> str:
        """Answer request ``options`` (the ``publicKey`` member) with ``credential`` (or the one
        :meth:`pick` finds).

        ``sign_count`` overrides the counter (which otherwise grows by the credential's
        ``counter_step``); ``user_handle`` is ``True`` for the credential's own handle when it
        is discoverable (as authenticators do), ``None``/``False`` for none, or given bytes.
        """
        credential = credential if credential is not None else self.pick(options)
        if sign_count is None:
            credential.sign_count += credential.counter_step
            count = credential.sign_count
        else:
            count = sign_count
        rp = rp_id if rp_id is not None else options["rpId"]
        auth_data = (
            hashlib.sha256(rp.encode()).digest()
            + bytes([flags_byte(up=up, uv=uv, be=credential.backup_eligible, bs=credential.backed_up)])
            + count.to_bytes(4, "big")
        )
        client_data = self._client_data(
            client_type, challenge if challenge is not None else options["challenge"], origin
        )
        signed = auth_data + hashlib.sha256(client_data).digest()
        if tamper_signature:  # a well-formed signature over other bytes
            signed += b"tampered"
        signature = credential.private_key.sign(signed, ec.ECDSA(hashes.SHA256()))
        if user_handle is True:
            handle: bytes | None = credential.user_handle if credential.discoverable else None
        elif user_handle is False or user_handle is None:
            handle = None
        else:
            handle = user_handle
        body = {
            "id": credential.id,
            "rawId": credential.id,
            "type": "public-key",
            "authenticatorAttachment": "cross-platform",
            "response": {
                "clientDataJSON": b64url(client_data),
                "authenticatorData": b64url(auth_data),
                "signature": b64url(signature),
                "userHandle": None if handle is None else b64url(handle),
            },
            "clientExtensionResults": {},
        }
        return json.dumps(body)

    def _client_data(self, client_type: str, challenge: str, origin: str | None) -> bytes:
        return json.dumps(
            {
                "type": client_type,
                "challenge": challenge,
                "origin": origin if origin is not None else self.origin,
                "crossOrigin": False,
            },
            separators=(",", ":"),
        ).encode()
