"""What a provider answered (:class:`HttpResponse`), and the client protocol every
provider request goes through (:class:`HttpClient`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from flask_authflow._core.encoding import STRICT_JSON
from flask_authflow.federation._errors import ProviderUnreachable
from flask_authflow.federation._http._urls import host_of

if TYPE_CHECKING:
    import requests

    from flask_authflow.federation._mtls import ClientCertificate

__all__ = ["HttpClient", "HttpResponse", "ResponseHeaders"]


class ResponseHeaders(Mapping[str, str]):
    """Read-only response headers; names are matched case-insensitively."""

    __slots__ = ("_items",)

    def __init__(self, headers: Mapping[str, str] | None = None) -> None:
        items: dict[str, tuple[str, str]] = {}
        for name, value in (headers or {}).items():
            items[name.lower()] = (name, value)
        self._items = items

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()][1]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return (original for original, _ in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"ResponseHeaders({dict(self.items())!r})"


def _is_json_media_type(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json":
        return True
    kind, _, subtype = media.partition("/")
    return bool(kind) and subtype.endswith("+json") and len(subtype) > len("+json")


@dataclass(frozen=True)
class HttpResponse:
    """A provider's answer, read in full (within the size cap).

    ``headers`` is case-insensitive (any mapping given is wrapped). The body is kept out
    of ``repr``: it may carry claims or tokens.
    """

    status: int
    headers: Mapping[str, str]
    body: bytes = field(repr=False)
    url: str

    def __post_init__(self) -> None:
        if not isinstance(self.headers, ResponseHeaders):
            object.__setattr__(self, "headers", ResponseHeaders(self.headers))

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object.

        The ``Content-Type`` must be JSON (``application/json`` or any ``*/*+json``,
        such as ``application/jwk-set+json``) when the provider sends one; an answer
        without ``Content-Type`` is still parsed (lenient: some minimal servers leave it
        out, and the strict parse below refuses anything that is not a JSON object
        anyway). The body must be UTF-8 JSON; duplicate members, ``NaN`` and
        ``Infinity`` are refused.

        :raises ProviderUnreachable: "<host> did not answer a JSON object (...)"; the
            body is never quoted.
        """
        host = host_of(self.url)
        content_type = self.headers.get("content-type")
        if content_type is not None and not _is_json_media_type(content_type):
            media = content_type.split(";", 1)[0].strip()[:80]
            raise ProviderUnreachable(f"{host} did not answer a JSON object (Content-Type {media!r})")
        try:
            value = STRICT_JSON.decode(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise ProviderUnreachable(f"{host} did not answer a JSON object (not JSON)") from None
        if not isinstance(value, dict):
            raise ProviderUnreachable(
                f"{host} did not answer a JSON object (a JSON {type(value).__name__} instead)"
            )
        return value


# --- the client protocol ---------------------------------------------------------------------------


@runtime_checkable
class HttpClient(Protocol):
    """What federation needs from HTTP; inject another implementation in tests."""

    @property
    def timeout(self) -> tuple[float, float]:
        """``(connect, read)`` timeouts in seconds (each read; the total deadline is the client's own)."""
        ...

    def get(
        self, url: str, *, headers: Mapping[str, str] | None = None, tls: ClientCertificate | None = None
    ) -> HttpResponse:
        """GET ``url``; non-2xx statuses are returned. ``tls``: present this client
        certificate (mutual TLS, RFC 8705); callers pass it only when one is configured.

        :raises Discovery: ``url`` is not an acceptable provider URL.
        :raises ProviderUnreachable: timeout, connection or TLS failure, oversize answer,
            or a redirect.
        """
        ...

    def post_form(
        self,
        url: str,
        data: Mapping[str, str],
        *,
        headers: Mapping[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        tls: ClientCertificate | None = None,
    ) -> HttpResponse:
        """POST ``data`` form-encoded (``auth``: HTTP Basic user and password); like :meth:`get`."""
        ...

    def mount_into(self, session: requests.Session) -> None:
        """Make ``session`` (a ``requests.Session`` such as Authlib's ``OAuth2Session``)
        send through this client's transport: same adapters, size cap, URL check,
        default timeouts and no redirects."""
        ...
