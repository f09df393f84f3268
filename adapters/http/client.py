"""``HttpxClient``: an http node's request on httpx, pinned to the address that was checked.

For every target (the URL, then each redirect) the host name is resolved **once**; the
domain's ``choose_address`` checks every address of that answer when the request runs under
the SSRF policy and picks the first; the request goes to that address with the URL's
``Host`` header and TLS server name (``sni_hostname``) kept, so the certificate is verified
for the name and no second resolution happens between the check and the connection.

A fresh ``httpx.AsyncClient`` serves each request and its redirects: a pooled TLS connection
to an address is never reused for another host name, and a worker's event loop owns nothing
between nodes. The environment's proxy settings are ignored (``trust_env=False``): a proxy
would resolve the name itself. The body is streamed and refused once it passes the cap
(decoded bytes, so a compressed body cannot expand past it).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence

import attrs
import httpx

from plaita.domain.failures import (
    HttpConnectionError,
    HttpResponseTooLargeError,
    HttpTlsError,
)
from plaita.domain.http_calls import REDIRECT_STATUSES, HttpRequest, HttpResponse, redirected
from plaita.domain.http_targets import check_redirects, choose_address

#: host, port → the addresses one resolution gave, in the resolver's order.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


async def resolve_with_getaddrinfo(host: str, port: int) -> list[str]:
    """The system resolver's answer for ``host`` (TCP), each address once, in its order."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@attrs.frozen
class _Pinned:
    url: httpx.URL
    headers: list[tuple[str, str]]
    extensions: dict[str, str]


class HttpxClient:
    """The ``HttpClient`` port on httpx. ``resolve``, ``verify`` and ``transport`` are for
    tests: a name that resolves to loopback, a test certificate authority, a transport that
    sends a public address's connection to a loopback server."""

    def __init__(
        self,
        *,
        resolve: Resolver = resolve_with_getaddrinfo,
        verify: ssl.SSLContext | bool = True,
        transport: Callable[[], httpx.AsyncBaseTransport] | None = None,
    ) -> None:
        self._resolve = resolve
        self._verify = verify
        self._transport = transport

    async def send(
        self, request: HttpRequest, *, timeout_seconds: float, max_response_bytes: int
    ) -> HttpResponse:
        """The final response of ``request`` (see ``plaita.application.ports.HttpClient``)."""
        async with httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,
            verify=self._verify,
            timeout=httpx.Timeout(timeout_seconds),
            transport=None if self._transport is None else self._transport(),
        ) as client:
            followed = 0
            while True:
                response = await self._exchange(client, request, max_response_bytes)
                location = response.header("location")
                if (
                    not request.follow_redirects
                    or response.status not in REDIRECT_STATUSES
                    or not location
                ):
                    return response
                check_redirects(followed)
                followed += 1
                request = redirected(request, response.status, location)

    async def _exchange(
        self, client: httpx.AsyncClient, request: HttpRequest, max_response_bytes: int
    ) -> HttpResponse:
        pinned = await self._pin(request)
        try:
            async with client.stream(
                request.method,
                pinned.url,
                headers=pinned.headers,
                content=request.body,
                extensions=pinned.extensions,
            ) as answer:
                keep_body = not (
                    request.follow_redirects and answer.status_code in REDIRECT_STATUSES
                )
                body = await _read_capped(answer, max_response_bytes, request) if keep_body else b""
                return HttpResponse(
                    status=answer.status_code,
                    reason=answer.reason_phrase,
                    headers=tuple(answer.headers.multi_items()),
                    body=body,
                    url=request.url,
                )
        except httpx.TimeoutException:
            raise TimeoutError(f"{request.method} {request.url} timed out") from None
        except httpx.ConnectError as exc:
            if _certificate_refused(exc):
                raise HttpTlsError(
                    f"{request.url}: the server's TLS certificate is not valid for "
                    f"{request.host!r}: {exc}"
                ) from None
            raise HttpConnectionError(f"{request.url}: cannot connect: {exc}") from None
        except (httpx.TransportError, httpx.DecodingError) as exc:
            raise HttpConnectionError(f"{request.url}: {type(exc).__name__}: {exc}") from None

    async def _pin(self, request: HttpRequest) -> _Pinned:
        url = httpx.URL(request.url)
        host = url.host
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            resolved = [str(ipaddress.ip_address(host))]
        except ValueError:
            try:
                resolved = list(await self._resolve(host, port))
            except OSError as exc:
                raise HttpConnectionError(
                    f"{request.url}: {host!r} does not resolve: {exc}"
                ) from None
        choice = choose_address(host, resolved, block_private=request.block_private)
        headers = [(name, value) for name, value in request.headers if name.lower() != "host"]
        headers.insert(0, ("Host", url.netloc.decode("ascii")))
        extensions = {"sni_hostname": host} if url.scheme == "https" else {}
        return _Pinned(url.copy_with(host=choice.address), headers, extensions)


async def _read_capped(answer: httpx.Response, cap: int, request: HttpRequest) -> bytes:
    declared = answer.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise _too_large(request, answer, f"declares {int(declared)} bytes", cap)
    chunks: list[bytes] = []
    total = 0
    async for chunk in answer.aiter_bytes():
        total += len(chunk)
        if total > cap:
            raise _too_large(request, answer, f"passed {cap} bytes while being read", cap)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(
    request: HttpRequest, answer: httpx.Response, how: str, cap: int
) -> HttpResponseTooLargeError:
    return HttpResponseTooLargeError(
        f"the {answer.status_code} response of {request.method} {request.url} {how}; "
        f"PLAITA_HTTP_MAX_RESPONSE_BYTES allows {cap}: raise it, or ask the endpoint for less"
    )


def _certificate_refused(error: BaseException) -> bool:
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
