"""The provider's names: the issuer it announces, and where its endpoints answer."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from flask_authflow.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class IssuerNames:
    """``base`` is the issuer URL without a final ``/`` (the endpoints hang below it), ``iss``
    the issuer as the provider names it (with the final ``/`` of ``trailing_slash``), ``prefix``
    the path of ``base`` (where the provider's routes start)."""

    base: str
    iss: str
    prefix: str

    @classmethod
    def parse(cls, issuer: str, *, trailing_slash: bool) -> IssuerNames:
        parts = urlsplit(issuer)
        if parts.scheme not in ("https", "http") or not parts.netloc or parts.query or parts.fragment:
            raise ConfigurationError("the issuer must be an absolute http(s) URL without query or fragment")
        base = issuer.rstrip("/") if parts.path not in ("", "/") else f"{parts.scheme}://{parts.netloc}"
        return cls(base, base + "/" if trailing_slash else base, urlsplit(base).path)

    def endpoint(self, name: str) -> str:
        """The URL of endpoint ``name`` (``token``, ``par``, ``userinfo``...)."""
        return f"{self.base}/{name}"

    @property
    def origin(self) -> str:
        """Scheme and host, with a trailing slash: where a ``requests`` adapter is mounted."""
        parts = urlsplit(self.base)
        return f"{parts.scheme}://{parts.netloc}/"
