"""NodeRunner: one node's whole life — attempts, timeouts, retries, error strategies (E3, E4)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.engine.context import ExecutionContext, NodeContext
from plaita.application.engine.expressions import (
    ExpressionEvaluationError,
    evaluate,
    render_template,
)
from plaita.application.handlers import Handler, HandlerRegistry
from plaita.application.null_objects import NO_TRACING, NoHttpClient
from plaita.application.ports import Clock, HttpClient, Tracer
from plaita.domain.branching import (
    BRANCH_MISS_EVENT,
    BranchTaken,
    decide_if,
    decide_switch,
    resolve_branch_miss,
)
from plaita.domain.budgets import DEFAULT_RETRIES, decide_retry, resolve_retry_times
from plaita.domain.durations import parse_duration_ms
from plaita.domain.errors import PayloadLimitError
from plaita.domain.failures import (
    DeterministicNodeError,
    ExecutionCancelledError,
    ExecutionDeadlineError,
    FlowExecutionException,
    NodeExecutionError,
    NodeRetryRequested,
    NodeTimeoutError,
    ResultLimitError,
    classify_failure,
)
from plaita.domain.flow import (
    BaseNode,
    EndNode,
    FailureStrategy,
    HttpNode,
    IfNode,
    SwitchNode,
    TaskNode,
)
from plaita.domain.http_calls import (
    DEFAULT_HTTP_POLICY,
    DEFAULT_HTTP_TIMEOUT_MS,
    ExpectedStatuses,
    HttpPolicy,
    ResponseVerdict,
    build_request,
    judge_response,
    response_result,
    status_failure,
)
from plaita.domain.http_targets import effective_block_private
from plaita.domain.limits import RESULT_LIMIT, check_json_value
from plaita.domain.timeouts import (
    AttemptLimit,
    attempt_limit,
    backoff_within_budget,
    deadline_at,
    remaining_ms,
)

JSON = Any
log = logging.getLogger("plaita.engine.runner")
Sleep = Callable[[float], Awaitable[None]]
#: One attempt of a task or http node: (attempt number, its timeout in seconds) → result.
Attempt = Callable[[int, float | None], Awaitable[JSON]]
#: A runner given no HTTP client: its http nodes fail with a named error.
NO_HTTP_CLIENT = NoHttpClient()

#: Backoffs sleep in slices this long so a cancel is seen within a second (E3).
BACKOFF_SLICE_SECONDS = 0.5


@attrs.frozen
class NodeOutcome:
    result: JSON
    branch: str | None
    next_node_id: str | None


class Budget:
    """The execution's remaining time on an injected monotonic clock; the domain decides (E5)."""

    def __init__(self, clock: Clock, budget_ms: int | None) -> None:
        self._clock = clock
        self.budget_ms = budget_ms
        self._deadline = deadline_at(clock.monotonic(), budget_ms)

    def remaining_ms(self) -> float | None:
        return remaining_ms(self._deadline, self._clock.monotonic())

    def attempt_limit(self, node_timeout_ms: int | None) -> AttemptLimit:
        """The attempt's timeout and whether the execution budget (not the node) sets it."""
        return attempt_limit(self.remaining_ms(), node_timeout_ms)


class NodeRunner:
    """Runs one node at a time. ``default_retries`` is the retry count of a node without
    ``retryTimes`` (E15); ``http`` sends an http node's requests under ``http_policy``
    (E11), carrying on the current span of ``tracer`` (C6)."""

    def __init__(
        self,
        handlers: HandlerRegistry,
        callbacks: CallbackManager,
        clock: Clock,
        sleep: Sleep = asyncio.sleep,
        *,
        default_retries: int = DEFAULT_RETRIES,
        http: HttpClient = NO_HTTP_CLIENT,
        http_policy: HttpPolicy = DEFAULT_HTTP_POLICY,
        tracer: Tracer = NO_TRACING,
    ) -> None:
        self._handlers = handlers
        self._tracer = tracer
        self._http = http
        self._http_policy = http_policy
        self._callbacks = callbacks
        self._clock = clock
        self._sleep = sleep
        self._default_retries = default_retries

    async def run_node(
        self, node: BaseNode, context: ExecutionContext, budget: Budget, *, durable: bool = False
    ) -> NodeOutcome:
        """Run a task, http, if, switch or end node; record its result on success (E3).

        ``durable``: a transient failure with retries left raises ``NodeRetryRequested`` for
        the caller to retry later (a worker's delayed carrier) instead of sleeping here (E15).
        ``on_node_start`` fires once per run of a node, not again for its later attempts.
        """
        if context.attempt_of(node.id) == 1:
            self._callbacks.on_node_start(context.execution_id, node.id, node.type)
        if isinstance(node, TaskNode):
            result = await self._run_task(node, context, budget, durable=durable)
            outcome = NodeOutcome(result, None, node.next)
        elif isinstance(node, HttpNode):
            result = await self._run_http(node, context, budget, durable=durable)
            outcome = NodeOutcome(result, None, node.next)
        elif isinstance(node, IfNode | SwitchNode):
            outcome = self._run_branch(node, context)
        elif isinstance(node, EndNode):
            outcome = NodeOutcome(self._end_result(node, context), None, None)
        else:
            raise TypeError(f"NodeRunner cannot run {node.type} node {node.id!r}")
        context.record_node(node.id, outcome.result, outcome.branch)
        self._callbacks.on_node_end(context.execution_id, node.id, outcome.result, outcome.branch)
        return outcome

    # --- task nodes ------------------------------------------------------------------

    async def _run_task(
        self, node: TaskNode, context: ExecutionContext, budget: Budget, *, durable: bool
    ) -> JSON:
        async def attempt(number: int, timeout: float | None) -> JSON:
            handler = self._handlers.resolve(node.handler)
            params = render_template(node.params, context.names())
            context.rendered_params[node.id] = params
            return await self._invoke(handler, params, context, node.id, number, timeout)

        timeout_ms = _timeout_ms(node, default=None)
        return await self._attempts(node, context, budget, attempt, timeout_ms, durable)

    async def _run_http(
        self, node: HttpNode, context: ExecutionContext, budget: Budget, *, durable: bool
    ) -> JSON:
        expected = ExpectedStatuses.parse(node.expect)
        block_private = effective_block_private(
            deployment=self._http_policy.block_private, node=node.block_private_networks
        )

        async def attempt(number: int, timeout: float | None) -> JSON:
            names = context.names()
            request = build_request(
                node_id=node.id,
                method=node.method,
                url=render_template(node.url, names),
                headers=render_template(node.headers, names),
                body=render_template(node.body, names),
                block_private=block_private,
                expected=expected,
                trace=self._tracer.current(),
            )
            context.rendered_params[node.id] = request.for_history()
            seconds = DEFAULT_HTTP_TIMEOUT_MS / 1000 if timeout is None else timeout
            async with asyncio.timeout(seconds):
                response = await self._http.send(
                    request,
                    timeout_seconds=seconds,
                    max_response_bytes=self._http_policy.max_response_bytes,
                )
            verdict = judge_response(response.status, expected)
            if verdict is not ResponseVerdict.SUCCESS:
                raise status_failure(node.id, request, response, verdict)
            return response_result(node.id, response)

        timeout_ms = _timeout_ms(node, default=DEFAULT_HTTP_TIMEOUT_MS)
        return await self._attempts(node, context, budget, attempt, timeout_ms, durable)

    async def _attempts(
        self,
        node: TaskNode | HttpNode,
        context: ExecutionContext,
        budget: Budget,
        attempt: Attempt,
        node_timeout_ms: int | None,
        durable: bool,
    ) -> JSON:
        """The attempts of a task or http node, each bounded by its timeout and the
        execution's budget; a failure is retried, or goes to the node's handlers (E3, E4)."""
        retry_times = resolve_retry_times(node.retry_times, self._default_retries)
        number = context.attempt_of(node.id)
        while True:
            _check_cancel(context, node.id)
            limit = budget.attempt_limit(node_timeout_ms)
            if limit.deadline_spent:
                raise _deadline(node.id, budget)
            try:
                return _require_json(node.id, await attempt(number, limit.timeout_seconds))
            except TimeoutError:
                if limit.deadline_bound:
                    raise _deadline(node.id, budget) from None
                return _apply_strategy(
                    node.timeout_handler,
                    NodeTimeoutError(
                        f"node {node.id!r} timed out after {node_timeout_ms} ms", node_id=node.id
                    ),
                )
            except FlowExecutionException:
                raise
            except ExpressionEvaluationError as exc:
                return _apply_strategy(node.error_handler, _node_failed(node.id, exc))
            except Exception as exc:
                verdict = decide_retry(
                    classify_failure(exc), attempt=number, retry_times=retry_times
                )
                if not verdict.retry or verdict.delay_ms is None:
                    return _apply_strategy(node.error_handler, _node_failed(node.id, exc))
                if durable:
                    raise _retry_requested(node.id, exc, number, verdict.delay_ms) from exc
                await self._backoff(verdict.delay_ms / 1000, context, node.id, budget)
                number += 1

    async def _invoke(
        self,
        handler: Handler,
        params: JSON,
        context: ExecutionContext,
        node_id: str,
        attempt: int,
        timeout: float | None,
    ) -> JSON:
        attempt_cancel = threading.Event()
        node_context = NodeContext.for_attempt(context, node_id, attempt, attempt_cancel)
        try:
            # ``asyncio.timeout`` bounds the attempt in this task: no Task and no extra timer
            # handle per attempt, as ``wait_for`` would create.
            async with asyncio.timeout(timeout):
                if inspect.iscoroutinefunction(handler):
                    result = await handler(params, node_context)
                else:
                    result = await _run_sync(handler, params, node_context, timeout)
                    if inspect.isawaitable(result):
                        result = await result
            # Only a successful attempt's variables count; a failed or abandoned one's never do.
            context.variables.update(node_context.variable_updates)
            return result
        except TimeoutError:
            # The handler's thread cannot be killed: tell it to stop and abandon it (E4).
            attempt_cancel.set()
            raise

    async def _backoff(
        self, seconds: float, context: ExecutionContext, node_id: str, budget: Budget
    ) -> None:
        delay = backoff_within_budget(seconds, budget.remaining_ms())
        while delay > 0:
            _check_cancel(context, node_id)
            step = min(BACKOFF_SLICE_SECONDS, delay)
            await self._sleep(step)
            delay -= step

    # --- branch and end nodes -----------------------------------------------------------

    def _run_branch(self, node: IfNode | SwitchNode, context: ExecutionContext) -> NodeOutcome:
        names = context.names()
        try:
            if isinstance(node, IfNode):
                decision = decide_if(node, bool(evaluate(node.condition, names)))
            else:
                # Lazy: cases after the first match are never evaluated.
                matches = (bool(evaluate(case.when, names)) for case in node.cases)
                decision = decide_switch(node, matches)
        except ExpressionEvaluationError as exc:
            value = _apply_strategy(node.error_handler, _node_failed(node.id, exc))
            return NodeOutcome(value, None, None)
        if isinstance(decision, BranchTaken):
            return NodeOutcome(decision.result, decision.label, decision.target)
        outcome = resolve_branch_miss(decision, node.error_handler)
        if not outcome.ends_flow:
            raise decision.error()
        # E7: a miss never leaves the execution running; `continue` ends the flow here.
        log.warning(
            "event=%s execution_id=%s node_id=%s: %s; the errorHandler ends the flow here",
            BRANCH_MISS_EVENT,
            context.execution_id,
            node.id,
            decision.message,
        )
        return NodeOutcome(outcome.value, None, None)

    def _end_result(self, node: EndNode, context: ExecutionContext) -> JSON:
        if node.output is None:
            return (
                None
                if context.last_node_id is None
                else context.node_results.get(context.last_node_id)
            )
        try:
            return _require_json(node.id, evaluate(node.output, context.names()))
        except (ExpressionEvaluationError, DeterministicNodeError) as exc:
            return _apply_strategy(node.error_handler, _node_failed(node.id, exc))


async def _run_sync(
    handler: Handler, params: JSON, node_context: NodeContext, timeout: float | None
) -> JSON:
    """The sync handler on a thread; the caller bounds the wait by ``timeout``. With no
    timeout it runs on the loop's pool; with one, on a daemon thread of its own."""
    # Each path runs inside a copy of the caller's contextvars: a tenant or trace ContextVar
    # set by the caller must be visible to the handler's thread (#58).
    loop = asyncio.get_running_loop()
    copied = contextvars.copy_context()
    if timeout is None:
        return await loop.run_in_executor(None, copied.run, handler, params, node_context)
    future: asyncio.Future[JSON] = loop.create_future()

    def settle(result: JSON, error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def target() -> None:
        try:
            result, error = copied.run(handler, params, node_context), None
        except BaseException as exc:
            result, error = None, exc
        # An abandoned attempt may outlive its event loop; nobody waits for it any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, result, error)

    # A daemon thread of its own: on timeout it is abandoned and must not hold a pool slot.
    threading.Thread(target=target, name=f"plaita-node-{node_context.node_id}", daemon=True).start()
    return await future


def _timeout_ms(node: BaseNode, *, default: int | None) -> int | None:
    """A node's attempt timeout: its own, else ``default`` (none for a task, E4)."""
    if node.timeout is None:
        return default
    return parse_duration_ms(node.timeout, field=f"node {node.id!r} timeout")


def _check_cancel(context: ExecutionContext, node_id: str) -> None:
    if context.cancel_event.is_set():
        raise ExecutionCancelledError(f"execution cancelled at node {node_id!r}", node_id=node_id)


def _deadline(node_id: str, budget: Budget) -> ExecutionDeadlineError:
    return ExecutionDeadlineError(
        f"execution deadline of {budget.budget_ms} ms reached at node {node_id!r}", node_id=node_id
    )


def _node_failed(node_id: str, cause: BaseException) -> NodeExecutionError:
    error = NodeExecutionError(
        f"node {node_id!r} failed: {type(cause).__name__}: {cause}",
        node_id=node_id,
        code=getattr(cause, "code", None)
        if isinstance(getattr(cause, "code", None), int)
        else None,
    )
    error.__cause__ = cause
    return error


def _retry_requested(
    node_id: str, cause: BaseException, attempt: int, delay_ms: int
) -> NodeRetryRequested:
    error = NodeRetryRequested(
        f"node {node_id!r} failed (attempt {attempt}): {type(cause).__name__}: {cause}; "
        f"retrying in {delay_ms} ms",
        node_id=node_id,
        attempt=attempt,
        delay_ms=delay_ms,
    )
    error.__cause__ = cause
    return error


def fail_through_handler(node: BaseNode, cause: BaseException) -> JSON:
    """What ``node``'s errorHandler makes of ``cause``: the value to go on with
    (``continue``, ``continue_with``), or the node's failure raised (``abort``)."""
    return _apply_strategy(node.error_handler, _node_failed(node.id, cause))


def _apply_strategy(strategy: FailureStrategy, error: FlowExecutionException) -> JSON:
    if strategy.strategy == "continue":
        return None
    if strategy.strategy == "continue_with":
        return strategy.default
    raise error


def _require_json(node_id: str, value: JSON) -> JSON:
    """The value as a checkpoint will restore it: a tuple becomes a list, keys become strings.

    Normalising here makes Normal mode see exactly what Distributed mode sees after a
    checkpoint, so both take the same branches.
    """
    try:
        return json.loads(check_json_value(value, RESULT_LIMIT, field=f"node {node_id!r} result"))
    except PayloadLimitError as exc:
        raise ResultLimitError(str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise DeterministicNodeError(
            f"node {node_id!r} produced a value that is not JSON-serialisable: {exc}"
        ) from None
