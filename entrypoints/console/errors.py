"""Every error the console answers with has one body (C1):

``{"error": "<NamedError>", "message": "<what was wrong and what to do>", "field_errors": [...]}``

plaita's named errors map to a status by family; request validation becomes 422 with one
field error per problem; a body over the size limit is refused before anything reads it
(413), one nested deeper than the depth limit too (422); a store that does not answer is
503. Nothing reaches the client as a bare 500 with a traceback.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import redis.exceptions
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from plaita.application.use_cases.dlq import UnknownDeadLetterError, UnreadableDeadLetterError
from plaita.domain import errors as named
from plaita.domain.errors import PayloadLimitError
from plaita.domain.limits import REQUEST_BODY_LIMIT, check_json_text
from plaita.entrypoints.console.auth import (
    MissingTokenError,
    RoleNotAllowedError,
    TenantNotAllowedError,
    UnknownTokenError,
    authenticate,
    bearer_scheme,
)

log = logging.getLogger("plaita.console")

#: First match wins: subclasses before their families.
STATUS_BY_ERROR: Sequence[tuple[type[BaseException], int]] = (
    (MissingTokenError, 401),
    (UnknownTokenError, 401),
    (RoleNotAllowedError, 403),
    (TenantNotAllowedError, 403),
    (named.TenantMismatchError, 403),
    (named.UnknownExecutionError, 404),
    (named.UnknownFlowError, 404),
    (named.UnknownEventError, 404),
    (named.UnknownScheduleError, 404),
    (UnknownDeadLetterError, 404),
    (named.ExecutionStateError, 409),
    (named.FlowVersionConflictError, 409),
    (named.ScheduleExistsError, 409),
    (named.ExecutionLeaseError, 409),
    (named.SubscriptionWriteConflictError, 409),
    (UnreadableDeadLetterError, 409),
    (named.FlowDefinitionError, 422),
    (named.UnknownNodeError, 422),
    (named.InvalidOperatorRequestError, 422),
    (named.InvalidEventError, 422),
    (named.InvalidEventQueryError, 422),
    (named.InvalidDedupKeyError, 422),
    (named.InvalidScheduleError, 422),
    (named.InvalidTenantIdError, 422),
    (named.InvalidIdError, 422),
    (named.InvalidPriorityError, 422),
    (named.PayloadLimitError, 422),
    (named.InvalidEnvelopeError, 422),
    (named.SchemaVersionError, 422),
    # Inbound webhooks (V10): a sender's request, then the admin API's.
    (named.HookSignatureError, 401),
    (named.HookPayloadError, 400),
    (named.HookBodyTooLargeError, 413),
    (named.HookSecretUnavailableError, 503),
    (named.UnknownHookError, 404),
    (named.HookConflictError, 409),
    (named.HookDefinitionError, 422),
    # Tenants (W24).
    (named.TenantActionRefusedError, 409),
    (named.TenantWriteConflictError, 409),
    (named.InvalidTenantQuotaError, 422),
)

#: Statuses the generic HTTP errors of the router (unknown path, wrong method) are named by.
_HTTP_NAMES = {
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    406: "NotAcceptableError",
    413: "RequestBodyTooLargeError",
    415: "UnsupportedMediaTypeError",
}


def status_of(error: BaseException) -> int:
    for family, status in STATUS_BY_ERROR:
        if isinstance(error, family):
            return status
    return 500


def error_body(
    name: str, message: str, field_errors: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"error": name, "message": message}
    if field_errors is not None:
        body["field_errors"] = field_errors
    return body


def error_response(
    status: int,
    name: str,
    message: str,
    field_errors: list[dict[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(name, message, field_errors), status, headers=headers)


async def _named_error(request: Request, exc: Exception) -> JSONResponse:
    status = status_of(exc)
    name = type(exc).__name__
    if status >= 500:
        log.error(
            "event=console.error error=%s method=%s path=%s: %s",
            name,
            request.method,
            request.url.path,
            exc,
            exc_info=exc,
        )
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    parameter = getattr(exc, "parameter", None)
    # A search filter that cannot be read names its parameter, as a validation error does.
    fields = None if parameter is None else [{"loc": [str(parameter)], "msg": str(exc)}]
    return error_response(status, name, str(exc), fields, headers=headers)


def field_errors_of(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        {
            "loc": [str(part) if not isinstance(part, int) else part for part in e["loc"]],
            "msg": str(e["msg"]),
        }
        for e in exc.errors()
    ]


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    if request.url.path.startswith("/api/"):
        # FastAPI parses a JSON body before any dependency runs: who is asking is checked
        # first all the same, so an anonymous caller learns nothing about the API's shapes.
        try:
            authenticate(request, await bearer_scheme(request))
        except (MissingTokenError, UnknownTokenError) as refused:
            return await _named_error(request, refused)
    problems = field_errors_of(exc)
    summary = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in problems)
    advice = "fix these fields (see /docs for the schema)"
    content_type = request.headers.get("content-type", "")
    if any(e["loc"] == ["body"] for e in problems) and "json" not in content_type:
        advice = (
            "send the body as JSON with Content-Type: application/json (it came as "
            f"{content_type or 'no content type'}; curl -d sends form data unless told)"
        )
    return error_response(
        422,
        "RequestValidationError",
        f"the request is not valid: {summary}; {advice}",
        field_errors=problems,
    )


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # FastAPI's "error parsing the body" (not UTF-8, not decodable): an invalid body, so
        # it is answered as every invalid body is (422, with the field named).
        return error_response(
            422,
            "RequestValidationError",
            f"the request body could not be read ({exc.detail}); send a JSON object encoded "
            "as UTF-8 with Content-Type: application/json",
            field_errors=[{"loc": ["body"], "msg": str(exc.detail)}],
        )
    name = _HTTP_NAMES.get(exc.status_code, f"HTTP{exc.status_code}Error")
    message = str(exc.detail)
    if exc.status_code == 404:
        message = (
            f"no route {request.method} {request.url.path}; the API lives under /api/v1 (see /docs)"
        )
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        allowed = _allowed_methods(request) or [
            method.strip() for method in headers.get("Allow", "").split(",") if method.strip()
        ]
        headers["Allow"] = ", ".join(allowed)
        message = (
            f"{request.url.path} does not take {request.method}; it takes "
            f"{', '.join(allowed)} (see /docs)"
        )
    return error_response(exc.status_code, name, message, headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    """The methods the published API takes on this path (from the OpenAPI document)."""
    path = request.url.path
    paths = request.app.openapi().get("paths", {})
    if path in paths:  # a literal path (``/executions/bulk``) is its own operation
        return sorted(method.upper() for method in paths[path])
    methods: set[str] = set()
    for template, operations in paths.items():
        pattern = re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            methods.update(method.upper() for method in operations)
    return sorted(methods)


async def _store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    log.warning(
        "event=console.store_unavailable method=%s path=%s error=%r: is Redis up and "
        "--redis-url right?",
        request.method,
        request.url.path,
        exc,
    )
    return error_response(
        503,
        "StoreUnavailableError",
        f"the store did not answer ({type(exc).__name__}: {exc}); retry later, and check "
        "that Redis is up and the console's --redis-url points at it",
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error(
        "event=console.unexpected_error method=%s path=%s",
        request.method,
        request.url.path,
        exc_info=exc,
    )
    return error_response(
        500,
        "InternalError",
        f"the console failed on {request.method} {request.url.path} "
        f"({type(exc).__name__}); the console log has the details",
    )


def single_query_values(request: Request) -> None:
    """Every query parameter of the API takes one value: a repeated one is refused (422)
    rather than one of its values silently winning."""
    seen: dict[str, int] = {}
    for name, _ in request.query_params.multi_items():
        seen[name] = seen.get(name, 0) + 1
    repeated = sorted(name for name, count in seen.items() if count > 1)
    if repeated:
        raise RequestValidationError(
            [
                {
                    "loc": ("query", name),
                    "msg": f"given {seen[name]} times; give it once",
                    "type": "repeated_parameter",
                }
                for name in repeated
            ]
        )


Handler = Callable[[Request, Exception], Awaitable[JSONResponse]]


def install_error_handlers(app: FastAPI) -> None:
    handlers: dict[Any, Handler] = {
        named.PlaitaError: _named_error,
        RequestValidationError: _invalid_request,
        StarletteHTTPException: _http_error,
        redis.exceptions.ConnectionError: _store_unavailable,
        redis.exceptions.TimeoutError: _store_unavailable,
        TimeoutError: _store_unavailable,
        ConnectionError: _store_unavailable,
        Exception: _unexpected,
    }
    for error, handler in handlers.items():
        app.add_exception_handler(error, handler)


class BodyLimits:
    """Refuse request bodies over ``max_bytes`` with 413, and bodies nested deeper than the
    request body depth limit with 422, before the app reads any of them.

    The body is buffered (at most ``max_bytes``) and replayed to the app, so a chunked body
    without Content-Length is bounded as well, and nothing is written for a refused request.
    The depth is checked on the raw bytes because the JSON parser that reads them recurses:
    a 10,000-deep body would fail inside it instead of being refused by name.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send, f"{declared} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away before sending its body; nothing to answer.
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send, f"more than {self.max_bytes} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            check_json_text(body, REQUEST_BODY_LIMIT, field="the request body")
        except PayloadLimitError as exc:
            response = error_response(
                422, type(exc).__name__, str(exc), field_errors=[{"loc": ["body"], "msg": str(exc)}]
            )
            await response(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, size: str) -> None:
        response = error_response(
            413,
            "RequestBodyTooLargeError",
            f"the request body is {size}; the console accepts at most {self.max_bytes} bytes "
            "(--max-body-bytes / PLAITA_MAX_BODY_BYTES); send less, e.g. keep large data "
            "out of event payloads and execution input",
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
