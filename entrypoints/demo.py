"""``plaita demo``: two approval executions on the memory twin, through the real worker code.

The worker loop, the event filter, the use cases and the engine are the production ones; only
the adapters are the in-memory twins, so nothing outside this process is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path

from plaita.application.ports import ExecutionRepository
from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import PlaitaError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow_owners import SHARED
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.cli_support import import_handler_modules, load_flow_file
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.event_filter import EventFilterService
from plaita.entrypoints.settings import Settings
from plaita.entrypoints.timeline import TimelinePrinter
from plaita.entrypoints.worker import Worker

HANDLER_MODULE = "examples.handlers"
#: Bounds every wait of the demo so a bug shows as a failure, never as a hang.
DEMO_TIMEOUT_SECONDS = 20.0


async def _wait_for(
    container: Container, execution_id: str, statuses: set[ExecutionStatus]
) -> ExecutionState:
    executions: ExecutionRepository = container.executions()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEMO_TIMEOUT_SECONDS
    while loop.time() < deadline:
        with tenant_scope(DEFAULT_TENANT):  # the demo's executions are the default tenant's
            state = await executions.load(execution_id)
        if state is not None and state.status in statuses:
            return state
        await asyncio.sleep(0.01)
    raise TimeoutError(f"execution {execution_id} did not reach {sorted(statuses)} in time")


async def _demo(examples_dir: Path, echo: Callable[[str], None]) -> int:
    settings = Settings(
        backend="memory",
        handler_modules=(HANDLER_MODULE,),
        read_block_ms=20,
        concurrency=8,
        consumer_name="demo-worker",
    )
    container = build_container(settings)
    labels: dict[str, str] = {}
    printer = TimelinePrinter(echo, labels)
    container.listeners.override(lambda: [printer])
    import_handler_modules(settings.handler_modules)
    registered = await container.flows().register(
        load_flow_file(examples_dir / "flows" / "approval.json"), owner=SHARED
    )
    flow = registered.flow
    echo(f"registered flow {flow.flow_id} v{flow.version} on the in-memory twin\n")

    stop = asyncio.Event()
    worker: Worker = container.worker()
    event_filter: EventFilterService = container.event_filter(consumer="demo-event-filter")
    services = [asyncio.create_task(worker.run(stop)), asyncio.create_task(event_filter.run(stop))]
    try:
        start = container.start_execution()
        small = await start(flow.flow_id, params={"amount": 250})
        large = await start(flow.flow_id, params={"amount": 5000})
        labels[small.execution_id] = "small (250)"
        labels[large.execution_id] = "large (5000)"

        await _wait_for(container, large.execution_id, {ExecutionStatus.SUSPENDED})
        echo("\n-- the large request waits for an approval_decision; publishing one --\n")
        await container.publish_event()(
            "approval_decision",
            data={"approved": True, "by": "demo approver"},
            correlation_id=large.execution_id,
            source="demo",
        )
        finals = [
            await _wait_for(
                container, e.execution_id, {s for s in ExecutionStatus if s.is_terminal}
            )
            for e in (small, large)
        ]
    finally:
        stop.set()
        for task in services:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=5)

    echo("\nfinal states:")
    for state in finals:
        label = labels[state.execution_id]
        echo(f"  {label:<14} {state.status.value:<10} {json.dumps(state.result)}")
    return 0 if all(s.status is ExecutionStatus.COMPLETED for s in finals) else 1


async def _default_tenants_demo(examples_dir: Path, echo: Callable[[str], None]) -> int:
    with tenant_scope(DEFAULT_TENANT):  # the demo starts and decides as the default tenant
        return await _demo(examples_dir, echo)


def run_demo(examples_dir: Path, echo: Callable[[str], None]) -> int:
    try:
        return asyncio.run(_default_tenants_demo(examples_dir, echo))
    except (PlaitaError, TimeoutError) as exc:
        echo(f"demo failed: {type(exc).__name__}: {exc}")
        return 1
