"""Bad input answers a named 4xx and writes nothing (C1): invalid bodies and parameters are
422 with one field error per problem, unknown ids 404, bodies over the limit 413."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from plaita.entrypoints.console import create_app
from plaita.entrypoints.container import Container

from .conftest import TOKENS, auth, register_approval, snapshot


@pytest.mark.parametrize(
    ("path", "body", "loc", "message"),
    [
        ("/api/v1/executions", {}, ["body", "flow_id"], "Field required"),
        ("/api/v1/executions", {"flow_id": ""}, ["body", "flow_id"], "at least 1 character"),
        (
            "/api/v1/executions",
            {"flow_id": "approval", "input": [1, 2]},
            ["body", "input"],
            "valid dictionary",
        ),
        (
            "/api/v1/executions",
            {"flow_id": "approval", "flowid": "x"},
            ["body", "flowid"],
            "Extra inputs are not permitted",
        ),
        (
            "/api/v1/executions",
            {"flow_id": "approval", "tenant": "acme:evil"},
            ["body", "tenant"],
            "should match pattern",
        ),
        ("/api/v1/events", {"event_type": "   "}, ["body", "event_type"], "should match pattern"),
        ("/api/v1/events", {"event_type": "x", "data": "text"}, ["body", "data"], "dictionary"),
        ("/api/v1/executions/bulk", {"action": "explode"}, ["body", "action"], "'pause'"),
        (
            "/api/v1/executions/bulk",
            {"action": "pause", "limit": 0},
            ["body", "limit"],
            "greater than or equal to 1",
        ),
        (
            "/api/v1/executions/bulk",
            {"action": "pause", "dry_run": "yes"},
            ["body", "dry_run"],
            "valid boolean",
        ),
        ("/api/v1/executions/x/retry", {"from_node": ""}, ["body", "from_node"], "at least 1"),
        ("/api/v1/flows", {"flow_id": "f"}, ["body", "start"], "Field required"),
    ],
)
async def test_an_invalid_body_is_422_naming_the_field_and_writes_nothing(
    client: httpx.AsyncClient,
    container: Container,
    path: str,
    body: Any,
    loc: list[str],
    message: str,
) -> None:
    await register_approval(client)
    before = await snapshot(container)
    answer = await client.post(path, json=body, headers=auth("admin"))
    assert answer.status_code == 422, answer.text
    error = answer.json()
    assert error["error"] == "RequestValidationError"
    matching = [f for f in error["field_errors"] if f["loc"] == loc]
    assert matching, error
    assert message in matching[0]["msg"]
    assert ".".join(loc) in error["message"]
    assert await snapshot(container) == before


@pytest.mark.parametrize(
    ("path", "params", "loc"),
    [
        ("/api/v1/executions", {"limit": 0}, ["query", "limit"]),
        ("/api/v1/executions", {"limit": 501}, ["query", "limit"]),
        ("/api/v1/executions", {"status": "sleepy"}, ["query", "status"]),
        ("/api/v1/executions", {"tenant": ""}, ["query", "tenant"]),
        ("/api/v1/events", {"limit": "many"}, ["query", "limit"]),
        ("/api/v1/events", {"since_ms": -1}, ["query", "since_ms"]),
        ("/api/v1/dlq", {"count": 0}, ["query", "count"]),
        ("/api/v1/dlq/not-a-stream-id", {}, ["path", "dlq_id"]),
    ],
)
async def test_an_invalid_parameter_is_422_naming_it(
    client: httpx.AsyncClient, path: str, params: dict[str, Any], loc: list[str]
) -> None:
    answer = await client.get(path, params=params, headers=auth("admin"))
    assert answer.status_code == 422, answer.text
    assert loc in [f["loc"] for f in answer.json()["field_errors"]]


async def test_a_body_that_is_not_json_is_422(client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/api/v1/events",
        content=b"{not json",
        headers={**auth("operator"), "Content-Type": "application/json"},
    )
    assert answer.status_code == 422
    assert answer.json()["error"] == "RequestValidationError"
    assert answer.json()["field_errors"][0]["loc"][0] == "body"


async def test_a_body_that_is_not_utf8_is_422(client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/api/v1/events",
        content=b"\xff\xfe\x00",
        headers={**auth("operator"), "Content-Type": "application/json"},
    )
    assert answer.status_code == 422
    assert answer.json()["field_errors"][0]["loc"] == ["body"]


async def test_an_anonymous_malformed_body_is_401_not_422(client: httpx.AsyncClient) -> None:
    """Who asks is checked before what they sent: the API's shapes stay private."""
    answer = await client.post(
        "/api/v1/executions", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 401
    assert answer.json()["error"] == "MissingTokenError"


async def test_an_invalid_flow_definition_is_422_with_its_named_error(
    client: httpx.AsyncClient, container: Container
) -> None:
    before = await snapshot(container)
    document = {
        "flow_id": "broken",
        "start": "a",
        "nodes": [{"id": "a", "type": "sleep", "duration": 10, "next": "nowhere"}],
    }
    answer = await client.post("/api/v1/flows", json=document, headers=auth("admin"))
    assert answer.status_code == 422
    assert answer.json()["error"] == "UnknownNodeTargetError"
    assert "'nowhere'" in answer.json()["message"]
    assert await snapshot(container) == before


async def test_a_flow_with_handlers_outside_the_allowlist_is_refused(
    client: httpx.AsyncClient, container: Container
) -> None:
    before = await snapshot(container)
    document = {
        "flow_id": "sneaky",
        "start": "a",
        "nodes": [
            {"id": "a", "type": "task", "handler": "os:system", "next": "b"},
            {"id": "b", "type": "end"},
        ],
    }
    answer = await client.post("/api/v1/flows", json=document, headers=auth("admin"))
    assert answer.status_code == 422
    assert answer.json()["error"] == "HandlerNotAllowedError"
    assert "os:system" in answer.json()["message"]
    assert await snapshot(container) == before


async def test_a_flow_with_an_empty_expression_is_refused_by_name(
    client: httpx.AsyncClient,
) -> None:
    document = {
        "flow_id": "empty-output",
        "start": "a",
        "nodes": [{"id": "a", "type": "end", "output": ""}],
    }
    answer = await client.post("/api/v1/flows", json=document, headers=auth("admin"))
    assert answer.status_code == 422
    assert answer.json()["error"] == "InvalidExpressionError"


# --- body size (413) ------------------------------------------------------------------------


@pytest.fixture
async def small_client(container: Container) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(container, tokens=list(TOKENS.values()), max_body_bytes=1024)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as http:
        yield http


async def test_a_body_over_the_limit_is_413_and_nothing_is_written(
    small_client: httpx.AsyncClient, container: Container
) -> None:
    before = await snapshot(container)
    answer = await small_client.post(
        "/api/v1/events",
        json={"event_type": "big", "data": {"blob": "x" * 2000}},
        headers=auth("operator"),
    )
    assert answer.status_code == 413
    assert answer.json()["error"] == "RequestBodyTooLargeError"
    assert "at most 1024 bytes" in answer.json()["message"]
    assert await snapshot(container) == before


async def test_a_streamed_body_over_the_limit_is_413_too(
    small_client: httpx.AsyncClient, container: Container
) -> None:
    """Without Content-Length the limit still holds: the body is counted as it arrives."""
    before = await snapshot(container)

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"event_type": "big", "data": {"blob": "'
        for _ in range(10):
            yield b"x" * 200
        yield b'"}}'

    answer = await small_client.post(
        "/api/v1/events",
        content=chunks(),
        headers={**auth("operator"), "Content-Type": "application/json"},
    )
    assert answer.status_code == 413
    assert await snapshot(container) == before


async def test_a_body_at_the_limit_is_accepted(small_client: httpx.AsyncClient) -> None:
    body = b'{"event_type": "fits", "data": {"blob": "' + b"x" * 900 + b'"}}'
    body += b" " * (1024 - len(body))
    answer = await small_client.post(
        "/api/v1/events",
        content=body,
        headers={**auth("operator"), "Content-Type": "application/json"},
    )
    assert answer.status_code == 201, answer.text


def test_create_app_refuses_a_useless_limit(container: Container) -> None:
    from plaita.domain.errors import InvalidConfigurationError

    with pytest.raises(InvalidConfigurationError, match="max_body_bytes must be a positive"):
        create_app(container, tokens=list(TOKENS.values()), max_body_bytes=0)


async def test_a_json_body_without_the_json_content_type_is_422_saying_so(
    client: httpx.AsyncClient,
) -> None:
    answer = await client.post(
        "/api/v1/events",
        content=b'{"event_type": "x"}',
        headers={**auth("operator"), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 422
    assert "Content-Type: application/json" in answer.json()["message"]


async def test_a_repeated_query_parameter_is_422(client: httpx.AsyncClient) -> None:
    """One value wins silently nowhere: ?tenant=a&tenant=b is refused, not read as one."""
    answer = await client.get(
        "/api/v1/executions?tenant=acme&tenant=default", headers=auth("admin")
    )
    assert answer.status_code == 422
    assert answer.json()["field_errors"] == [
        {"loc": ["query", "tenant"], "msg": "given 2 times; give it once"}
    ]


# --- R4, C1: JSON limits and the id rule ----------------------------------------------------


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


async def test_an_input_over_the_depth_limit_is_422_naming_the_limit_and_the_field(
    client: httpx.AsyncClient, container: Container
) -> None:
    """R4: a 300-deep input used to be accepted (201) and then dead-lettered by the
    worker, so the execution never existed. The console and the worker now agree."""
    await register_approval(client)
    before = await snapshot(container)
    answer = await client.post(
        "/api/v1/executions",
        json={"flow_id": "approval", "input": nested(300)},
        headers=auth("operator"),
    )
    assert answer.status_code == 422, answer.text
    error = answer.json()
    assert error["error"] == "PayloadTooDeepError"
    assert "input" in error["message"] and "more than 64 levels" in error["message"]
    assert "execution input depth limit" in error["message"]
    assert await snapshot(container) == before


async def test_an_input_at_the_depth_limit_is_accepted(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    answer = await client.post(
        "/api/v1/executions",
        json={"flow_id": "approval", "input": nested(63)},  # the input object is level 1
        headers=auth("operator"),
    )
    assert answer.status_code == 201, answer.text


async def test_event_data_over_the_depth_limit_is_422_naming_it(
    client: httpx.AsyncClient, container: Container
) -> None:
    before = await snapshot(container)
    answer = await client.post(
        "/api/v1/events",
        json={"event_type": "deep", "data": nested(100)},
        headers=auth("operator"),
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "PayloadTooDeepError"
    assert "data (event data)" in answer.json()["message"]
    assert await snapshot(container) == before


async def test_a_ten_thousand_deep_body_is_422_naming_the_limit_not_a_parse_failure(
    client: httpx.AsyncClient, container: Container
) -> None:
    before = await snapshot(container)
    body = b'{"flow_id": "approval", "input": ' + b'{"k": ' * 10_000 + b"1" + b"}" * 10_001
    answer = await client.post(
        "/api/v1/executions",
        content=body,
        headers={**auth("operator"), "Content-Type": "application/json"},
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "PayloadTooDeepError"
    assert "request body depth limit" in answer.json()["message"]
    assert await snapshot(container) == before


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"flow_id": "approval", "execution_id": "../../etc"}, ["body", "execution_id"]),
        ({"flow_id": "approval", "execution_id": "has space"}, ["body", "execution_id"]),
        ({"flow_id": "approval", "execution_id": "."}, ["body", "execution_id"]),
        ({"flow_id": "app/roval"}, ["body", "flow_id"]),
    ],
)
async def test_an_id_outside_the_id_rule_is_422_naming_the_field(
    client: httpx.AsyncClient, container: Container, body: dict[str, Any], loc: list[str]
) -> None:
    """R4: `../../etc` used to start and complete, and was then unaddressable (404)."""
    await register_approval(client)
    before = await snapshot(container)
    answer = await client.post("/api/v1/executions", json=body, headers=auth("operator"))
    assert answer.status_code == 422, answer.text
    assert loc in [f["loc"] for f in answer.json()["field_errors"]]
    assert await snapshot(container) == before


@pytest.mark.parametrize(
    ("path", "loc"),
    [
        ("/api/v1/executions/has%20space", ["path", "execution_id"]),
        ("/api/v1/executions/%7Btag%7D/cancel", ["path", "execution_id"]),
        ("/api/v1/events/.hidden", ["path", "event_id"]),
        ("/api/v1/flows/bad%20flow", ["path", "flow_id"]),
    ],
)
async def test_an_id_outside_the_id_rule_in_a_path_is_422_naming_it(
    client: httpx.AsyncClient, path: str, loc: list[str]
) -> None:
    method = client.post if path.endswith("/cancel") else client.get
    answer = await method(path, headers=auth("admin"))
    assert answer.status_code == 422, answer.text
    assert loc in [f["loc"] for f in answer.json()["field_errors"]]


async def test_a_flow_whose_id_breaks_the_id_rule_is_refused_by_name(
    client: httpx.AsyncClient, container: Container
) -> None:
    before = await snapshot(container)
    document = {"flow_id": "../flows", "start": "a", "nodes": [{"id": "a", "type": "end"}]}
    answer = await client.post("/api/v1/flows", json=document, headers=auth("admin"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "InvalidFlowIdError"
    assert "flow id '../flows'" in answer.json()["message"]
    assert await snapshot(container) == before
