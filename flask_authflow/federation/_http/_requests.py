""":class:`RequestsHttpClient`: the provider HTTP client on a :class:`requests.Session`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from flask_authflow.errors import MissingExtraError
from flask_authflow.federation._errors import ProviderUnreachable
from flask_authflow.federation._http._response import HttpResponse, ResponseHeaders
from flask_authflow.federation._http._transport import (
    DEFAULT_TOTAL_TIMEOUT,
    capped_adapter_class,
    failure_kind,
)
from flask_authflow.federation._http._urls import check_provider_url, host_of

if TYPE_CHECKING:
    import requests

    from flask_authflow.federation._mtls import ClientCertificate

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_MAX_BYTES", "DEFAULT_READ_TIMEOUT", "RequestsHttpClient"]

DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_READ_TIMEOUT: Final = 10.0
#: The largest answer accepted from a provider, in bytes (after content decoding).
DEFAULT_MAX_BYTES: Final = 1_048_576
_USER_AGENT: Final = "flask-authflow"


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
        capped = capped_adapter_class()
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
            raise ProviderUnreachable(f"{host_of(url)}: {failure_kind(exc)}") from exc
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
