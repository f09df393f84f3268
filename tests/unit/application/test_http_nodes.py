"""The http node in the engine (E11, E3, E15): templates rendered into a request, the
response judged by ``expect``, transient statuses retried, the rest to the errorHandler, the
deployment's policy a floor that a node can only tighten, credentials kept out of the
history. The client is a scripted HttpClient; the real one is tested against a loopback
server (tests/contract/test_http_client_contract.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.execution import FlowExecution, RunOptions
from plaita.application.handlers import HandlerRegistry
from plaita.application.use_cases.step import Disposition
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.failures import (
    HttpConnectionError,
    HttpRequestError,
    NodeExecutionError,
    NodeTimeoutError,
)
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.history import HistoryKind
from plaita.domain.http_calls import REDACTED, HttpPolicy, HttpRequest, HttpResponse
from plaita.domain.tracing import TraceContext

from .conftest import FakeClock, SequentialIds
from .twin import Twin

Answer = HttpResponse | BaseException | Callable[[HttpRequest], HttpResponse]


class ScriptedClient:
    """Answers each request with the next scripted response (or raises the next error)."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[HttpRequest] = []
        self.limits: list[tuple[float, int]] = []

    async def send(
        self, request: HttpRequest, *, timeout_seconds: float, max_response_bytes: int
    ) -> HttpResponse:
        self.requests.append(request)
        self.limits.append((timeout_seconds, max_response_bytes))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            return answer(request)
        return answer


def answer(status: int, body: bytes = b"", content_type: str = "application/json") -> HttpResponse:
    headers = (("Content-Type", content_type), ("X-Request-Id", "r-1"))
    return HttpResponse(status, "Reason", headers, body, "https://api.example/x")


def http_flow(**node: Any) -> Flow:
    return Flow.from_document(
        {
            "flow_id": "calls",
            "start": "call",
            "nodes": [
                {"id": "call", "type": "http", "url": "https://api.example/x", "next": "done"}
                | node,
                {"id": "done", "type": "end"},
            ],
        }
    )


def run(
    flow: Flow,
    client: ScriptedClient,
    clock: FakeClock,
    *,
    input: dict[str, Any] | None = None,
    policy: HttpPolicy | None = None,
) -> tuple[Any, ExecutionContext]:
    context = ExecutionContext(execution_id="x-1", flow_id=flow.flow_id, input=input or {})
    execution = FlowExecution(
        flow,
        context,
        handlers=HandlerRegistry([]),
        clock=clock,
        new_id=SequentialIds().new_id,
        options=RunOptions(http_policy=policy or HttpPolicy()),
        sleep=clock.sleep,
        http_client=client,
    )
    return execution.run(), context


def test_the_result_is_status_headers_and_the_parsed_json_body(clock: FakeClock) -> None:
    client = ScriptedClient(answer(200, b'{"id": 7}'))
    result, _ = run(http_flow(), client, clock)
    assert result == {
        "status": 200,
        "headers": {"content-type": "application/json", "x-request-id": "r-1"},
        "body": {"id": 7},
    }


def test_a_text_body_stays_text(clock: FakeClock) -> None:
    client = ScriptedClient(answer(200, b"plain", "text/plain"))
    result, _ = run(http_flow(), client, clock)
    assert result["body"] == "plain"


def test_url_headers_and_body_are_templates_over_the_input(clock: FakeClock) -> None:
    client = ScriptedClient(answer(201))
    flow = http_flow(
        method="POST",
        url="https://api.example/orders/${order_id}",
        headers={"X-Tenant": "${input['tenant']}", "X-Count": "${count}"},
        body={"amount": "${amount}", "note": "order ${order_id}"},
    )
    run(flow, client, clock, input={"order_id": 12, "tenant": "acme", "amount": 5, "count": 3})
    sent = client.requests[0]
    assert (sent.method, sent.url) == ("POST", "https://api.example/orders/12")
    assert dict(sent.headers) == {
        "X-Tenant": "acme",
        "X-Count": "3",
        "Content-Type": "application/json",
    }
    assert sent.body == b'{"amount":5,"note":"order 12"}'


def test_the_history_sees_the_request_with_credentials_redacted(clock: FakeClock) -> None:
    client = ScriptedClient(answer(200))
    flow = http_flow(headers={"Authorization": "Bearer s3cret", "X-Api-Key": "k", "Accept": "*/*"})
    _, context = run(flow, client, clock)
    assert context.rendered_params["call"] == {
        "method": "GET",
        "url": "https://api.example/x",
        "headers": {"Authorization": REDACTED, "X-Api-Key": REDACTED, "Accept": "*/*"},
        "body_bytes": 0,
    }


def test_a_transient_status_is_retried_then_succeeds(clock: FakeClock) -> None:
    client = ScriptedClient(answer(503), answer(429), answer(200, b"{}"))
    result, _ = run(http_flow(retryTimes=2), client, clock)
    assert result["status"] == 200
    assert len(client.requests) == 3
    assert sum(clock.sleeps) == 1.0 + 2.0  # backoff 1 s, then 2 s (in cancel-check slices)


def test_a_connection_failure_is_retried(clock: FakeClock) -> None:
    client = ScriptedClient(HttpConnectionError("refused"), answer(200, b"{}"))
    result, _ = run(http_flow(retryTimes=1), client, clock)
    assert result["status"] == 200


def test_a_4xx_is_deterministic_and_goes_straight_to_the_error_handler(clock: FakeClock) -> None:
    client = ScriptedClient(answer(404, b"missing", "text/plain"))
    with pytest.raises(NodeExecutionError, match="answered 404 Reason: missing"):
        run(http_flow(retryTimes=3), client, clock)
    assert len(client.requests) == 1


def test_continue_with_replaces_a_failed_call(clock: FakeClock) -> None:
    client = ScriptedClient(answer(400))
    flow = http_flow(errorHandler={"strategy": "continue_with", "default": {"status": 0}})
    result, _ = run(flow, client, clock)
    assert result == {"status": 0}


def test_expect_makes_another_status_the_success(clock: FakeClock) -> None:
    client = ScriptedClient(answer(404, b'{"found": false}'))
    result, _ = run(http_flow(expect=[404, "2xx"]), client, clock)
    assert result["body"] == {"found": False}


def test_a_status_outside_expect_fails_even_when_it_is_a_2xx(clock: FakeClock) -> None:
    client = ScriptedClient(answer(200))
    with pytest.raises(NodeExecutionError, match="answered 200"):
        run(http_flow(expect=[201]), client, clock)


def test_a_timeout_goes_to_the_timeout_handler(clock: FakeClock) -> None:
    client = ScriptedClient(TimeoutError())
    with pytest.raises(NodeTimeoutError, match="timed out after 2000 ms"):
        run(http_flow(timeout="PT2S"), client, clock)
    assert client.limits == [(2.0, HttpPolicy().max_response_bytes)]


def test_a_node_without_a_timeout_gets_thirty_seconds_and_the_deployments_cap(
    clock: FakeClock,
) -> None:
    client = ScriptedClient(answer(200))
    run(http_flow(), client, clock, policy=HttpPolicy(max_response_bytes=4096))
    assert client.limits == [(30.0, 4096)]


@pytest.mark.parametrize(
    ("deployment", "node", "blocked"),
    [(False, None, False), (False, True, True), (True, None, True), (True, False, True)],
)
def test_the_deployments_policy_is_a_floor_the_node_can_only_raise(
    clock: FakeClock, deployment: bool, node: bool | None, blocked: bool
) -> None:
    client = ScriptedClient(answer(200))
    fields = {} if node is None else {"blockPrivateNetworks": node}
    run(http_flow(**fields), client, clock, policy=HttpPolicy(block_private=deployment))
    assert client.requests[0].block_private is blocked


def test_a_url_that_renders_to_no_url_is_a_deterministic_failure(clock: FakeClock) -> None:
    client = ScriptedClient()
    with pytest.raises(NodeExecutionError, match="must be an absolute http"):
        run(http_flow(url="${target}", retryTimes=3), client, clock, input={"target": "ftp://x"})
    assert client.requests == []


class CurrentSpan:
    """A tracer whose current span is always ``context`` (only ``current`` is used here)."""

    enabled = True

    def __init__(self, context: TraceContext) -> None:
        self.context = context

    def current(self) -> TraceContext | None:
        return self.context


def test_the_running_nodes_span_is_carried_on_as_traceparent(clock: FakeClock) -> None:
    """C6 across services: the called endpoint's spans join the execution's trace."""
    span = TraceContext("00-" + "ab" * 16 + "-" + "cd" * 8 + "-01", "vendor=1")
    client = ScriptedClient(answer(200))
    flow = http_flow()
    context = ExecutionContext(execution_id="x-1", flow_id=flow.flow_id, input={})
    FlowExecution(
        flow,
        context,
        handlers=HandlerRegistry([]),
        clock=clock,
        new_id=SequentialIds().new_id,
        http_client=client,
        tracer=CurrentSpan(span),  # type: ignore[arg-type]
    ).run()
    headers = dict(client.requests[0].headers)
    assert (headers["traceparent"], headers["tracestate"]) == (span.traceparent, "vendor=1")


def test_a_run_without_an_http_client_says_what_to_do(clock: FakeClock) -> None:
    flow = http_flow()
    context = ExecutionContext(execution_id="x-1", flow_id=flow.flow_id, input={})
    execution = FlowExecution(
        flow, context, handlers=HandlerRegistry([]), clock=clock, new_id=SequentialIds().new_id
    )
    with pytest.raises(NodeExecutionError, match="given no HTTP client") as raised:
        execution.run()
    assert isinstance(raised.value.__cause__, HttpRequestError)


# --- on a worker: one attempt per step, a retry is a delayed carrier (E15, W8) ------------


async def test_on_a_worker_a_503_is_retried_through_the_delay_queue(twin: Twin) -> None:
    twin.http = ScriptedClient(answer(503, b"busy", "text/plain"), answer(200, b'{"ok": 1}'))
    await twin.catalog.register(http_flow(retryTimes=2), owner=SHARED)
    start = TaskEnvelope.start(
        execution_id="x-1",
        flow_id="calls",
        version="1",
        params={},
        now_ms=twin.clock.now_ms(),
        generations=LEGACY_GENERATIONS,
    )
    first = await twin.process(start)
    assert (first.disposition, first.outcome) == (Disposition.ACK, "retry_scheduled")
    [(retry, due)] = first.schedule
    assert due == twin.clock.now_ms() + 1000
    state = await twin.executions.load("x-1")
    assert state is not None and state.last_failure is not None
    assert "answered 503" in state.last_failure.message and state.last_failure.transient

    twin.clock.advance(1.0)
    second = await twin.process(retry)
    assert second.outcome == "completed"
    state = await twin.executions.load("x-1")
    assert state is not None and state.result == {
        "status": 200,
        "headers": {"content-type": "application/json", "x-request-id": "r-1"},
        "body": {"ok": 1},
    }
    kinds = [entry.kind for entry in (await twin.executions.history("x-1")).entries]
    assert kinds.count(HistoryKind.RETRY_SCHEDULED) == 1
    started = [
        entry
        for entry in (await twin.executions.history("x-1")).entries
        if entry.kind is HistoryKind.NODE_STARTED and entry.node_id == "call"
    ]
    assert [entry.attempt for entry in started] == [1, 2]
    assert started[0].detail["params"]["url"] == "https://api.example/x"
