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
  :class:`~flask_authflow.federation.mtls.ClientCertificate`) passes the client
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

import functools
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable
from urllib.parse import urlsplit

from flask_authflow.core.encoding import STRICT_JSON
from flask_authflow.errors import MissingExtraError
from flask_authflow.federation.errors import Discovery, ProviderUnreachable

if TYPE_CHECKING:
    import requests
    import requests.adapters

    from flask_authflow.federation.mtls import ClientCertificate

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

DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_READ_TIMEOUT: Final = 10.0
#: The longest one exchange (connect, send, headers and the whole body) may take, in seconds.
DEFAULT_TOTAL_TIMEOUT: Final = 15.0
#: The largest answer accepted from a provider, in bytes (after content decoding).
DEFAULT_MAX_BYTES: Final = 1_048_576
#: Hosts on which plain http is allowed (development servers and tests).
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "::1", "localhost"})
_MAX_URL_LENGTH: Final = 4096
_CHUNK: Final = 65_536
_USER_AGENT: Final = "flask-authflow"


# --- URLs ------------------------------------------------------------------------------------------


def _shown(url: str) -> str:
    """``url`` as it may appear in a message (bounded length)."""
    return url if len(url) <= 200 else url[:200] + "..."


def check_provider_url(
    url: str, what: str = "provider URL", *, error: Callable[[str], Exception] = Discovery
) -> str:
    """Return ``url`` when a provider may be reached at it (or redirected back to it).

    Accepted: ``https://host/...``, and ``http://`` on a loopback host only
    (:data:`LOOPBACK_HOSTS`). Refused: other schemes, http elsewhere, a URL without a
    host, with credentials (``https://user:pw@host``), with a fragment, with whitespace,
    control characters or backslashes (which parsers disagree on).

    :param what: the name of the setting or document field, for the message.
    :param error: the exception class to raise, called with the message (e.g.
        :class:`~flask_authflow.errors.ConfigurationError` when checking configuration).
    :raises Discovery: (by default) naming ``what`` (``jwks_uri``, ``token_endpoint``,
        ...); the message never repeats credentials.
    """
    refusal = f"{what} must be an https URL (http only on loopback)"
    if not isinstance(url, str) or not url:
        raise error(f"{refusal}: {url!r}")
    if len(url) > _MAX_URL_LENGTH:
        raise error(f"{what} is longer than {_MAX_URL_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F or ch == "\\" for ch in url):
        raise error(f"{what} contains whitespace, control characters or a backslash")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # a malformed port raises ValueError
    except ValueError:
        raise error(f"{refusal}: {_shown(url)}") from None
    if "@" in parts.netloc:
        raise error(f"{what} must not carry credentials (user:password@host)")
    if not host:
        raise error(f"{refusal}: {_shown(url)}")
    if parts.scheme == "https" or (parts.scheme == "http" and host in LOOPBACK_HOSTS):
        if "#" in url:
            raise error(f"{what} must not have a fragment: {_shown(url)}")
        return url
    raise error(f"{refusal}: {_shown(url)}")


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or "the provider"
    except ValueError:
        return "the provider"


# --- responses -------------------------------------------------------------------------------------


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
        host = _host(self.url)
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


# --- the requests implementation -------------------------------------------------------------------


def _failure_kind(exc: BaseException) -> str:
    """What went wrong, in words, from a ``requests`` exception (never its message)."""
    import requests
    from urllib3.exceptions import ReadTimeoutError

    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return "timed out connecting"
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return "timed out reading the answer"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS failure (certificate or handshake)"
    if isinstance(exc, requests.exceptions.ProxyError):
        return "proxy failure"
    if isinstance(exc, requests.exceptions.ConnectionError):
        if any(isinstance(arg, ReadTimeoutError) for arg in exc.args):
            return "timed out reading the answer"  # raised while the body streams in
        return "connection failed"
    if isinstance(exc, requests.exceptions.ChunkedEncodingError | requests.exceptions.ContentDecodingError):
        return "malformed answer"
    return f"request failed ({type(exc).__name__})"


def _bound_socket(raw: Any, deadline: float) -> None:
    """Make the next read of ``raw`` (a urllib3 response) wait no longer than ``deadline``."""
    sock = getattr(getattr(raw, "connection", None), "sock", None)
    settimeout = getattr(sock, "settimeout", None)
    if callable(settimeout):
        settimeout(max(0.01, deadline - time.monotonic()))


def _chunks(response: requests.Response, host: str, deadline: float) -> Iterator[bytes]:
    """The body of a streamed ``response`` as it arrives, cut off at ``deadline`` (monotonic)."""
    raw = response.raw
    read1 = getattr(raw, "read1", None)
    if read1 is None or not hasattr(getattr(raw, "_fp", None), "read1"):
        # Not a socket (an in-process or mocked transport): read as requests does.
        yield from response.iter_content(chunk_size=_CHUNK)
        return
    while True:
        if time.monotonic() >= deadline:
            raise ProviderUnreachable(f"{host}: the answer took longer than the total deadline")
        _bound_socket(raw, deadline)
        chunk = read1(_CHUNK, decode_content=True)
        if not chunk:
            return
        yield chunk


def _read_capped(response: requests.Response, host: str, max_bytes: int, deadline: float) -> bytes:
    """The whole body of a streamed ``response``, refused when it redirects, exceeds
    ``max_bytes`` or is not complete by ``deadline``."""
    import requests
    import urllib3.exceptions

    status = response.status_code
    if 300 <= status < 400:
        raise ProviderUnreachable(
            f"{host} answered a redirect (HTTP {status}); provider requests never follow redirects"
        )
    declared = response.headers.get("Content-Length", "").strip()
    if declared.isdigit() and int(declared) > max_bytes:
        raise ProviderUnreachable(f"{host} answered {int(declared)} bytes, over the {max_bytes}-byte limit")
    body = bytearray()
    try:
        for chunk in _chunks(response, host, deadline):
            body += chunk
            if len(body) > max_bytes:
                raise ProviderUnreachable(f"{host} answered more than the {max_bytes}-byte limit")
    except requests.exceptions.RequestException as exc:
        raise ProviderUnreachable(f"{host}: {_failure_kind(exc)}") from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        timed_out = isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError)
        kind = "timed out reading the answer" if timed_out else "malformed answer"
        raise ProviderUnreachable(f"{host}: {kind}") from exc
    return bytes(body)


def _read_in_full(
    response: requests.Response, host: str, max_bytes: int, deadline: float
) -> requests.Response:
    """``response`` with its whole body read (capped, by ``deadline``), as requests leaves
    it after a non-streamed read; closed when reading fails."""
    try:
        body = _read_capped(response, host, max_bytes, deadline)
    except BaseException:
        response.close()
        raise
    response._content = body
    response._content_consumed = True  # type: ignore[attr-defined]
    return response


@functools.cache
def _capped_adapter_class() -> Callable[..., requests.adapters.BaseAdapter]:
    import requests
    import requests.adapters

    class CappedAdapter(requests.adapters.BaseAdapter):
        """Wraps a transport adapter with the rules of provider traffic (module docstring)."""

        def __init__(
            self,
            inner: requests.adapters.BaseAdapter,
            *,
            max_bytes: int,
            timeout: tuple[float, float],
            total: float = DEFAULT_TOTAL_TIMEOUT,
        ) -> None:
            super().__init__()
            self.inner = inner
            self.max_bytes = max_bytes
            self.timeout = timeout
            self.total = total

        def send(
            self,
            request: requests.PreparedRequest,
            stream: bool = False,
            timeout: float | tuple[float, float] | tuple[float, None] | None = None,
            verify: bool | str = True,
            cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
            proxies: Mapping[str, str] | None = None,
        ) -> requests.Response:
            url = check_provider_url(request.url or "", "request URL")
            host = _host(url)
            deadline = time.monotonic() + self.total
            connect, read = self.timeout
            try:
                response = self.inner.send(
                    request,
                    stream=True,
                    timeout=(connect, min(read, self.total)),
                    verify=verify,
                    cert=cert,
                    proxies=proxies,
                )
            except requests.exceptions.RequestException as exc:
                raise ProviderUnreachable(f"{host}: {_failure_kind(exc)}") from exc
            return _read_in_full(response, host, self.max_bytes, deadline)

        def close(self) -> None:
            self.inner.close()

        def __repr__(self) -> str:
            return f"<CappedAdapter max_bytes={self.max_bytes} inner={self.inner!r}>"

    return CappedAdapter


class RequestsHttpClient:
    """:class:`HttpClient` on a :class:`requests.Session` (thread-safe for these calls).

    ``adapters`` maps URL prefixes to transport adapters (the in-process test provider's
    ``provider.http_adapters()``, a ``requests_mock.Adapter``); each is wrapped with the
    same rules as the default ``https://`` and ``http://`` transports. The session keeps
    no cookies: provider requests carry only what the caller passes.

    :raises MissingExtraError: ``requests`` is not installed (``pip install
        'flask-authflow[oidc]'``).
    """

    def __init__(
        self,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        total_timeout: float = DEFAULT_TOTAL_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        adapters: Mapping[str, requests.adapters.BaseAdapter] | None = None,
    ) -> None:
        try:
            import requests
            import requests.adapters
        except ModuleNotFoundError as exc:
            raise MissingExtraError("oidc", exc.name or "requests") from exc
        from http.cookiejar import DefaultCookiePolicy

        timeouts = (
            ("connect_timeout", connect_timeout),
            ("read_timeout", read_timeout),
            ("total_timeout", total_timeout),
        )
        for name, value in timeouts:
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 3600:
                raise ValueError(f"{name} must be a number of seconds between 0 and 3600")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError("max_bytes must be a positive number of bytes")
        self._timeout = (float(connect_timeout), float(read_timeout))
        self.total_timeout = float(total_timeout)
        self.max_bytes = max_bytes
        capped = _capped_adapter_class()
        session = requests.Session()
        session.max_redirects = 0
        session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))  # keep no cookies
        session.headers["User-Agent"] = _USER_AGENT
        self._mounted: dict[str, requests.adapters.BaseAdapter] = {}
        transports: dict[str, requests.adapters.BaseAdapter] = {
            "https://": requests.adapters.HTTPAdapter(),
            "http://": requests.adapters.HTTPAdapter(),
        }
        transports.update(adapters or {})
        for prefix, inner in transports.items():
            adapter = capped(inner, max_bytes=max_bytes, timeout=self._timeout, total=self.total_timeout)
            self._mounted[prefix] = adapter
            session.mount(prefix, adapter)
        self._session = session

    @property
    def timeout(self) -> tuple[float, float]:
        return self._timeout

    def get(
        self, url: str, *, headers: Mapping[str, str] | None = None, tls: ClientCertificate | None = None
    ) -> HttpResponse:
        return self._request("GET", url, headers=headers, tls=tls)

    def post_form(
        self,
        url: str,
        data: Mapping[str, str],
        *,
        headers: Mapping[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        tls: ClientCertificate | None = None,
    ) -> HttpResponse:
        return self._request("POST", url, headers=headers, data=dict(data), auth=auth, tls=tls)

    def mount_into(self, session: requests.Session) -> None:
        for prefix, adapter in self._mounted.items():
            session.mount(prefix, adapter)
        session.max_redirects = 0

    def _request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None,
        data: dict[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        tls: ClientCertificate | None = None,
    ) -> HttpResponse:
        import requests

        check_provider_url(url)
        tls_options: dict[str, Any] = {} if tls is None else {"cert": tls.cert, "verify": tls.verify}
        try:
            response = self._session.request(
                method,
                url,
                headers=dict(headers or {}),
                data=data,
                auth=auth,
                timeout=self._timeout,
                allow_redirects=False,
                **tls_options,
            )
        except requests.exceptions.RequestException as exc:
            raise ProviderUnreachable(f"{_host(url)}: {_failure_kind(exc)}") from exc
        try:
            return HttpResponse(
                status=response.status_code,
                headers=ResponseHeaders(response.headers),
                body=response.content,
                url=url,
            )
        finally:
            response.close()

    def close(self) -> None:
        """Close the pooled connections."""
        self._session.close()

    def __repr__(self) -> str:
        return (
            f"<RequestsHttpClient timeout={self._timeout!r} max_bytes={self.max_bytes} "
            f"prefixes={sorted(self._mounted)!r}>"
        )
