"""The http node's client (E11) against a real HTTP(S) server on loopback: what it sends, the
SSRF policy on every hop, the connection pinned to the checked address with Host and TLS
server name kept, redirects, the streamed size cap, timeouts and connection failures."""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
from collections.abc import Iterator, Sequence

import httpx
import pytest
import trustme

from plaita.adapters.http.client import HttpxClient
from plaita.domain.failures import (
    HttpConnectionError,
    HttpResponseTooLargeError,
    HttpTargetBlockedError,
    HttpTlsError,
)
from plaita.domain.http_calls import ExpectedStatuses, HttpRequest, build_request

from .http_server import LoopbackServer, serve

TLS_NAME = "api.plaita-test.example"
#: A public address (example.com's) that the NAT transport below sends to the loopback server.
PUBLIC = "93.184.216.34"
CAP = 1024 * 1024


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with serve() as running:
        yield running


def request(
    url: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: object = None,
    block_private: bool = False,
    expect: Sequence[int | str] | None = None,
) -> HttpRequest:
    return build_request(
        node_id="call",
        method=method,
        url=url,
        headers=headers or {},
        body=body,
        block_private=block_private,
        expected=ExpectedStatuses.parse(expect),
    )


def send(client: HttpxClient, req: HttpRequest, *, timeout: float = 5.0, cap: int = CAP):
    return asyncio.run(client.send(req, timeout_seconds=timeout, max_response_bytes=cap))


def resolver(table: dict[str, list[str]]):
    async def resolve(host: str, port: int) -> list[str]:
        return table[host]

    return resolve


class Nat(httpx.AsyncBaseTransport):
    """Sends connections for ``PUBLIC`` to 127.0.0.1: a public target that is a loopback
    server, so the policy can be on for the first hop of a redirect."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == PUBLIC:
            request.url = request.url.copy_with(host="127.0.0.1")
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def test_a_json_answer_comes_back_with_status_headers_and_body(server: LoopbackServer) -> None:
    response = send(HttpxClient(), request(server.url("/json")))
    assert (response.status, response.body) == (200, b'{"ok": true}')
    assert response.header("Content-Type") == "application/json"


def test_method_headers_and_a_json_body_are_sent_as_written(server: LoopbackServer) -> None:
    req = request(
        server.url("/echo"), method="POST", headers={"X-Trace": "abc"}, body={"amount": 5}
    )
    send(HttpxClient(), req)
    seen = server.requests[-1]
    assert (seen.method, seen.body) == ("POST", b'{"amount":5}')
    assert seen.headers["x-trace"] == "abc"
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["host"] == f"127.0.0.1:{server.port}"


def test_under_the_policy_a_name_that_resolves_to_loopback_is_refused(
    server: LoopbackServer,
) -> None:
    with pytest.raises(HttpTargetBlockedError, match=r"'localhost' resolves to .*loopback"):
        send(HttpxClient(), request(server.url("/json", host="localhost"), block_private=True))
    assert server.requests == []


def test_under_the_policy_a_loopback_address_literal_is_refused(server: LoopbackServer) -> None:
    with pytest.raises(HttpTargetBlockedError, match=re.escape("127.0.0.1, a loopback address")):
        send(HttpxClient(), request(server.url("/json"), block_private=True))
    assert server.requests == []


def test_one_private_address_in_the_answer_refuses_the_whole_name(
    server: LoopbackServer,
) -> None:
    client = HttpxClient(resolve=resolver({"mixed.example": [PUBLIC, "10.1.2.3"]}))
    with pytest.raises(HttpTargetBlockedError, match=re.escape("10.1.2.3, a private address")):
        send(client, request(f"http://mixed.example:{server.port}/json", block_private=True))


def test_the_name_is_resolved_once_and_the_checked_address_is_the_one_connected_to(
    server: LoopbackServer,
) -> None:
    calls: list[str] = []
    answers = iter([[PUBLIC], ["127.0.0.1"]])  # a rebinding resolver: public, then loopback

    async def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return next(answers)

    client = HttpxClient(resolve=rebinding, transport=Nat)
    response = send(
        client, request(f"http://rebind.example:{server.port}/json", block_private=True)
    )
    assert response.status == 200
    assert calls == ["rebind.example"]
    assert server.requests[-1].headers["host"] == f"rebind.example:{server.port}"


def test_a_redirect_to_a_blocked_address_is_refused_before_it_is_followed(
    server: LoopbackServer,
) -> None:
    target = server.url("/json")  # 127.0.0.1
    url = f"http://{PUBLIC}:{server.port}/redirect?to={target}"
    with pytest.raises(HttpTargetBlockedError, match=re.escape("127.0.0.1, a loopback address")):
        send(HttpxClient(transport=Nat), request(url, block_private=True))
    assert [seen.path.split("?")[0] for seen in server.requests] == ["/redirect"]


def test_redirects_are_followed_within_the_policy(server: LoopbackServer) -> None:
    url = server.url(f"/redirect?to={server.url('/json')}&code=307")
    response = send(HttpxClient(), request(url, method="POST", body="keep"))
    assert (response.status, response.url) == (200, server.url("/json"))
    assert [(s.method, s.body) for s in server.requests] == [("POST", b"keep"), ("POST", b"keep")]


def test_a_303_becomes_a_get_without_the_body(server: LoopbackServer) -> None:
    url = server.url("/redirect?to=/echo&code=303")
    response = send(HttpxClient(), request(url, method="POST", body={"a": 1}))
    assert response.status == 200
    assert (server.requests[-1].method, server.requests[-1].body) == ("GET", b"")
    assert "content-type" not in server.requests[-1].headers


def test_credentials_do_not_follow_a_redirect_to_another_origin(server: LoopbackServer) -> None:
    other = server.url("/echo", host="localhost")
    url = server.url(f"/redirect?to={other}")
    send(HttpxClient(), request(url, headers={"Authorization": "Bearer s3cret", "X-Keep": "1"}))
    first, second = server.requests
    assert first.headers["authorization"] == "Bearer s3cret"
    assert "authorization" not in second.headers
    assert second.headers["x-keep"] == "1"


def test_more_than_five_redirects_fail(server: LoopbackServer) -> None:
    with pytest.raises(HttpTargetBlockedError, match="at most 5"):
        send(HttpxClient(), request(server.url("/loop")))
    assert len(server.requests) == 6


def test_a_node_that_expects_a_redirect_gets_it_unfollowed(server: LoopbackServer) -> None:
    url = server.url(f"/redirect?to={server.url('/json')}")
    response = send(HttpxClient(), request(url, expect=[302]))
    assert (response.status, response.header("location")) == (302, server.url("/json"))
    assert len(server.requests) == 1


@pytest.mark.parametrize("declared", ["0", "1"])
def test_a_body_over_the_cap_is_refused_while_streaming(
    server: LoopbackServer, declared: str
) -> None:
    url = server.url(f"/big?bytes={5 * CAP}&declared={declared}")
    with pytest.raises(HttpResponseTooLargeError, match="PLAITA_HTTP_MAX_RESPONSE_BYTES"):
        send(HttpxClient(), request(url), cap=CAP)


def test_a_body_at_the_cap_is_read_whole(server: LoopbackServer) -> None:
    response = send(HttpxClient(), request(server.url(f"/big?bytes={CAP}")), cap=CAP)
    assert len(response.body) == CAP


def test_a_slow_server_times_out(server: LoopbackServer) -> None:
    with pytest.raises(TimeoutError):
        send(HttpxClient(), request(server.url("/slow?seconds=3")), timeout=0.3)


def test_a_refused_connection_is_a_transient_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(HttpConnectionError, match="cannot connect"):
            send(HttpxClient(), request(f"http://127.0.0.1:{port}/"))


def test_a_name_that_does_not_resolve_is_a_connection_error() -> None:
    with pytest.raises(HttpConnectionError, match="does not resolve"):
        send(HttpxClient(), request("http://no-such-host.invalid/"))


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_server(authority: trustme.CA) -> Iterator[LoopbackServer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert(TLS_NAME).configure_cert(context)
    with serve(context) as running:
        yield running


def test_https_keeps_the_host_and_server_name_while_connecting_to_the_pinned_address(
    tls_server: LoopbackServer, authority: trustme.CA
) -> None:
    verify = ssl.create_default_context()
    authority.configure_trust(verify)
    client = HttpxClient(resolve=resolver({TLS_NAME: ["127.0.0.1"]}), verify=verify)
    response = send(client, request(tls_server.url("/json", host=TLS_NAME)))
    assert response.status == 200
    seen = tls_server.requests[-1]
    assert seen.server_name == TLS_NAME
    assert seen.headers["host"] == f"{TLS_NAME}:{tls_server.port}"


def test_a_certificate_for_another_name_is_a_tls_error(
    tls_server: LoopbackServer, authority: trustme.CA
) -> None:
    verify = ssl.create_default_context()
    authority.configure_trust(verify)
    client = HttpxClient(resolve=resolver({"other.example": ["127.0.0.1"]}), verify=verify)
    with pytest.raises(HttpTlsError, match=re.escape("not valid for 'other.example'")):
        send(client, request(tls_server.url("/json", host="other.example")))
