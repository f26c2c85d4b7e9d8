"""The HTTP layer of provider traffic: URL checks, timeouts, size caps, no redirects, JSON answers."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
import requests_mock
from authlib.integrations.requests_client import OAuth2Session

from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._errors import Discovery, ProviderUnreachable
from flask_authflow.federation._http import (
    HttpClient,
    HttpResponse,
    RequestsHttpClient,
    ResponseHeaders,
    check_provider_url,
)
from flask_authflow.testing._provider import TestOpenIDProvider

OP = "https://op.test"
JSON = {"Content-Type": "application/json"}


class Endless(io.RawIOBase):
    """A long response body (4 MB unless told); counts what was read from it."""

    def __init__(self, fill: bytes = b"x", limit: int = 4_000_000) -> None:
        self.fill = fill
        self.limit = limit  # ends after all: a client without a cap fails the test instead of hanging
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        size = min(len(buffer), self.limit - self.read_bytes)
        buffer[:size] = (self.fill * size)[:size]
        self.read_bytes += size
        return size


def last(mock: requests_mock.Adapter) -> Any:
    """The latest request the mock transport received."""
    request = mock.last_request
    assert request is not None, "no request reached the transport"
    return request


@pytest.fixture
def mock() -> requests_mock.Adapter:
    return requests_mock.Adapter()


@pytest.fixture
def client(mock: requests_mock.Adapter) -> RequestsHttpClient:
    return RequestsHttpClient(adapters={"https://": mock, "http://": mock}, max_bytes=10_000)


# --- URL checks ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://op.example/.well-known/openid-configuration",
        "https://op.example:8443/jwks?version=2",
        "http://127.0.0.1:8080/jwks",
        "http://localhost/auth/callback/op",
        "HTTP://LOCALHOST:5000/cb",
        "http://[::1]:9000/token",
    ],
)
def test_https_and_loopback_http_urls_are_accepted(url: str) -> None:
    assert check_provider_url(url, "jwks_uri") == url


@pytest.mark.parametrize(
    "url",
    [
        "http://op.example/jwks",  # plain http elsewhere
        "http://127.0.0.2/jwks",  # only the listed loopback hosts
        "http://127.1/jwks",
        "http://localhost.evil.test/jwks",
        "http://[::2]/jwks",
        "ftp://op.example/jwks",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "op.example/jwks",
        "https:///jwks",  # no host
        "https://:443/jwks",
        "https://op.example:99999/jwks",  # no such port
        "https://op.example/jwks#keys",  # fragment
        "https://op.example/jwks ",
        "https://op.example\\@evil.test/jwks",  # parsers disagree on backslashes
        "https://op.example/\njwks",
        "",
    ],
)
def test_other_urls_are_refused_naming_what(url: str) -> None:
    with pytest.raises(Discovery, match=r"^jwks_uri "):
        check_provider_url(url, "jwks_uri")


@pytest.mark.parametrize("url", ["https://alice:hunter2@op.example/jwks", "https://alice@op.example/jwks"])
def test_urls_with_credentials_are_refused_without_repeating_them(url: str) -> None:
    with pytest.raises(Discovery, match="credentials") as caught:
        check_provider_url(url, "token_endpoint")
    assert "hunter2" not in caught.value.message and "alice" not in caught.value.message


def test_the_error_class_can_be_chosen_for_configuration_checks() -> None:
    with pytest.raises(ConfigurationError, match=r"^discovery_url must be an https URL"):
        check_provider_url(
            "http://op.example/.well-known/openid-configuration", "discovery_url", error=ConfigurationError
        )
    with pytest.raises(ConfigurationError, match="credentials"):
        check_provider_url("https://a:b@op.example/", "redirect_uri", error=ConfigurationError)
    assert check_provider_url("https://op.example/", error=ConfigurationError) == "https://op.example/"


def test_refused_urls_never_reach_the_transport(
    client: RequestsHttpClient, mock: requests_mock.Adapter
) -> None:
    mock.register_uri(requests_mock.ANY, requests_mock.ANY, text="{}")
    for url in ("http://op.example/jwks", "https://u:p@op.example/jwks", "ftp://op.example/jwks"):
        with pytest.raises(Discovery):
            client.get(url)
        with pytest.raises(Discovery):
            client.post_form(url, {"a": "b"})
    assert mock.call_count == 0


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/jwks", "http://localhost/jwks", "http://[::1]:9000/jwks"]
)
def test_http_on_loopback_reaches_the_transport(
    client: RequestsHttpClient, mock: requests_mock.Adapter, url: str
) -> None:
    mock.register_uri("GET", url, json={"keys": []}, headers=JSON)
    assert client.get(url).json_object() == {"keys": []}
    assert mock.call_count == 1


# --- answers -------------------------------------------------------------------------------------


def test_an_answer_is_read_whole_with_the_timeouts(mock: requests_mock.Adapter) -> None:
    mock.register_uri("GET", f"{OP}/jwks", json={"keys": []}, headers={"content-type": "application/json"})
    client = RequestsHttpClient(adapters={f"{OP}/": mock}, connect_timeout=2, read_timeout=3)
    assert isinstance(client, HttpClient)
    answer = client.get(f"{OP}/jwks", headers={"Accept": "application/json"})
    assert answer.status == 200 and answer.url == f"{OP}/jwks"
    assert answer.headers["Content-Type"] == answer.headers["CONTENT-TYPE"] == "application/json"
    assert answer.body == b'{"keys": []}'
    assert client.timeout == (2.0, 3.0)
    assert last(mock).timeout == (2.0, 3.0)
    assert last(mock).headers["Accept"] == "application/json"


def test_error_statuses_are_returned_not_raised(
    client: RequestsHttpClient, mock: requests_mock.Adapter
) -> None:
    mock.register_uri("GET", f"{OP}/jwks", status_code=503, text="maintenance")
    mock.register_uri("GET", f"{OP}/userinfo", status_code=401, json={"error": "invalid_token"}, headers=JSON)
    down = client.get(f"{OP}/jwks")
    assert (down.status, down.body) == (503, b"maintenance")
    with pytest.raises(ProviderUnreachable, match="did not answer a JSON object"):
        down.json_object()
    refused = client.get(f"{OP}/userinfo")
    assert refused.status == 401 and refused.json_object() == {"error": "invalid_token"}


def test_post_form_sends_the_form_and_basic_auth(
    client: RequestsHttpClient, mock: requests_mock.Adapter
) -> None:
    mock.register_uri("POST", f"{OP}/token", status_code=400, json={"error": "invalid_grant"}, headers=JSON)
    answer = client.post_form(
        f"{OP}/token", {"grant_type": "authorization_code", "code": "c 1"}, auth=("app", "s3")
    )
    assert answer.status == 400 and answer.json_object()["error"] == "invalid_grant"
    sent = last(mock)
    assert sent.method == "POST" and sent.text == "grant_type=authorization_code&code=c+1"
    assert sent.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert sent.headers["Authorization"] == "Basic YXBwOnMz"  # app:s3


def test_the_body_stays_out_of_repr() -> None:
    answer = HttpResponse(
        200, {"Content-Type": "application/json"}, b'{"email": "alice@example.com"}', f"{OP}/x"
    )
    assert "alice" not in repr(answer)
    assert answer.headers["content-type"] == "application/json"  # a plain dict is made case-insensitive
    assert isinstance(answer.headers, ResponseHeaders) and "CONTENT-TYPE" in answer.headers


# --- transport failures --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (requests.exceptions.ConnectTimeout, "timed out connecting"),
        (requests.exceptions.ReadTimeout, "timed out reading"),
        (requests.exceptions.SSLError, "TLS failure"),
        (requests.exceptions.ConnectionError, "connection failed"),
        (requests.exceptions.ChunkedEncodingError, "malformed answer"),
    ],
)
def test_transport_failures_name_the_host_and_the_kind(
    client: RequestsHttpClient, mock: requests_mock.Adapter, error: type[Exception], kind: str
) -> None:
    mock.register_uri("GET", f"{OP}/jwks?secret-query", exc=error("boom at /jwks?secret-query"))
    with pytest.raises(ProviderUnreachable, match=rf"^op\.test: {kind}") as caught:
        client.get(f"{OP}/jwks?secret-query")
    assert "secret-query" not in caught.value.message


def test_a_read_timeout_while_the_body_streams_in(
    client: RequestsHttpClient, mock: requests_mock.Adapter
) -> None:
    class Stalls(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            raise TimeoutError("the socket timed out")

    mock.register_uri("GET", f"{OP}/jwks", body=Stalls())
    with pytest.raises(ProviderUnreachable, match=r"^op\.test: timed out reading the answer$"):
        client.get(f"{OP}/jwks")


# --- size cap ------------------------------------------------------------------------------------


def test_oversize_is_refused_early_when_content_length_says_so(
    client: RequestsHttpClient, mock: requests_mock.Adapter
) -> None:
    body = Endless()
    mock.register_uri("GET", f"{OP}/jwks", body=body, headers={"Content-Length": "10001"})
    with pytest.raises(ProviderUnreachable, match="10001 bytes, over the 10000-byte limit"):
        client.get(f"{OP}/jwks")
    assert body.read_bytes == 0  # refused before reading


def test_oversize_is_refused_while_reading_without_content_length(
    client: RequestsHttpClient, mock: requests_mock.Adapter
) -> None:
    body = Endless(b"secret-marker ")
    mock.register_uri("GET", f"{OP}/jwks", body=body)
    with pytest.raises(ProviderUnreachable, match="more than the 10000-byte limit") as caught:
        client.get(f"{OP}/jwks")
    assert 10_000 < body.read_bytes <= 10_000 + 65_536  # it stopped after the cap, not at the end
    assert "secret-marker" not in str(caught.value)


def test_an_answer_of_exactly_the_cap_is_accepted(
    client: RequestsHttpClient, mock: requests_mock.Adapter
) -> None:
    mock.register_uri("GET", f"{OP}/a", content=b"x" * 10_000)
    mock.register_uri("GET", f"{OP}/b", content=b"x" * 10_001)
    assert len(client.get(f"{OP}/a").body) == 10_000
    with pytest.raises(ProviderUnreachable, match="limit"):
        client.get(f"{OP}/b")


# --- redirects -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "location", ["https://evil.test/jwks", f"{OP}/other-jwks", "/other-jwks", "http://127.0.0.1/jwks"]
)
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_refused_to_any_host(
    client: RequestsHttpClient, mock: requests_mock.Adapter, location: str, status: int
) -> None:
    target = mock.register_uri(requests_mock.ANY, requests_mock.ANY, json={"keys": []}, headers=JSON)
    mock.register_uri("GET", f"{OP}/jwks", status_code=status, headers={"Location": location})
    with pytest.raises(ProviderUnreachable, match=rf"^op\.test answered a redirect \(HTTP {status}\)"):
        client.get(f"{OP}/jwks")
    assert mock.call_count == 1 and not target.called


# --- JSON answers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type", [None, "application/json", "application/json; charset=utf-8", "application/jwk-set+json"]
)
def test_json_objects_are_read(content_type: str | None) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}
    assert HttpResponse(200, headers, b'{"keys": [1]}', f"{OP}/jwks").json_object() == {"keys": [1]}


@pytest.mark.parametrize(
    ("body", "content_type", "why"),
    [
        (b"<html>sign in</html>", "text/html", "Content-Type 'text/html'"),
        (b'{"keys": []}', "text/html", "Content-Type"),  # JSON-looking, announced as HTML
        (b'{"keys": []}', "application/jsonp", "Content-Type"),
        (b'{"keys": []}', "text/plain", "Content-Type"),
        (b"<html>sign in</html>", "application/json", "not JSON"),
        (b'[{"kty": "RSA"}]', "application/json", "a JSON list"),
        (b'"keys"', "application/json", "a JSON str"),
        (b"null", "application/json", "a JSON NoneType"),
        (b'{"keys": [], "keys": [1]}', "application/json", "not JSON"),  # duplicate member
        (b'{"n": NaN}', "application/json", "not JSON"),
        (b'{"a": "\xff"}', "application/json", "not JSON"),  # not UTF-8
        (b"[" * 100_000 + b"]" * 100_000, None, "not JSON"),  # nesting beyond the recursion limit
        (b"", None, "not JSON"),
    ],
)
def test_answers_that_are_not_json_objects_are_refused(
    body: bytes, content_type: str | None, why: str
) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}
    with pytest.raises(ProviderUnreachable, match=r"^op\.test did not answer a JSON object") as caught:
        HttpResponse(200, headers, body, f"{OP}/jwks").json_object()
    assert why in caught.value.message
    assert "sign in" not in caught.value.message


# --- the in-process provider ---------------------------------------------------------------------


def test_the_in_process_provider_is_reached_through_its_adapters() -> None:
    provider = TestOpenIDProvider()
    client = RequestsHttpClient(adapters=provider.http_adapters())
    document = client.get(provider.discovery_url).json_object()
    assert document["issuer"] == provider.issuer
    jwks = client.get(document["jwks_uri"])
    assert jwks.headers["cache-control"] == "max-age=0"
    assert [key["kid"] for key in jwks.json_object()["keys"]] == [provider.current_kid]
    # The cap applies to in-process answers too.
    tiny = RequestsHttpClient(adapters=provider.http_adapters(), max_bytes=100)
    with pytest.raises(ProviderUnreachable, match="over the 100-byte limit"):
        tiny.get(provider.discovery_url)


# --- mount_into: Authlib's session obeys the same rules ------------------------------------------


def _oauth(client: RequestsHttpClient) -> OAuth2Session:
    session = OAuth2Session(
        client_id="app", client_secret="s3", token_endpoint_auth_method="client_secret_basic"
    )
    client.mount_into(session)
    return session


def test_a_mounted_oauth_session_fetches_a_token(
    client: RequestsHttpClient, mock: requests_mock.Adapter
) -> None:
    mock.register_uri(
        "POST",
        f"{OP}/token",
        json={"access_token": "at", "token_type": "Bearer", "id_token": "x.y.z"},
        headers=JSON,
    )
    token = _oauth(client).fetch_token(f"{OP}/token", grant_type="authorization_code", code="c")
    assert token["access_token"] == "at"
    assert last(mock).timeout == client.timeout  # the default timeouts apply when none is given
    assert last(mock).headers["Authorization"].startswith("Basic ")


def test_a_mounted_oauth_session_does_not_follow_redirects(
    client: RequestsHttpClient, mock: requests_mock.Adapter
) -> None:
    stolen = mock.register_uri("POST", "https://evil.test/token", json={"access_token": "x"}, headers=JSON)
    mock.register_uri("POST", f"{OP}/token", status_code=307, headers={"Location": "https://evil.test/token"})
    with pytest.raises(ProviderUnreachable, match="redirect"):
        _oauth(client).fetch_token(f"{OP}/token", grant_type="authorization_code", code="c")
    assert not stolen.called


def test_a_mounted_oauth_session_obeys_the_size_cap_and_url_rules(
    client: RequestsHttpClient, mock: requests_mock.Adapter
) -> None:
    body = Endless()
    mock.register_uri("POST", f"{OP}/token", body=body)
    mock.register_uri("POST", "http://op.example/token", json={"access_token": "x"}, headers=JSON)
    with pytest.raises(ProviderUnreachable, match="limit"):
        _oauth(client).fetch_token(f"{OP}/token", grant_type="authorization_code", code="c")
    assert body.read_bytes <= 10_000 + 65_536
    with pytest.raises(Discovery):
        _oauth(client).fetch_token("http://op.example/token", grant_type="authorization_code", code="c")
    mock.register_uri("POST", f"{OP}/slow", exc=requests.exceptions.ReadTimeout)
    with pytest.raises(ProviderUnreachable, match="timed out reading"):
        _oauth(client).fetch_token(f"{OP}/slow", grant_type="authorization_code", code="c")


# --- a real socket on loopback -------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    release: threading.Event

    def do_GET(self) -> None:
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"x" * 16_384
            try:
                for _ in range(256):  # 4 MiB unless the client hangs up first
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
        elif self.path == "/slow":
            self.release.wait(10)  # never answers: the client gives up first
            self.close_connection = True
        elif self.path == "/set-cookie":
            self.send_response(200)
            self.send_header("Set-Cookie", "tracker=1; Path=/")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
        elif self.path == "/echo-cookie":
            body = json.dumps({"cookie": self.headers.get("Cookie")}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "11")
            self.end_headers()
            self.wfile.write(b'{"ok":true}')

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def loopback() -> Iterator[str]:
    release = threading.Event()
    handler = type("Handler", (_Handler,), {"release": release})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    release.set()
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_a_real_chunked_answer_over_the_cap_is_cut_off(loopback: str) -> None:
    client = RequestsHttpClient(max_bytes=100_000)
    with pytest.raises(ProviderUnreachable, match=r"^127\.0\.0\.1 answered more than the 100000-byte limit$"):
        client.get(f"{loopback}/chunked")
    assert RequestsHttpClient(max_bytes=11).get(f"{loopback}/small").body == b'{"ok":true}'


def test_cookies_are_not_kept_between_requests(loopback: str) -> None:
    client = RequestsHttpClient()
    assert "tracker" in client.get(f"{loopback}/set-cookie").headers["Set-Cookie"]
    assert client.get(f"{loopback}/echo-cookie").json_object() == {"cookie": None}
    # The same exchange through a plain requests session does send the cookie back.
    plain = requests.Session()
    plain.get(f"{loopback}/set-cookie", timeout=5)
    assert plain.get(f"{loopback}/echo-cookie", timeout=5).json() == {"cookie": "tracker=1"}


def test_a_real_read_timeout(loopback: str) -> None:
    client = RequestsHttpClient(read_timeout=0.2)
    with pytest.raises(ProviderUnreachable, match=r"^127\.0\.0\.1: timed out reading the answer$"):
        client.get(f"{loopback}/slow")


def test_a_refused_connection() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ProviderUnreachable, match=r"^127\.0\.0\.1: connection failed$"):
        RequestsHttpClient().get(f"http://127.0.0.1:{port}/jwks")


# --- construction --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"connect_timeout": 0},
        {"read_timeout": -1},
        {"read_timeout": True},
        {"max_bytes": 0},
        {"max_bytes": 1.5},
    ],
)
def test_bad_limits_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RequestsHttpClient(**options)


@pytest.mark.slow  # a fresh interpreter
def test_the_module_imports_without_requests_and_names_the_extra() -> None:
    program = (
        "import sys; sys.modules['requests'] = None\n"
        "from flask_authflow.errors import MissingExtraError\n"
        "from flask_authflow.federation._http import RequestsHttpClient, check_provider_url\n"
        "assert check_provider_url('https://op.example/jwks') == 'https://op.example/jwks'\n"
        "try:\n"
        "    RequestsHttpClient()\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert "flask-authflow[oidc]" in out.stdout
