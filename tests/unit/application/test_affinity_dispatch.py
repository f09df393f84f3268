"""Affinity on the memory twin (W25): two workers, one queue, one registry.

A carrier for worker-b that worker-a takes is passed on (the copy enqueued before the
original is acked) and runs on worker-b; a target that is not running, or a carrier passed on
too often, loses its target and runs wherever it is read next.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from plaita.application.ports import WorkerInstance
from plaita.application.use_cases.step import DispatchResult, Disposition, ProcessTask
from plaita.domain.affinity import DEFAULT_MAX_HANDOVERS
from plaita.domain.envelope import TaskEnvelope, copy_envelope
from plaita.domain.errors import InvalidTargetInstanceError
from plaita.domain.execution import ExecutionStatus
from plaita.domain.history import HistoryEntry, HistoryKind
from plaita.domain.tombstone import Tombstone
from plaita.domain.worker_state import WorkerStatus

from .twin import Twin

A, B = "worker-a", "worker-b"
REGISTRY_TTL_MS = 15_000


def worker(twin: Twin, instance_id: str, **settings: Any) -> ProcessTask:
    """The worker step of instance ``instance_id`` on the twin's shared stores."""
    return attrs.evolve(
        twin, settings=attrs.evolve(twin.settings, holder_id=instance_id, **settings)
    ).process


async def register(twin: Twin, instance_id: str, status: WorkerStatus, *, age_s: float = 0) -> None:
    now = twin.clock.now_ms()
    record = WorkerInstance(instance_id, status.value, now - round(age_s * 1000), now - 60_000)
    await twin.registry.put(record, ttl_ms=REGISTRY_TTL_MS)


async def take(twin: Twin, process: ProcessTask) -> tuple[TaskEnvelope, DispatchResult]:
    """Read the oldest carrier, run it on ``process``, ack it as the worker does (on ACK)."""
    [delivery] = await twin.queue.read("test", count=1, block_ms=1)
    assert delivery.envelope is not None
    result = await process(delivery.envelope, message_id=delivery.message_id)
    if result.disposition is Disposition.ACK:
        await twin.queue.ack(delivery.message_id)
    return delivery.envelope, result


async def start_for(twin: Twin, target: str, amount: int = 10) -> str:
    started = await twin.start_execution(
        "approval", params={"amount": amount}, target_instance_id=target
    )
    return started.execution_id


async def entries(twin: Twin, execution_id: str, *kinds: HistoryKind) -> list[HistoryEntry]:
    page = await twin.executions.history(execution_id, limit=500)
    return [entry for entry in page.entries if entry.kind in kinds]


async def unread(twin: Twin) -> bool:
    """Whether a carrier waits on the stream that no worker has read yet."""
    return (await twin.queue.stats()).oldest_unread_ms is not None


# --- handed over ------------------------------------------------------------------------------


async def test_a_carrier_for_b_taken_by_a_is_handed_over_and_runs_on_b(twin: Twin) -> None:
    await register(twin, B, WorkerStatus.RUNNING)
    execution_id = await start_for(twin, B)

    _, on_a = await take(twin, worker(twin, A))

    assert (on_a.disposition, on_a.outcome) == (Disposition.ACK, "handed_over")
    assert twin.calls.log == [], "nothing ran on worker-a"
    copy, on_b = await take(twin, worker(twin, B))
    assert (copy.target_instance_id, copy.handovers) == (B, 1)
    assert on_b.outcome == "completed"
    assert twin.calls.log == ["request", "ship"]
    [started] = await entries(twin, execution_id, HistoryKind.STARTED)
    assert started.worker == B
    [handed] = await entries(twin, execution_id, HistoryKind.HANDED_OVER)
    assert handed.worker == A
    assert handed.detail == {"target": B, "handovers": 1, "reason": "target_running"}
    [accepted] = await entries(twin, execution_id, HistoryKind.ACCEPTED)
    assert accepted.detail["target"] == B


async def test_the_copy_is_enqueued_before_the_step_answers_ack(twin: Twin) -> None:
    """Copy, then ack — never the reverse: when the worker acks, the copy already waits."""
    await register(twin, B, WorkerStatus.RUNNING)
    await start_for(twin, B)
    [delivery] = await twin.queue.read("test", count=1, block_ms=1)
    assert delivery.envelope is not None

    result = await worker(twin, A)(delivery.envelope, message_id=delivery.message_id)

    assert result.disposition is Disposition.ACK
    assert await unread(twin), "the copy is on the stream"
    assert (await twin.queue.stats()).pending == 1, "and the original is not acked yet"


async def test_a_failed_enqueue_leaves_the_original_unacked(twin: Twin) -> None:
    """At least once: without its copy the original must stay pending, for a reclaim."""
    await register(twin, B, WorkerStatus.RUNNING)
    await start_for(twin, B)
    [delivery] = await twin.queue.read("test", count=1, block_ms=1)
    assert delivery.envelope is not None

    async def unreachable(envelope: TaskEnvelope) -> str:
        raise ConnectionError("redis went away")

    twin.queue.enqueue = unreachable  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        await worker(twin, A)(delivery.envelope, message_id=delivery.message_id)

    assert (await twin.queue.stats()).pending == 1, "nothing acked, nothing lost"


async def test_a_crash_between_copy_and_ack_leaves_a_harmless_duplicate(twin: Twin) -> None:
    """Both carriers reach worker-b; the second meets the finished execution and runs
    nothing again."""
    await register(twin, B, WorkerStatus.RUNNING)
    execution_id = await start_for(twin, B)
    [delivery] = await twin.queue.read("test", count=1, block_ms=1)
    assert delivery.envelope is not None
    await worker(twin, A)(delivery.envelope, message_id=delivery.message_id)
    # worker-a dies here: the original is never acked; it is reclaimed later.
    twin.clock.advance(120)
    await register(twin, B, WorkerStatus.RUNNING)

    _, first = await take(twin, worker(twin, B))
    [reclaimed] = await twin.queue.reclaim("test", min_idle_ms=60_000, count=10)
    assert reclaimed.envelope is not None
    second = await worker(twin, B)(reclaimed.envelope, message_id=reclaimed.message_id)

    assert first.outcome == "completed"
    assert second.disposition is Disposition.ACK and second.outcome != "completed"
    assert twin.calls.log == ["request", "ship"], "every node ran once"
    state = await twin.executions.load(execution_id)
    assert state is not None and state.status is ExecutionStatus.COMPLETED


# --- stripped ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (None, "target_absent"),
        (WorkerStatus.DRAINING, "target_not_running"),
        (WorkerStatus.STOPPED, "target_not_running"),
        (WorkerStatus.STARTING, "target_not_running"),
    ],
)
async def test_a_target_that_is_not_running_is_stripped_and_a_runs_it(
    twin: Twin, status: WorkerStatus | None, reason: str
) -> None:
    if status is not None:
        await register(twin, B, status)
    execution_id = await start_for(twin, B)

    _, stripped = await take(twin, worker(twin, A))
    copy, ran = await take(twin, worker(twin, A))

    assert stripped.outcome == "target_stripped"
    assert (copy.target_instance_id, copy.handovers) == (None, 0)
    assert ran.outcome == "completed"
    [started] = await entries(twin, execution_id, HistoryKind.STARTED)
    assert started.worker == A
    [entry] = await entries(twin, execution_id, HistoryKind.TARGET_STRIPPED)
    assert (entry.worker, entry.detail["reason"]) == (A, reason)


async def test_a_dead_targets_lapsed_record_is_stripped(twin: Twin) -> None:
    """A record still there but with an old heartbeat (a skewed or frozen worker)."""
    await register(twin, B, WorkerStatus.RUNNING, age_s=twin.settings.lease_ttl_ms / 1000 + 1)
    execution_id = await start_for(twin, B)

    _, stripped = await take(twin, worker(twin, A))

    assert stripped.outcome == "target_stripped"
    [entry] = await entries(twin, execution_id, HistoryKind.TARGET_STRIPPED)
    assert entry.detail["reason"] == "target_heartbeat_lapsed"


async def test_a_record_that_expired_after_the_kill_strips_the_target(twin: Twin) -> None:
    await register(twin, B, WorkerStatus.RUNNING)
    twin.clock.advance(REGISTRY_TTL_MS / 1000)  # worker-b died: no heartbeat renewed it
    await start_for(twin, B)

    _, stripped = await take(twin, worker(twin, A))

    assert stripped.outcome == "target_stripped"


async def test_the_budget_ends_the_passing_on_when_b_never_reads_it(twin: Twin) -> None:
    """Only worker-a reads: it passes the carrier on three times, then strips and runs it."""
    await register(twin, B, WorkerStatus.RUNNING)
    execution_id = await start_for(twin, B)
    a = worker(twin, A, max_handovers=3)

    outcomes = [(await take(twin, a))[1].outcome for _ in range(5)]

    assert outcomes == ["handed_over"] * 3 + ["target_stripped", "completed"]
    handed = await entries(twin, execution_id, HistoryKind.HANDED_OVER)
    assert [e.detail["handovers"] for e in handed] == [1, 2, 3]
    [stripped] = await entries(twin, execution_id, HistoryKind.TARGET_STRIPPED)
    assert stripped.detail == {"target": B, "handovers": 3, "reason": "handovers_exhausted"}


async def test_a_carrier_that_spent_the_default_budget_is_stripped(twin: Twin) -> None:
    await register(twin, B, WorkerStatus.RUNNING)
    execution_id = await start_for(twin, B)
    [delivery] = await twin.queue.read("test", count=1, block_ms=1)
    assert delivery.envelope is not None
    spent = copy_envelope(delivery.envelope, handovers=DEFAULT_MAX_HANDOVERS)

    result = await worker(twin, A)(spent, message_id=delivery.message_id)

    assert result.outcome == "target_stripped"
    [entry] = await entries(twin, execution_id, HistoryKind.TARGET_STRIPPED)
    assert entry.detail["reason"] == "handovers_exhausted"


# --- what the registry cannot tell ----------------------------------------------------------


async def test_an_unreadable_registry_keeps_the_target(twin: Twin) -> None:
    """Fail-open: the carrier is passed on; the budget bounds it."""
    await start_for(twin, B)

    async def broken(instance_id: str) -> WorkerInstance | None:
        raise ConnectionError("registry read timed out")

    twin.registry.get = broken  # type: ignore[method-assign]
    _, result = await take(twin, worker(twin, A))

    assert result.outcome == "handed_over"
    assert "registry_unreadable" in result.detail


async def test_without_a_registry_a_carrier_is_passed_on_within_the_budget(twin: Twin) -> None:
    await start_for(twin, B)
    a = worker(twin, A, registry_enabled=False, max_handovers=1)

    outcomes = [(await take(twin, a))[1].outcome for _ in range(3)]

    assert outcomes == ["handed_over", "target_stripped", "completed"]


# --- the gates before it, the copies after it -------------------------------------------------


async def test_a_deleted_executions_targeted_carrier_is_not_passed_on(twin: Twin) -> None:
    await register(twin, B, WorkerStatus.RUNNING)
    execution_id = await start_for(twin, B)
    await twin.executions.delete(
        execution_id,
        fence=None,
        tombstone=Tombstone("default", twin.clock.now_ms(), "test"),
        tombstone_ttl_ms=60_000,
    )

    _, result = await take(twin, worker(twin, A))

    assert result.outcome == "execution_deleted"
    assert not await unread(twin), "no copy of a deleted execution's carrier"


async def test_the_continuation_of_a_long_dispatch_keeps_its_target(twin: Twin) -> None:
    """The rest of a dispatch that asked for worker-b asks for it too."""
    await register(twin, B, WorkerStatus.RUNNING)
    await start_for(twin, B)
    b = worker(twin, B, max_steps_per_dispatch=1)

    _, first = await take(twin, b)

    assert first.outcome == "yielded"
    [continuation] = first.enqueue
    assert continuation.target_instance_id == B


async def test_a_start_naming_a_bad_target_is_refused_before_anything_is_written(
    twin: Twin,
) -> None:
    with pytest.raises(InvalidTargetInstanceError, match="target instance id"):
        await twin.start_execution("approval", params={"amount": 1}, target_instance_id="a b")
    assert (await twin.queue.stats()).length == 0
    assert await twin.executions.load("id-1") is None
