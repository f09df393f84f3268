"""FlowExecution: a thin facade over context, runner, callbacks and a strategy (E10).

Explicit properties only: a misspelt attribute is an ordinary attribute error, never state that
silently travels in a checkpoint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

import attrs

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.runner import Budget, NodeRunner, Sleep
from plaita.application.engine.strategies import (
    DistributedStrategy,
    EventWaiter,
    NormalStrategy,
    ResumeInput,
    StepOutput,
    SuspensionRegistrar,
)
from plaita.application.handlers import HandlerRegistry
from plaita.application.ports import Clock
from plaita.domain.failures import FlowErrorException, FlowExecutionException
from plaita.domain.flow import Flow

JSON = Any

DEFAULT_EXECUTION_DEADLINE_MS = 1_800_000


@attrs.frozen
class RunOptions:
    """Per-run options: the mode, the caller's timeout and the default deadline (E5)."""

    mode: Literal["normal", "distributed"] = "normal"
    timeout_ms: int | None = None
    default_deadline_ms: int = DEFAULT_EXECUTION_DEADLINE_MS


def effective_budget_ms(flow: Flow, options: RunOptions) -> int:
    """Flow timeout vs caller timeout: the stricter; neither → the default deadline (E5)."""
    explicit = [t for t in (flow.timeout_ms, options.timeout_ms) if t is not None]
    return min(explicit) if explicit else options.default_deadline_ms


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
        event_waiter: EventWaiter | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._flow = flow
        self._context = context
        self._clock = clock
        self._options = options or RunOptions()
        self._callbacks = callbacks or CallbackManager()
        self._runner = NodeRunner(handlers, self._callbacks, clock, sleep)
        self._normal = NormalStrategy(
            self._runner,
            self._callbacks,
            event_waiter=event_waiter,
            new_id=new_id,
            now_ms=clock.now_ms,
            sleep=sleep,
        )
        self._distributed = DistributedStrategy(self._runner, self._callbacks)

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

    async def arun(self) -> JSON:
        """Normal mode: run to an end node; FlowExecutionException subclasses pass (E8)."""
        self._callbacks.on_flow_start(self.execution_id, self._flow.flow_id)
        try:
            result = await self._normal.run(self._flow, self._context, self._budget())
        except FlowExecutionException as exc:
            self._callbacks.on_flow_end(self.execution_id, None, exc)
            raise
        except Exception as exc:
            wrapped = FlowErrorException(f"{type(exc).__name__}: {exc}")
            self._callbacks.on_flow_end(self.execution_id, None, wrapped)
            raise wrapped from exc
        self._callbacks.on_flow_end(self.execution_id, result, None)
        return result

    def run(self) -> JSON:
        """Blocking ``arun`` for callers without an event loop."""
        return asyncio.run(self.arun())

    async def arun_distributed(
        self,
        *,
        node_id: str,
        resume: ResumeInput | None,
        registrar: SuspensionRegistrar,
    ) -> StepOutput:
        """Distributed mode: one node; every error flattened to FlowErrorException (E8)."""
        try:
            return await self._distributed.step(
                self._flow,
                self._context,
                node_id=node_id,
                resume=resume,
                registrar=registrar,
                budget=self._budget(),
            )
        except Exception as exc:
            node = getattr(exc, "node_id", None) or node_id
            flattened = FlowErrorException(f"{type(exc).__name__}: {exc}", node_id=node)
            raise flattened from exc
