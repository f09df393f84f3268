"""The http node's way out: send one request under the SSRF policy, read a capped body."""

from __future__ import annotations

from typing import Protocol

from plaita.domain.http_calls import HttpRequest, HttpResponse


class HttpClient(Protocol):
    """Sends an http node's request (E11). Resolves the target's host once, lets
    ``plaita.domain.http_targets.choose_address`` check every resolved address when
    ``request.block_private`` is set, and connects to the chosen address keeping the URL's
    ``Host`` and TLS server name; follows redirects (each a new target, checked alike, at
    most ``MAX_REDIRECTS``)."""

    async def send(
        self, request: HttpRequest, *, timeout_seconds: float, max_response_bytes: int
    ) -> HttpResponse:
        """The final response, its body read whole but never beyond ``max_response_bytes``.

        Raises ``HttpTargetBlockedError`` (a refused target or too many redirects),
        ``HttpConnectionError`` (no connection, or it broke), ``HttpResponseTooLargeError``
        and ``TimeoutError`` (the attempt's ``timeout_seconds`` ran out)."""
        ...
