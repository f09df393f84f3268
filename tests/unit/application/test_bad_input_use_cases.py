"""Library callers meet the same id rule and JSON limits as the console and the CLI:
StartExecution and PublishEvent refuse bad input by name and write nothing (R4, C1, C4)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from plaita.adapters.memory.dedup import MemoryDedupStore
from plaita.adapters.memory.events import MemoryEventLog
from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.adapters.memory.inbox import MemoryInbox
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.application.codec import decode_envelope
from plaita.application.use_cases.dedup_claims import DedupClaims
from plaita.application.use_cases.events import PublishEvent
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.start_execution import StartExecution
from plaita.domain.envelope import LEGACY_GENERATIONS
from plaita.domain.errors import (
    InvalidExecutionIdError,
    InvalidFlowIdError,
    PayloadTooDeepError,
    PayloadTooLargeError,
)
from plaita.domain.events import EventQuery
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.limits import MAX_JSON_BYTES, MAX_JSON_DEPTH

from .conftest import FakeClock, SequentialIds


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.fixture
def queue(clock: FakeClock) -> MemoryTaskQueue:
    return MemoryTaskQueue(clock)


@pytest.fixture
async def start(clock: FakeClock, ids: SequentialIds, queue: MemoryTaskQueue) -> StartExecution:
    catalog = FlowCatalog(MemoryFlowRepository(), None, clock=clock)
    await catalog.register(
        Flow.from_document({"flow_id": "f", "start": "a", "nodes": [{"id": "a", "type": "end"}]}),
        owner=SHARED,
    )
    executions = MemoryExecutionRepository(MemoryLeaseManager(clock))
    claims = DedupClaims(dedup=MemoryDedupStore(clock), executions=executions)
    return StartExecution(
        flows=catalog,
        queue=queue,
        claims=claims,
        executions=executions,
        clock=clock,
        ids=ids,
        generations=LEGACY_GENERATIONS,
    )


@pytest.mark.parametrize(
    ("call", "error", "named"),
    [
        ({"execution_id": "../../etc"}, InvalidExecutionIdError, "execution id '../../etc'"),
        ({"flow_id": "a/b"}, InvalidFlowIdError, "flow id 'a/b'"),
        ({"params": nested(MAX_JSON_DEPTH + 1)}, PayloadTooDeepError, "input depth limit"),
        (
            {"params": {"blob": "x" * MAX_JSON_BYTES}},
            PayloadTooLargeError,
            "execution input size limit",
        ),
        (
            # A large input that fits, with a dedup key that takes its envelope over the limit:
            # refused here rather than dead-lettered by the worker.
            {"params": {"blob": "x" * (MAX_JSON_BYTES - 100)}, "dedup_key": "k" * 100_000},
            PayloadTooLargeError,
            "task envelope size limit",
        ),
    ],
)
async def test_start_refuses_bad_input_by_name_and_enqueues_nothing(
    start: StartExecution,
    queue: MemoryTaskQueue,
    call: dict[str, Any],
    error: type[Exception],
    named: str,
) -> None:
    arguments = {"flow_id": "f", **call}
    with pytest.raises(error, match=re.escape(named)):
        await start(arguments.pop("flow_id"), **arguments)
    assert (await queue.stats()).length == 0


async def test_a_start_at_the_limits_is_a_carrier_the_worker_accepts(
    start: StartExecution, queue: MemoryTaskQueue
) -> None:
    """The boundaries agree: the largest accepted input decodes on the worker's side."""
    params = {"deep": nested(MAX_JSON_DEPTH - 1), "blob": "x" * (MAX_JSON_BYTES - 1000)}
    await start("f", params=params, execution_id="order:7")
    [delivery] = await queue.read("worker", count=1, block_ms=0)
    assert delivery.envelope is not None and delivery.envelope.params == params
    assert decode_envelope(delivery.raw) == delivery.envelope


@pytest.fixture
def publish(clock: FakeClock, ids: SequentialIds) -> tuple[PublishEvent, MemoryEventLog]:
    events = MemoryEventLog(clock)
    return PublishEvent(events=events, clock=clock, ids=ids, inbox=MemoryInbox(clock)), events


@pytest.mark.parametrize(
    ("call", "error", "named"),
    [
        ({"data": nested(MAX_JSON_DEPTH + 1)}, PayloadTooDeepError, "event data depth limit"),
        ({"data": nested(10_000)}, PayloadTooDeepError, "data (event data)"),
        ({"data": {"blob": "x" * MAX_JSON_BYTES}}, PayloadTooLargeError, "event data size"),
        (
            # The carrier embeds the whole event: its correlation id counts too.
            {"data": {"blob": "x" * (MAX_JSON_BYTES - 100)}, "correlation_id": "c" * 1000},
            PayloadTooLargeError,
            "event data size limit",
        ),
    ],
)
async def test_publish_refuses_event_data_over_the_limits_and_stores_nothing(
    publish: tuple[PublishEvent, MemoryEventLog],
    call: dict[str, Any],
    error: type[Exception],
    named: str,
) -> None:
    use_case, events = publish
    with pytest.raises(error, match=re.escape(named)):
        await use_case("t", **call)
    assert list(await events.list(EventQuery(limit=10))) == []
