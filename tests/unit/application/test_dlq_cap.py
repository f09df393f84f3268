"""The DLQ length cap seen by an operator (W10): a dropped entry is "not found", by name."""

from __future__ import annotations

import pytest

from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.replay_markers import MemoryReplayMarkerStore
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.application.use_cases.dlq import (
    ReplayDeadLetter,
    ShowDeadLetter,
    UnknownDeadLetterError,
)
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope

from .conftest import FakeClock, SequentialIds

DLQ_KEY = "plaita:q:{default}:dlq"


async def _dead_letters(queue: MemoryTaskQueue, count: int) -> list[str]:
    for n in range(count):
        await queue.enqueue(
            TaskEnvelope.start(
                execution_id=f"x-{n}",
                flow_id="f",
                version="1",
                params={},
                now_ms=1,
                generations=LEGACY_GENERATIONS,
            )
        )
    return [
        await queue.dead_letter(delivery, "budget spent")
        for delivery in await queue.read("w1", count=count, block_ms=0)
    ]


async def test_replaying_an_entry_the_cap_dropped_is_refused_as_not_found(
    clock: FakeClock, ids: SequentialIds
) -> None:
    queue = MemoryTaskQueue(clock, dead_letter_max_len=2)
    markers = MemoryReplayMarkerStore(clock)
    dropped, *kept = await _dead_letters(queue, 3)
    replay = ReplayDeadLetter(
        queue=queue,
        markers=markers,
        executions=MemoryExecutionRepository(MemoryLeaseManager(clock)),
        clock=clock,
        ids=ids,
        dlq_key=DLQ_KEY,
    )

    with pytest.raises(UnknownDeadLetterError, match="length cap") as refused:
        await replay(dropped)

    assert "PLAITA_DLQ_MAX_LEN" in str(refused.value)
    assert await markers.get(DLQ_KEY, dropped) is None  # nothing claimed, nothing enqueued
    assert (await queue.stats()).length == 3
    show = ShowDeadLetter(queue=queue, markers=markers, dlq_key=DLQ_KEY)
    assert [(await show(dlq_id)).dlq_id for dlq_id in kept] == kept
