"""The transport rules on ``requests``: a capped adapter that refuses redirects, reads the
body under a size cap and a total deadline, and names the kind of a transport failure."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from flask_authflow.federation._errors import ProviderUnreachable
from flask_authflow.federation._http._urls import check_provider_url, host_of

if TYPE_CHECKING:
    import requests
    import requests.adapters

__all__ = ["DEFAULT_TOTAL_TIMEOUT", "capped_adapter_class", "failure_kind"]

#: The longest one exchange (connect, send, headers and the whole body) may take, in seconds.
DEFAULT_TOTAL_TIMEOUT: Final = 15.0
_CHUNK: Final = 65_536


def failure_kind(exc: BaseException) -> str:
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
        raise ProviderUnreachable(f"{host}: {failure_kind(exc)}") from exc
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
def capped_adapter_class() -> Callable[..., requests.adapters.BaseAdapter]:
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
            host = host_of(url)
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
                raise ProviderUnreachable(f"{host}: {failure_kind(exc)}") from exc
            return _read_in_full(response, host, self.max_bytes, deadline)

        def close(self) -> None:
            self.inner.close()

        def __repr__(self) -> str:
            return f"<CappedAdapter max_bytes={self.max_bytes} inner={self.inner!r}>"

    return CappedAdapter
