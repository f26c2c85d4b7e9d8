"""Reaching a Flask app in-process through ``requests``: the transport adapter the provider's
:meth:`~TestOpenIDProvider.requests_adapter` mounts, and a helper for redirect assertions."""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from flask import Flask

if TYPE_CHECKING:
    import requests
    import requests.adapters


class _RawBody:
    """The in-memory body as ``response.raw``: the urllib3 reading calls clients use (size caps)."""

    def __init__(self, content: bytes) -> None:
        self._buffer = io.BytesIO(content)
        self.closed = False

    def read(self, amt: int | None = None, decode_content: bool | None = None, **_: Any) -> bytes:
        return self._buffer.read(amt)

    def stream(self, amt: int = 65536, decode_content: bool | None = None) -> Iterator[bytes]:
        while chunk := self._buffer.read(amt):
            yield chunk

    def release_conn(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def wsgi_adapter(app: Flask) -> requests.adapters.BaseAdapter:
    """A ``requests`` adapter serving any Flask app in-process (to emulate providers that are
    not OpenID providers, such as a plain OAuth 2.0 provider's user API)."""
    import requests
    import requests.adapters
    from requests.structures import CaseInsensitiveDict
    from requests.utils import get_encoding_from_headers

    class _WsgiAdapter(requests.adapters.BaseAdapter):
        """Serves a WSGI app in-process: the request never touches a socket."""

        def send(
            self,
            request: requests.PreparedRequest,
            stream: bool = False,
            timeout: float | tuple[float, float] | tuple[float, None] | None = None,
            verify: bool | str = True,
            cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
            proxies: Mapping[str, str] | None = None,
        ) -> requests.Response:
            url = request.url or ""
            parts = urlsplit(url)
            body = request.body
            data = body.encode("utf-8") if isinstance(body, str) else (body or b"")
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            with app.test_client() as client:
                answer = client.open(
                    parts.path or "/",
                    base_url=f"{parts.scheme}://{parts.netloc}",
                    query_string=parts.query,
                    method=request.method or "GET",
                    headers=headers,
                    data=data,
                )
                content = answer.get_data()
                status = answer.status_code
                reason = answer.status.partition(" ")[2]
                resp_headers: Sequence[tuple[str, str]] = list(answer.headers.items())
            response = requests.Response()
            response.status_code = status
            response.reason = reason
            response.headers = CaseInsensitiveDict(dict(resp_headers))
            response.encoding = get_encoding_from_headers(response.headers)
            response._content = content
            response._content_consumed = True  # type: ignore[attr-defined]
            response.raw = _RawBody(content)
            response.url = url
            response.request = request
            response.connection = self  # type: ignore[assignment]
            return response

        def close(self) -> None:
            return None

    return _WsgiAdapter()


def query_params(url: str) -> dict[str, str]:
    """The query parameters of ``url`` as a dict (last one wins); handy for redirect assertions."""
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
