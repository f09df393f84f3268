"""What an ``http`` node's response means (E11, E3): a success, a transient failure that is
retried, or a deterministic one that goes straight to the node's errorHandler.

A status in the node's ``expect`` is a success (default: every 2xx). Otherwise 429 (too
many requests) and every 5xx are transient — the server may answer differently later — and
every other status is deterministic: the same request gets the same answer. A connection
that could not be made or broke, or a timeout, is transient (the adapter's part).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping, Sequence
from email.message import Message
from typing import Any
from urllib.parse import urljoin, urlsplit

import attrs

from plaita.domain.failures import (
    HttpDeterministicStatusError,
    HttpRequestError,
    HttpResponseNotJsonError,
    HttpTargetBlockedError,
    HttpTransientStatusError,
    NodeError,
)
from plaita.domain.tracing import TraceContext

JSON = Any

#: Methods an http node may use.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: The attempt timeout of an http node that names none: a hung server never holds a node.
DEFAULT_HTTP_TIMEOUT_MS = 30_000
#: ``PLAITA_HTTP_MAX_RESPONSE_BYTES``' default: bodies above it are refused while streaming.
DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024
#: Header values that never reach the history (credentials), by lower-cased name or part.
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
_SECRET_PARTS = ("token", "secret", "key", "password", "signature", "auth")
REDACTED = "<redacted>"
#: An RFC 9110 header name (a token).
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")

#: Statuses an HTTP response can have.
MIN_STATUS, MAX_STATUS = 100, 599
_CLASS = re.compile(r"^([1-5])xx$")


class ResponseVerdict(enum.StrEnum):
    SUCCESS = "success"
    TRANSIENT = "transient"
    DETERMINISTIC = "deterministic"


@attrs.frozen
class ExpectedStatuses:
    """The statuses a node counts as success: exact codes and whole classes (``"2xx"``)."""

    codes: frozenset[int] = frozenset()
    classes: frozenset[int] = frozenset({2})

    @classmethod
    def parse(cls, raw: Sequence[int | str] | None) -> ExpectedStatuses:
        """``expect`` as a flow writes it: a list of status codes (``200``) and classes
        (``"2xx"``); None is every 2xx. ``ValueError`` naming the entry that is neither."""
        if raw is None:
            return cls()
        if isinstance(raw, str | bytes) or not raw:
            raise ValueError(
                f"expect must be a non-empty list of status codes (200) or classes ('2xx'), "
                f"got {raw!r}"
            )
        codes: set[int] = set()
        classes: set[int] = set()
        for entry in raw:
            if isinstance(entry, int) and not isinstance(entry, bool):
                if not MIN_STATUS <= entry <= MAX_STATUS:
                    raise ValueError(
                        f"expect: {entry} is not an HTTP status ({MIN_STATUS}-{MAX_STATUS})"
                    )
                codes.add(entry)
                continue
            found = _CLASS.match(entry) if isinstance(entry, str) else None
            if found is None:
                raise ValueError(
                    f"expect: {entry!r} is neither a status code (e.g. 204) nor a class "
                    "('1xx' to '5xx')"
                )
            classes.add(int(found.group(1)))
        return cls(frozenset(codes), frozenset(classes))

    def lists_redirects(self) -> bool:
        """Whether a 3xx counts as success: then a redirect is the answer, never followed."""
        return 3 in self.classes or any(300 <= code < 400 for code in self.codes)

    def __contains__(self, status: object) -> bool:
        return isinstance(status, int) and (status in self.codes or status // 100 in self.classes)


def judge_response(status: int, expected: ExpectedStatuses) -> ResponseVerdict:
    """Success, transient or deterministic, by the rules above."""
    if status in expected:
        return ResponseVerdict.SUCCESS
    if status == 429 or 500 <= status <= MAX_STATUS:
        return ResponseVerdict.TRANSIENT
    return ResponseVerdict.DETERMINISTIC


# --- the request -------------------------------------------------------------------------


@attrs.frozen
class HttpPolicy:
    """The deployment's rules for every http node: the SSRF floor and the body cap."""

    block_private: bool = False
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES


#: The policy of a deployment that sets neither: private targets allowed, 10 MiB bodies.
DEFAULT_HTTP_POLICY = HttpPolicy()


@attrs.frozen
class HttpRequest:
    """One rendered http node request, ready to send."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    #: Whether this request runs under the SSRF policy (the deployment's, or the node's own).
    block_private: bool
    #: Redirects are followed (each a new target) unless the node expects a 3xx itself.
    follow_redirects: bool = True

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    def for_history(self) -> dict[str, JSON]:
        """What the history keeps of it: credentials in headers replaced by ``<redacted>``."""
        return {
            "method": self.method,
            "url": self.url,
            "headers": {name: _redacted(name, value) for name, value in self.headers},
            "body_bytes": 0 if self.body is None else len(self.body),
        }


def check_method(method: str) -> str | None:
    """Why ``method`` cannot be an http node's, or None."""
    if method in HTTP_METHODS:
        return None
    return f"method {method!r} is not one of {', '.join(sorted(HTTP_METHODS))} (upper case)"


def check_url(url: str) -> str | None:
    """Why ``url`` cannot be called, or None: an absolute http(s) URL with a host."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port out of range raises here
    except ValueError as exc:
        return f"url {url!r} cannot be read: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"url {url!r} must be an absolute http:// or https:// URL with a host"
    return None


def check_header_name(name: str) -> str | None:
    if _HEADER_NAME.match(name):
        return None
    return f"header name {name!r} is not a valid HTTP header name"


def build_request(
    *,
    node_id: str,
    method: str,
    url: JSON,
    headers: Mapping[str, JSON],
    body: JSON,
    block_private: bool,
    expected: ExpectedStatuses,
    trace: TraceContext | None = None,
) -> HttpRequest:
    """The request an http node sends, from its rendered templates; ``HttpRequestError``
    (deterministic) names the part that cannot be sent.

    A JSON body (object, array, number, boolean) is sent as ``application/json``; a string as
    ``text/plain; charset=utf-8``; ``null`` sends no body. A ``Content-Type`` the node sets
    wins. ``trace``: the running node's span, sent on as W3C ``traceparent`` (and
    ``tracestate``) unless the node sets its own."""
    where = f"http node {node_id!r}"
    if not isinstance(url, str):
        raise HttpRequestError(f"{where}: url rendered to {url!r}, not a string")
    problem = check_url(url)
    if problem is not None:
        raise HttpRequestError(f"{where}: {problem}")
    rendered: list[tuple[str, str]] = []
    for name, value in headers.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise HttpRequestError(
                f"{where}: header {name!r} rendered to {value!r}; a header value must be a "
                "string or a number"
            )
        text = str(value)
        if "\r" in text or "\n" in text:
            raise HttpRequestError(f"{where}: header {name!r} holds a line break")
        rendered.append((name, text))
    payload, content_type = _encode_body(where, body)
    if content_type is not None and not _has(rendered, "content-type"):
        rendered.append(("Content-Type", content_type))
    if trace is not None and not _has(rendered, "traceparent"):
        rendered.append(("traceparent", trace.traceparent))
        if trace.tracestate:
            rendered.append(("tracestate", trace.tracestate))
    return HttpRequest(
        method,
        url,
        tuple(rendered),
        payload,
        block_private,
        follow_redirects=not expected.lists_redirects(),
    )


#: Redirect statuses an http node follows.
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
#: Headers never carried to another origin by a redirect.
_ORIGIN_BOUND = frozenset({"authorization", "proxy-authorization", "cookie"})


def redirected(request: HttpRequest, status: int, location: str) -> HttpRequest:
    """The request a redirect asks for, as browsers and httpx build it: 303 (and 301/302 of a
    POST) become a GET (a HEAD stays one) without a body; 307/308 keep method and body;
    credentials are dropped when the redirect leaves the origin. ``HttpTargetBlockedError``
    for a target that is not an http(s) URL. The caller checks the new target and the count
    (``http_targets``)."""
    target = urljoin(request.url, location)
    problem = check_url(target)
    if problem is not None:
        raise HttpTargetBlockedError(f"{request.url} redirected to an unusable target: {problem}")
    method, body = request.method, request.body
    if status == 303:
        method, body = ("HEAD" if method == "HEAD" else "GET"), None
    elif status in (301, 302) and method == "POST":
        method, body = "GET", None
    same_origin = _origin(target) == _origin(request.url)
    headers = tuple(
        (name, value)
        for name, value in request.headers
        if (same_origin or name.lower() not in _ORIGIN_BOUND)
        and (body is not None or name.lower() not in ("content-type", "content-length"))
    )
    return attrs.evolve(request, method=method, url=target, headers=headers, body=body)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, parts.hostname or "", parts.port or default


def _has(headers: Sequence[tuple[str, str]], name: str) -> bool:
    return any(key.lower() == name for key, _ in headers)


def _encode_body(where: str, body: JSON) -> tuple[bytes | None, str | None]:
    if body is None:
        return None, None
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    try:
        text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise HttpRequestError(f"{where}: body cannot be sent as JSON: {exc}") from None
    return text.encode(), "application/json"


def _redacted(name: str, value: str) -> str:
    lowered = name.lower()
    if lowered in _SECRET_HEADERS or any(part in lowered for part in _SECRET_PARTS):
        return REDACTED
    return value


# --- the response -------------------------------------------------------------------------


@attrs.frozen
class HttpResponse:
    """What came back: the final response after the redirects followed."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    url: str

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), None)


def response_result(node_id: str, response: HttpResponse) -> dict[str, JSON]:
    """The node's result ``{status, headers, body}``: header names lower-cased (repeated ones
    joined by ``", "``); the body parsed when the content type says JSON (``application/json``
    or ``…+json``), else text in the response's charset (UTF-8 by default, undecodable bytes
    replaced)."""
    headers: dict[str, str] = {}
    for name, value in response.headers:
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    media, charset = _content_type(response.header("content-type"))
    body: JSON
    if media == "application/json" or media.endswith("+json"):
        if not response.body.strip():
            body = None
        else:
            try:
                body = json.loads(response.body.decode(charset or "utf-8"))
            except (UnicodeDecodeError, LookupError, ValueError) as exc:
                raise HttpResponseNotJsonError(
                    f"http node {node_id!r}: {response.status} from {response.url} says "
                    f"{media} but its body is not JSON ({exc})"
                ) from None
    else:
        body = _decode_text(response.body, charset)
    return {"status": response.status, "headers": headers, "body": body}


def _content_type(value: str | None) -> tuple[str, str | None]:
    if not value:
        return "", None
    message = Message()
    message["content-type"] = value
    charset = message.get_param("charset")
    return message.get_content_type().lower(), charset if isinstance(charset, str) else None


def _decode_text(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def status_failure(
    node_id: str, request: HttpRequest, response: HttpResponse, verdict: ResponseVerdict
) -> NodeError:
    """The failure a response that is not a success raises: transient (retried) or
    deterministic (straight to the errorHandler), with the status and a body excerpt."""
    excerpt = _decode_text(response.body[:200], None).strip()
    message = (
        f"http node {node_id!r}: {request.method} {response.url} answered {response.status} "
        f"{response.reason}".rstrip()
        + (f": {excerpt}" if excerpt else "")
    )
    if verdict is ResponseVerdict.TRANSIENT:
        return HttpTransientStatusError(f"{message} (retried)", status=response.status)
    return HttpDeterministicStatusError(message, status=response.status)
