"""FlowExecution: a thin facade over context, runner, callbacks and strategies (E10).

Explicit properties only: a misspelt attribute is an ordinary attribute error, never state that
silently travels in a checkpoint. Entry points, sync and async:

- ``run`` / ``arun``: Normal mode, to an end node; returns the result.
- ``iter_nodes`` / ``aiter_nodes``: Generator mode, one ``StepOutput`` per node.
- ``run_distributed`` / ``arun_distributed``: Distributed mode, exactly one node from a
  checkpoint position; ``astep`` is the same step told as a ``StepOutcome`` (the worker's).

Errors keep three deliberately different shapes (E8): Normal and Generator let
``FlowExecutionException`` subclasses through and wrap anything else as
``FlowErrorException(-500)``; Distributed flattens everything to ``FlowErrorException`` with
the original as ``__cause__``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any, Literal

import attrs

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.engine.children import (
    NO_CHILD_EXECUTIONS,
    NO_CHILD_RUNS,
    ChildExecutions,
    ChildRuns,
    FlowResolver,
    InProcessChildren,
)
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.distributed import (
    DistributedStrategy,
    StepKind,
    StepOutcome,
    SuspensionRegistrar,
)
from plaita.application.engine.runner import NO_HTTP_CLIENT, Budget, NodeRunner, Sleep
from plaita.application.engine.strategies import (
    GeneratorStrategy,
    NormalStrategy,
    ResumeInput,
    StepOutput,
)
from plaita.application.handlers import HandlerRegistry
from plaita.application.null_objects import NO_RATE_BUCKETS, NO_TRACING, NoEventSource
from plaita.application.ports import Clock, EventWaiter, HttpClient, RateBuckets, Tracer
from plaita.domain.budgets import DEFAULT_RETRIES
from plaita.domain.failures import (
    FlowErrorException,
    FlowExecutionException,
    NodeRetryRequested,
)
from plaita.domain.flow import Flow
from plaita.domain.http_calls import DEFAULT_HTTP_POLICY, HttpPolicy
from plaita.domain.timeouts import DEFAULT_EXECUTION_DEADLINE_MS, execution_budget_ms

JSON = Any


@attrs.frozen
class RunOptions:
    """Per-run options: the mode ``arun`` uses, the caller's timeout, the default deadline,
    the retries of a node without ``retryTimes`` (E15), the http nodes' policy (E11)."""

    mode: Literal["normal", "generator", "distributed"] = "normal"
    timeout_ms: int | None = None
    default_deadline_ms: int = DEFAULT_EXECUTION_DEADLINE_MS
    default_retries: int = DEFAULT_RETRIES
    #: The deployment's rules for http nodes: the SSRF floor and the response size cap (E11).
    http_policy: HttpPolicy = DEFAULT_HTTP_POLICY


def effective_budget_ms(flow: Flow, options: RunOptions) -> int:
    """Flow timeout vs caller timeout: the stricter; neither → the default deadline (E5)."""
    return execution_budget_ms(flow.timeout_ms, options.timeout_ms, options.default_deadline_ms)


def _normal_error(error: Exception) -> FlowExecutionException:
    if isinstance(error, FlowExecutionException):
        return error
    wrapped = FlowErrorException(
        f"{type(error).__name__}: {error}", node_id=getattr(error, "node_id", None)
    )
    wrapped.__cause__ = error
    return wrapped


#: A run given no event bus: its ``event`` nodes fail with a named error (E6).
NO_EVENT_SOURCE = NoEventSource()


class FlowExecution:
    def __init__(
        self,
        flow: Flow,
        context: ExecutionContext,
        *,
        handlers: HandlerRegistry,
        clock: Clock,
        new_id: Callable[[], str],
        options: RunOptions | None = None,
        callbacks: CallbackManager | None = None,
        event_waiter: EventWaiter = NO_EVENT_SOURCE,
        sleep: Sleep = asyncio.sleep,
        http_client: HttpClient = NO_HTTP_CLIENT,
        tracer: Tracer = NO_TRACING,
        child_executions: ChildExecutions = NO_CHILD_EXECUTIONS,
        child_flows: FlowResolver | None = None,
        rate_buckets: RateBuckets = NO_RATE_BUCKETS,
    ) -> None:
        """``child_executions``: how a worker's subflow and map nodes start children
        (Distributed); ``child_flows``: where Normal and Generator runs find the flows their
        children run, in this process, with this run's handlers and options (E13, E14).
        ``rate_buckets``: where Normal and Generator runs take their nodes' rate limit tokens
        (W23; a worker's step takes them before the engine runs a node)."""
        self._flow = flow
        self._context = context
        self._clock = clock
        self._options = options or RunOptions()
        self._callbacks = callbacks or CallbackManager()
        self._runner = NodeRunner(
            handlers,
            self._callbacks,
            clock,
            sleep,
            default_retries=self._options.default_retries,
            http=http_client,
            http_policy=self._options.http_policy,
            tracer=tracer,
        )
        child_runs: ChildRuns = NO_CHILD_RUNS
        if child_flows is not None:

            async def run_child(child: Flow, context: ExecutionContext) -> JSON:
                nested = FlowExecution(
                    child,
                    context,
                    handlers=handlers,
                    clock=clock,
                    new_id=new_id,
                    options=attrs.evolve(self._options, mode="normal", timeout_ms=None),
                    callbacks=self._callbacks,
                    event_waiter=event_waiter,
                    sleep=sleep,
                    http_client=http_client,
                    tracer=tracer,
                    child_flows=child_flows,
                    rate_buckets=rate_buckets,
                )
                return await nested.arun()

            child_runs = InProcessChildren(child_flows, run_child)
        walk: dict[str, Any] = {
            "event_waiter": event_waiter,
            "new_id": new_id,
            "now_ms": clock.now_ms,
            "sleep": sleep,
            "child_runs": child_runs,
            "rate_buckets": rate_buckets,
        }
        self._normal = NormalStrategy(self._runner, self._callbacks, **walk)
        self._generator = GeneratorStrategy(self._runner, self._callbacks, **walk)
        self._distributed = DistributedStrategy(self._runner, self._callbacks, child_executions)

    @property
    def flow(self) -> Flow:
        return self._flow

    @property
    def context(self) -> ExecutionContext:
        return self._context

    @property
    def options(self) -> RunOptions:
        return self._options

    @property
    def mode(self) -> str:
        return self._options.mode

    @property
    def timeout_ms(self) -> int | None:
        return self._options.timeout_ms

    @property
    def callback_manager(self) -> CallbackManager:
        return self._callbacks

    @property
    def execution_id(self) -> str:
        return self._context.execution_id

    def cancel(self) -> None:
        """Ask the running node to stop; seen at each attempt and within 1 s of a backoff."""
        self._context.cancel_event.set()

    def _budget(self) -> Budget:
        return Budget(self._clock, effective_budget_ms(self._flow, self._options))

    # --- Normal ------------------------------------------------------------------------

    async def arun(self) -> JSON:
        """Run to an end node and return its result (Normal mode; Generator mode walks alike)."""
        if self._options.mode == "distributed":
            raise ValueError("a distributed execution advances with arun_distributed()")
        last: StepOutput | None = None
        async for output in self.aiter_nodes():
            last = output
        return None if last is None else last.result

    def run(self) -> JSON:
        """Blocking ``arun`` for callers without a running event loop."""
        return asyncio.run(self.arun())

    # --- Generator ---------------------------------------------------------------------

    async def aiter_nodes(self) -> AsyncGenerator[StepOutput, None]:
        """One output per node; ``on_flow_end`` fires when exhausted, failed or closed early."""
        self._callbacks.on_flow_start(self.execution_id, self._flow.flow_id)
        last: StepOutput | None = None
        error: FlowExecutionException | None = None
        finished = False
        try:
            async for output in self._generator.outputs(self._flow, self._context, self._budget()):
                last = output
                yield output
            finished = True
        except Exception as exc:
            error = _normal_error(exc)
            if error is exc:
                raise
            raise error from exc
        finally:
            # Closed early: the flow did not finish, so there is no result and no error.
            result = last.result if finished and last is not None else None
            self._callbacks.on_flow_end(self.execution_id, result, error)

    def iter_nodes(self) -> Iterator[StepOutput]:
        """Blocking ``aiter_nodes`` on a private event loop; closing it closes the walk."""
        loop = asyncio.new_event_loop()
        outputs = self.aiter_nodes()
        try:
            while True:
                try:
                    yield loop.run_until_complete(outputs.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            loop.run_until_complete(outputs.aclose())
            loop.close()

    # --- Distributed -------------------------------------------------------------------

    async def astep(
        self,
        *,
        node_id: str,
        resume: ResumeInput | None,
        registrar: SuspensionRegistrar,
    ) -> StepOutcome:
        """Advance one node from ``node_id``: the step's outcome, a node failure included (E6).

        The worker's call. Listeners hear the flow end when the step ends it; a node failure
        is the caller's to judge (a retry or the end), so it ends nothing here, and a retried
        start node does not start the flow again.
        """
        starts = node_id == self._flow.start_node.id and self._context.last_node_id is None
        if starts and self._context.attempt_of(node_id) == 1:
            self._callbacks.on_flow_start(self.execution_id, self._flow.flow_id)
        try:
            outcome = await self._distributed.step(
                self._flow,
                self._context,
                node_id=node_id,
                resume=resume,
                registrar=registrar,
                budget=self._budget(),
            )
        except Exception as exc:
            return StepOutcome.failed(node_id, exc)
        if outcome.kind is StepKind.ENDED and outcome.output is not None:
            self._callbacks.on_flow_end(self.execution_id, outcome.output.result, None)
        return outcome

    async def arun_distributed(
        self,
        *,
        node_id: str,
        resume: ResumeInput | None,
        registrar: SuspensionRegistrar,
    ) -> StepOutput:
        """Advance one node from ``node_id``; every error becomes FlowErrorException (E8).

        A node that asks for a durable retry (``NodeRetryRequested``, E15) has not ended the
        flow: ``on_flow_end`` waits for the attempt that does.
        """
        outcome = await self.astep(node_id=node_id, resume=resume, registrar=registrar)
        if outcome.error is not None:
            if not isinstance(outcome.error.__cause__, NodeRetryRequested):
                self._callbacks.on_flow_end(self.execution_id, None, outcome.error)
            raise outcome.error
        assert outcome.output is not None
        return outcome.output

    def run_distributed(
        self,
        *,
        node_id: str,
        resume: ResumeInput | None,
        registrar: SuspensionRegistrar,
    ) -> StepOutput:
        """Blocking ``arun_distributed`` for callers without a running event loop."""
        return asyncio.run(
            self.arun_distributed(node_id=node_id, resume=resume, registrar=registrar)
        )
