"""``plaita run``: one flow, in this process, in Normal or Generator mode (E6).

Nothing outside the process can publish to it, so events come from ``--event TYPE=JSON``
(kept in the execution's inbox before the run starts), and a wait that nothing can satisfy
fails at once instead of hanging.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from plaita.application.engine.children import FlowResolver
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.execution import FlowExecution, RunOptions
from plaita.application.use_cases.flows import validate_flow
from plaita.domain.errors import UnknownFlowError
from plaita.domain.events import Event
from plaita.domain.flow import Flow
from plaita.entrypoints.cli_support import import_handler_modules
from plaita.entrypoints.container import Container

JSON = Any


def run_flow(
    container: Container,
    flow: Flow,
    params: dict[str, JSON],
    events: Sequence[tuple[str, dict[str, JSON]]],
    *,
    stream: bool,
    emit: Callable[[str], None],
    children: Sequence[Flow] = (),
) -> JSON:
    """Run ``flow`` to its end; with ``stream`` emit one JSON line per node. Returns the result.

    ``children`` are the flows its subflow and map nodes may start, run in this process too.
    """
    handlers = container.handlers()
    validate_flow(flow, handlers)
    for child in children:
        validate_flow(child, handlers)
    import_handler_modules(tuple(sorted(handlers.allowed_modules)))
    clock, ids = container.clock(), container.ids()
    bus = container.closed_event_bus()
    execution_id = ids.new_id()
    for event_type, data in events:
        event = Event(
            event_id=ids.new_id(),
            event_type=event_type,
            timestamp_ms=clock.now_ms(),
            data=data,
            correlation_id=execution_id,
            source="plaita run",
        )
        asyncio.run(bus.publish(event))
    execution = FlowExecution(
        flow,
        ExecutionContext(execution_id=execution_id, flow_id=flow.flow_id, input=params),
        handlers=handlers,
        clock=clock,
        new_id=ids.new_id,
        options=RunOptions(
            mode="generator" if stream else "normal",
            default_deadline_ms=container.config.execution_deadline_ms(),
            default_retries=container.config.default_retries(),
            http_policy=container.http_policy(),
        ),
        event_waiter=bus,
        http_client=container.http_client(),
        child_flows=child_resolver(children),
        rate_buckets=container.in_process_rate_buckets(),
    )
    if not stream:
        return execution.run()
    result: JSON = None
    for output in execution.iter_nodes():
        emit(json.dumps(output.to_json(), sort_keys=True, default=str))
        result = output.result
    return result


def child_resolver(children: Sequence[Flow]) -> FlowResolver:
    """The flows given to ``plaita run --with-flow``, by id (and version, when a node names
    one); an id no file gave is a named error for the node that asks for it."""
    by_id: dict[str, list[Flow]] = {}
    for child in children:
        by_id.setdefault(child.flow_id, []).append(child)

    async def resolve(flow_id: str, version: str | None) -> Flow:
        found = [f for f in by_id.get(flow_id, []) if version is None or f.version == version]
        if not found:
            wanted = flow_id if version is None else f"{flow_id} version {version}"
            raise UnknownFlowError(
                f"flow {wanted!r} was not given to this run; add it with --with-flow FILE"
            )
        return found[-1]

    return resolve
