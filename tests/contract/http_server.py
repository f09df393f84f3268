"""A real HTTP(S) server on loopback for the http node's tests, run in a thread.

Routes (query parameters in brackets):

- ``/json`` 200 ``{"ok": true}``; ``/text`` 200 ``text/plain; charset=latin-1``;
  ``/badjson`` says JSON and is not; ``/empty-json`` 204-like empty JSON body.
- ``/echo`` the request as JSON: method, path, headers, body (text).
- ``/status/<n>`` answers ``n``; ``/flaky/<key>/<n>`` answers 503 the first ``n`` times for
  ``key``, then 200 with the count.
- ``/redirect`` [to, code] a redirect to ``to``; ``/loop`` redirects to itself.
- ``/big`` [bytes, declared] a body of ``bytes`` bytes, with a Content-Length only when
  ``declared=1`` (else read until the connection closes: the cap must hold while streaming).
- ``/slow`` [seconds] answers after that long.

Every request is recorded (``requests``), with the TLS server name the client sent.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs


@attrs.define
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    server_name: str | None


@attrs.define
class LoopbackServer:
    port: int
    scheme: str
    requests: list[Seen] = attrs.field(factory=list)
    counts: dict[str, int] = attrs.field(factory=dict)
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"


def _handler(server: LoopbackServer, names: dict[int, str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _route(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with server.lock:
                server.requests.append(
                    Seen(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        names.get(id(self.connection)),
                    )
                )
            path = parts.path
            if path == "/json":
                self._send(200, b'{"ok": true}', "application/json")
            elif path == "/text":
                self._send(200, "caf\xe9".encode("latin-1"), "text/plain; charset=latin-1")
            elif path == "/badjson":
                self._send(200, b"not json", "application/json")
            elif path == "/empty-json":
                self._send(200, b"", "application/problem+json")
            elif path == "/echo":
                echoed = {
                    "method": self.command,
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body.decode(),
                }
                self._send(200, json.dumps(echoed).encode(), "application/json")
            elif path.startswith("/status/"):
                status = int(path.rsplit("/", 1)[1])
                self._send(status, f"status {status}".encode(), "text/plain")
            elif path.startswith("/flaky/"):
                _, _, key, failures = path.split("/")
                with server.lock:
                    seen = server.counts[key] = server.counts.get(key, 0) + 1
                if seen <= int(failures):
                    self._send(503, b"try again", "text/plain")
                else:
                    self._send(200, json.dumps({"calls": seen}).encode(), "application/json")
            elif path == "/redirect":
                self.send_response(int(query.get("code", "302")))
                self.send_header("Location", query["to"])
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif path == "/loop":
                self.send_response(302)
                self.send_header("Location", "/loop")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif path == "/big":
                size = int(query["bytes"])
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                if query.get("declared") == "1":
                    self.send_header("Content-Length", str(size))
                self.end_headers()
                chunk = b"x" * 65536
                sent = 0
                with contextlib.suppress(OSError):
                    while sent < size:
                        piece = chunk[: min(len(chunk), size - sent)]
                        self.wfile.write(piece)
                        sent += len(piece)
            elif path == "/slow":
                time.sleep(float(query.get("seconds", "5")))
                with contextlib.suppress(OSError):
                    self._send(200, b"late", "text/plain")
            else:
                self._send(404, b"no such route", "text/plain")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _route

    return Handler


@contextlib.contextmanager
def serve(tls: ssl.SSLContext | None = None) -> Iterator[LoopbackServer]:
    """A server on 127.0.0.1 (an ephemeral port), stopped on exit."""
    names: dict[int, str] = {}
    holder: dict[str, LoopbackServer] = {}

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def get_request(self) -> tuple[Any, Any]:
            connection, address = super().get_request()
            if tls is None:
                return connection, address
            wrapped = tls.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
            return wrapped, address

        def finish_request(self, request: Any, client_address: Any) -> None:
            if tls is not None:
                try:
                    request.do_handshake()
                except (ssl.SSLError, OSError):
                    return
                names[id(request)] = getattr(request, "plaita_server_name", None)
            super().finish_request(request, client_address)

    if tls is not None:

        def remember(connection: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
            connection.plaita_server_name = name  # type: ignore[attr-defined]

        tls.sni_callback = remember  # type: ignore[assignment]
    httpd = Server(("127.0.0.1", 0), lambda *a: holder["handler"](*a))
    server = LoopbackServer(httpd.server_address[1], "https" if tls else "http")
    holder["handler"] = _handler(server, names)  # type: ignore[assignment]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
