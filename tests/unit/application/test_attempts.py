"""The worker step's attempts: crashes counted with the execution (W2), one retry policy per
node (E15), a lease watchdog that never outlives its dispatch (W3), hand-overs after the
release, and the dedup claim at the worker (W6)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.step import Disposition, StepSettings
from plaita.domain.dedup import DEDUP_ORPHAN_GRACE_MS
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.execution import ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED

from .conftest import handler_registry
from .twin import Twin

ONE_TASK = {
    "flow_id": "one",
    "start": "work",
    "nodes": [
        {"id": "work", "type": "task", "handler": "t:work", "next": "done"},
        {"id": "done", "type": "end", "output": "$LAST_NODE"},
    ],
}


async def a_crashed_attempt(twin: Twin, envelope: TaskEnvelope) -> None:
    """A real dispatch of ``envelope`` cut short while its step runs, as by kill -9: its
    attempt stays open (its lease would lapse after its TTL; here it is gone at once)."""
    entered = asyncio.Event()

    async def hangs(params: Any, ctx: Any) -> Any:
        entered.set()
        await asyncio.Event().wait()

    handlers = twin.handlers
    twin.handlers = handler_registry(request=hangs, work=hangs)
    dispatch = asyncio.create_task(twin.process(envelope))
    await asyncio.wait_for(entered.wait(), 5)
    dispatch.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await dispatch
    twin.handlers = handlers
    assert await twin.leases.holder(envelope.execution_id) is None


async def register(twin: Twin, document: dict[str, Any]) -> None:
    """Register with the handlers the test gave the twin: a registration finds each one."""
    await twin.catalog.register(Flow.from_document(document), owner=SHARED)


def one_start(twin: Twin, execution_id: str = "x-1") -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="one",
        version=None,
        params={},
        now_ms=twin.clock.now_ms(),
        generations=LEGACY_GENERATIONS,
    )


# --- crashed attempts (W2) -----------------------------------------------------------------


async def test_an_attempt_that_never_returned_counts_against_the_checkpoint_node(
    twin: Twin,
) -> None:
    twin.handlers = handler_registry(work=lambda params, ctx: "ok")
    await register(twin, {**ONE_TASK, "nodes": [{**ONE_TASK["nodes"][0]}, ONE_TASK["nodes"][1]]})
    start = one_start(twin)
    await a_crashed_attempt(twin, start)

    result = await twin.process(start)

    assert result.outcome == "completed"
    counters = await twin.counters.read("x-1")
    assert counters.open_attempt is None, "the dispatch that returned ended its attempt"
    assert counters.total_retries == 1, "the crash was counted (then cleared by the success)"


async def test_a_returned_dispatch_is_never_counted_as_a_crash(twin: Twin) -> None:
    """W2: only a dispatch that started under the lease and never returned counts."""
    for _ in range(3):
        await twin.process(twin.resume(ResumeType.CONTINUE))
    await twin.process(twin.envelope_start(5000))
    await twin.process(twin.resume(ResumeType.CONTINUE))

    assert (await twin.counters.read("x-1")).node_crashes == {}


async def test_max_deliveries_crashed_attempts_give_the_carrier_up_to_the_guard(
    twin: Twin,
) -> None:
    """W2, W9: the step refuses to run a step that killed its worker max_deliveries times; the
    dead letter is no refusal, so the guard makes the execution terminal before filing it."""
    twin.settings = StepSettings(
        holder_id="worker-a", max_deliveries=2, generations=LEGACY_GENERATIONS
    )
    start = twin.envelope_start(10)
    await a_crashed_attempt(twin, start)
    await a_crashed_attempt(twin, start)  # its own acquisition counted the first crash

    result = await twin.process(start)

    assert (result.disposition, result.outcome, result.refused) == (
        Disposition.DEAD_LETTER,
        "attempts_exhausted",
        False,
    )
    assert twin.calls.log == [], "the poison step did not run a third time"
    assert await twin.leases.holder("x-1") is None


async def test_a_start_without_a_row_counts_its_crashes_against_its_start_node(
    twin: Twin,
) -> None:
    start = twin.envelope_start(10)
    await a_crashed_attempt(twin, start)
    await a_crashed_attempt(twin, start)

    assert (await twin.counters.read("x-1")).node_crashes == {"request": 1}
    result = await twin.process(start)
    assert result.outcome == "completed"


async def test_a_successful_step_clears_its_nodes_crashes(twin: Twin) -> None:
    await twin.process(twin.envelope_start(5000))  # suspended at wait
    carrier = twin.resume(ResumeType.CONTINUE)
    await twin.counters.begin_attempt("x-1", 99, ttl_ms=60_000)  # a dispatch that died
    await twin.process(carrier)  # already suspended: counted against wait, nothing ran
    assert (await twin.counters.read("x-1")).node_crashes == {"wait": 1}

    event = await twin.publish_event(
        "approval_decision", data={"approved": True}, correlation_id="x-1"
    )
    assert await twin.filter_event(event.event_id) == 1
    [outcome] = await twin.drain_queue()

    assert outcome.outcome == "completed"
    assert (await twin.counters.read("x-1")).node_crashes == {}


# --- one retry policy per node (E15) -------------------------------------------------------


def failing_document(retry_times: int | None) -> dict[str, Any]:
    work: dict[str, Any] = {"id": "work", "type": "task", "handler": "t:work", "next": "done"}
    if retry_times is not None:
        work["retryTimes"] = retry_times
    return {**ONE_TASK, "nodes": [work, ONE_TASK["nodes"][1]]}


async def run_to_the_end(twin: Twin, start: TaskEnvelope) -> list[str]:
    """Every delivery of the execution, retry copies included, until it stops retrying."""
    outcomes, envelope = [], start
    for _ in range(20):
        result = await twin.process(envelope)
        outcomes.append(result.outcome)
        if not result.schedule:
            return outcomes
        envelope = result.schedule[0][0]
    raise AssertionError(f"still retrying after 20 deliveries: {outcomes}")


@pytest.mark.parametrize(("retry_times", "attempts"), [(None, 6), (0, 1), (2, 3), (8, 9)])
async def test_a_node_makes_exactly_one_plus_retry_times_attempts_one_per_delivery(
    twin: Twin, retry_times: int | None, attempts: int
) -> None:
    """E15: retryTimes is the only count (absent: the deployment default 5); every retry is a
    delayed carrier, never a second in-process loop, and ctx.attempt counts across them."""
    seen: list[int] = []

    def work(params: Any, ctx: Any) -> Any:
        seen.append(ctx.attempt)
        raise ConnectionError("database unavailable")

    twin.handlers = handler_registry(work=work)
    await register(twin, failing_document(retry_times))

    outcomes = await run_to_the_end(twin, one_start(twin))

    assert seen == list(range(1, attempts + 1))
    assert outcomes == ["retry_scheduled"] * (attempts - 1) + ["node_budget_exhausted"]
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.ERROR


async def test_the_deployment_default_retries_apply_to_nodes_without_retry_times(
    twin: Twin,
) -> None:
    twin.settings = StepSettings(
        holder_id="worker-a", default_retries=1, generations=LEGACY_GENERATIONS
    )
    twin.handlers = handler_registry(work=lambda params, ctx: (_ for _ in ()).throw(OSError()))
    await register(twin, failing_document(None))

    outcomes = await run_to_the_end(twin, one_start(twin))

    assert outcomes == ["retry_scheduled", "node_budget_exhausted"]


async def test_the_retry_copies_back_off_one_two_four_seconds(twin: Twin) -> None:
    """E15: min(30 s, 2^(n-1) s) after attempt n, on the delay queue."""
    twin.handlers = handler_registry(work=lambda params, ctx: (_ for _ in ()).throw(OSError()))
    await register(twin, failing_document(3))
    delays, envelope = [], one_start(twin)
    for _ in range(3):
        result = await twin.process(envelope)
        [(envelope, due_ms)] = result.schedule
        delays.append(due_ms - twin.clock.now_ms())

    assert delays == [1_000, 2_000, 4_000]


async def test_ctx_attempt_counts_a_crashed_attempt_too(twin: Twin) -> None:
    seen: list[int] = []
    twin.handlers = handler_registry(work=lambda params, ctx: seen.append(ctx.attempt) or "ok")
    await register(twin, ONE_TASK)
    start = one_start(twin)
    await a_crashed_attempt(twin, start)

    await twin.process(start)

    assert seen == [2]


async def test_a_crash_never_spends_the_nodes_retries(twin: Twin) -> None:
    """W2 vs E15: a node with retryTimes 0 whose worker was killed once still runs again."""
    twin.handlers = handler_registry(work=lambda params, ctx: "ok")
    await register(twin, failing_document(0))
    start = one_start(twin)
    await a_crashed_attempt(twin, start)

    result = await twin.process(start)

    assert result.outcome == "completed"


# --- the watchdog's life is bounded by the dispatch's (W3) ---------------------------------


class RenewSwallowsCancellation:
    """A store client that, with its connection killed mid-call, turns a cancellation into a
    ConnectionError (redis-py's asyncio client does): cancelling the watchdog alone would
    leave it renewing for ever."""

    def __init__(self, leases: MemoryLeaseManager) -> None:
        self._renew = leases.renew
        self.renewals_after_return = 0
        self.returned = False

    async def __call__(self, lease: Any, *, ttl_ms: int) -> bool:
        if self.returned:
            self.renewals_after_return += 1
        try:
            await asyncio.sleep(0.001)
        except asyncio.CancelledError:
            raise ConnectionError("Connection closed by server") from None
        return await self._renew(lease, ttl_ms=ttl_ms)


async def test_the_watchdog_stops_with_its_dispatch_whatever_the_client_does(twin: Twin) -> None:
    renew = RenewSwallowsCancellation(twin.leases)
    twin.leases.renew = renew  # type: ignore[method-assign]

    async def tick(seconds: float) -> None:
        await asyncio.sleep(0.0005)

    twin.sleep = tick

    async def request(params: Any, ctx: Any) -> Any:
        await asyncio.sleep(0.01)
        return {"id": 1}

    twin.handlers = handler_registry(request=request)
    result = await asyncio.wait_for(twin.process(twin.envelope_start(5000)), 5)
    renew.returned = True
    await asyncio.sleep(0.05)

    assert result.outcome == "suspended"
    assert renew.renewals_after_return == 0
    assert await twin.leases.holder("x-1") is None, "released, and nobody renews it again"


# --- after the release: hand-overs, and a release that failed (W5, I0) ---------------------


async def test_a_hand_over_carrier_is_enqueued_only_after_the_lease_is_released(
    twin: Twin,
) -> None:
    """W5: a first-delivery continue that met its own holder's lease would be acked without
    effect while the holder acks the original: the execution would have no carrier."""
    twin.settings = StepSettings(
        holder_id="worker-a", max_steps_per_dispatch=1, generations=LEGACY_GENERATIONS
    )
    holders_at_enqueue: list[Any] = []
    enqueue = twin.queue.enqueue

    async def watching_enqueue(envelope: TaskEnvelope) -> str:
        holders_at_enqueue.append(await twin.leases.holder(envelope.execution_id))
        return await enqueue(envelope)

    twin.queue.enqueue = watching_enqueue  # type: ignore[method-assign]

    result = await twin.process(twin.envelope_start(10))

    assert result.outcome == "yielded"
    assert holders_at_enqueue == [None]


async def test_a_failed_release_leaves_the_carrier_pending_and_sends_no_follow_up(
    twin: Twin,
) -> None:
    async def release_fails(lease: Any) -> bool:
        raise ConnectionError("Connection closed by server")

    twin.leases.release = release_fails  # type: ignore[method-assign]
    twin.settings = StepSettings(
        holder_id="worker-a", max_steps_per_dispatch=1, generations=LEGACY_GENERATIONS
    )

    result = await twin.process(twin.envelope_start(10))

    assert (result.disposition, result.outcome) == (Disposition.LEAVE_PENDING, "release_failed")
    assert (await twin.queue.stats()).length == 0, "no hand-over that could meet the lease"


async def test_a_lease_this_worker_holds_without_a_dispatch_never_acks_the_carrier(
    twin: Twin,
) -> None:
    """W5: a lease left by this worker's own failed release (or a retried acquire) is not a
    live holder's: the continue may be the execution's only carrier."""
    await twin.process(twin.envelope_start(10))
    assert await twin.leases.acquire("x-1", "worker-a", ttl_ms=60_000) is not None

    result = await twin.process(twin.resume(ResumeType.CONTINUE))

    assert (result.disposition, result.outcome) == (Disposition.LEAVE_PENDING, "lease_conflict")


# --- the dedup claim at the worker (W6) ----------------------------------------------------


async def test_an_orphan_dedup_key_is_released_and_claimed_again(twin: Twin) -> None:
    """W6: a start that claimed its key and died before enqueueing left a claim naming an
    execution that never existed; once it is old the next start takes the key."""
    await twin.dedup.claim("order-7", "ghost", tenant_id="default", ttl_ms=7 * 86_400_000)
    twin.clock.advance(DEDUP_ORPHAN_GRACE_MS / 1000)

    started = await twin.start_execution("approval", params={"amount": 1}, dedup_key="order-7")

    assert not started.deduplicated and started.execution_id != "ghost"
    outcomes = [r.outcome for r in await twin.drain_queue()]
    assert outcomes == ["completed"]


async def test_a_young_unconfirmed_claim_is_never_taken_over(twin: Twin) -> None:
    """W6: its start call may still be enqueueing; never start twice on a guess."""
    await twin.dedup.claim("order-7", "slow", tenant_id="default", ttl_ms=7 * 86_400_000)

    started = await twin.start_execution("approval", params={"amount": 1}, dedup_key="order-7")

    assert (started.execution_id, started.deduplicated) == ("slow", True)
    assert (await twin.queue.stats()).length == 0


async def test_a_confirmed_claim_is_never_an_orphan_however_old(twin: Twin) -> None:
    first = await twin.start_execution("approval", params={"amount": 1}, dedup_key="order-7")
    twin.clock.advance(24 * 3600)  # a day of backlog: the start carrier never ran

    second = await twin.start_execution("approval", params={"amount": 1}, dedup_key="order-7")

    assert (second.execution_id, second.deduplicated) == (first.execution_id, True)


async def test_a_start_whose_key_moved_on_to_another_execution_is_not_run(twin: Twin) -> None:
    """W6: the key was released as an orphan and claimed by a later start of the same
    request; a late carrier of the first must not start a second execution."""
    late = TaskEnvelope.start(
        execution_id="late",
        flow_id="approval",
        version="1",
        params={"amount": 1},
        now_ms=twin.clock.now_ms(),
        generations=LEGACY_GENERATIONS,
        dedup_key="order-7",
    )
    winner = await twin.start_execution("approval", params={"amount": 1}, dedup_key="order-7")

    result = await twin.process(late)

    assert (result.disposition, result.outcome) == (Disposition.ACK, "deduplicated")
    assert await twin.executions.load("late") is None
    assert winner.execution_id in result.detail or "key held by" in result.detail


async def test_a_keyed_start_claims_its_key_at_the_worker_when_nobody_holds_it(
    twin: Twin,
) -> None:
    """W6, W10: a replayed start carries its dedup key with no claim behind it."""
    start = TaskEnvelope.start(
        execution_id="x-7",
        flow_id="approval",
        version="1",
        params={"amount": 1},
        now_ms=twin.clock.now_ms(),
        generations=LEGACY_GENERATIONS,
        dedup_key="order-9",
    )
    with tenant_scope("default"):
        result = await twin.process(start)

    assert result.outcome == "completed"
    holder = await twin.dedup.claim("order-9", "x-8", tenant_id="default", ttl_ms=60_000)
    assert holder is not None and holder.execution_id == "x-7"
