"""What every route reaches the rest of plaita through: the container, and the error table."""

from __future__ import annotations

from typing import Annotated, Any

import attrs
from fastapi import Depends, Request

from plaita.application.ports import ConsoleMetrics
from plaita.entrypoints.console.auth import TokenTable
from plaita.entrypoints.console.schemas import ErrorBody
from plaita.entrypoints.container import Container

_DESCRIPTIONS = {
    401: "No token, or a token the console does not know.",
    403: "The token's role or tenants do not allow this request.",
    404: "No such execution, flow, event, dead letter or schedule (for this tenant).",
    409: "The request conflicts with the current state; nothing was changed.",
    413: "The request body is over the console's limit (--max-body-bytes).",
    422: "The request is not valid; field_errors names each problem.",
    503: "A store did not answer; retry later.",
}


@attrs.frozen
class Console:
    container: Container
    tokens: TokenTable
    metrics: ConsoleMetrics
    max_body_bytes: int
    dev_mode: bool


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


ConsoleDep = Annotated[Console, Depends(console_of)]


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error responses of a route, for its OpenAPI (401, 413 and 503 are always possible)."""
    wanted = sorted({401, 413, 503, *statuses})
    return {status: {"model": ErrorBody, "description": _DESCRIPTIONS[status]} for status in wanted}
