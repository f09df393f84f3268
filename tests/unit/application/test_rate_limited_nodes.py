"""Rate limits on the memory twin with a fake clock (W23, W2, W8): a node over its limit is
rescheduled through the delay queue, not run, spends no attempt and no retry, leaves a
``rate_limited`` entry in the history, and runs at its due time."""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import pytest

from plaita.adapters.memory.rate_buckets import MemoryRateBuckets
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.execution import FlowExecution, RunOptions
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.step import Disposition
from plaita.domain.envelope import LEGACY_GENERATIONS, CarrierKind, ResumeType, TaskEnvelope
from plaita.domain.errors import RateLimitsUnavailableError
from plaita.domain.execution import ExecutionStatus
from plaita.domain.failures import ExecutionDeadlineError, FlowExecutionException
from plaita.domain.flow import Flow
from plaita.domain.flow_control import WaitReason
from plaita.domain.flow_owners import SHARED
from plaita.domain.history import HistoryKind
from plaita.domain.rate_limits import RateRule

from .conftest import FakeClock, SequentialIds, handler_registry
from .twin import Twin

LIMIT: dict[str, Any] = {"key": "${input.customer}", "per_second": 1, "burst": 1}


def limited_flow(limit: dict[str, Any] | None = LIMIT, flow_id: str = "limited") -> Flow:
    call: dict[str, Any] = {"id": "call", "type": "task", "handler": "t:call", "next": "done"}
    if limit is not None:
        call["rate_limit"] = limit
    return Flow.from_document(
        {
            "flow_id": flow_id,
            "start": "prep",
            "nodes": [
                {"id": "prep", "type": "task", "handler": "t:prep", "next": "call"},
                call,
                {"id": "done", "type": "end", "output": "$LAST_NODE"},
            ],
        }
    )


@pytest.fixture
async def calls(twin: Twin) -> list[tuple[str, int]]:
    seen: list[tuple[str, int]] = []

    def prep(params: Any, ctx: Any) -> Any:
        seen.append(("prep", ctx.attempt))
        return "prepared"

    def call(params: Any, ctx: Any) -> Any:
        seen.append((ctx.execution_id, ctx.attempt))
        return "called"

    twin.handlers = handler_registry(prep=prep, call=call)
    await twin.catalog.register(limited_flow(), owner=SHARED)
    await twin.catalog.register(limited_flow(None, flow_id="other"), owner=SHARED)
    return seen


def start(twin: Twin, execution_id: str, customer: Any = "acme", flow_id: str = "limited"):  # type: ignore[no-untyped-def]
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id=flow_id,
        version="1",
        params={"customer": customer},
        now_ms=twin.clock.now_ms(),
        generations=LEGACY_GENERATIONS,
    )


async def test_a_node_over_its_limit_is_rescheduled_not_run(
    twin: Twin, calls: list[tuple[str, int]]
) -> None:
    assert (await twin.process(start(twin, "x-1"))).outcome == "completed"
    second = start(twin, "x-2")
    twin.clock.advance(0.25)

    result = await twin.process(second)

    assert (result.disposition, result.outcome) == (Disposition.ACK, "rate_limited")
    [(copy, due_ms)] = result.schedule
    assert due_ms == twin.clock.now_ms() + 750  # one run a second; x-1 took the token 250 ms ago
    assert (copy.kind, copy.resume_type, copy.origin) == (
        CarrierKind.RESUME,
        ResumeType.CONTINUE,
        "rate_limit",
    )
    assert copy.timestamp_ms == second.timestamp_ms  # the copy is as old as its source (W14)
    assert await twin.delay.pending() == 1
    assert await twin.leases.holder("x-2") is None, "the lease is released before the copy"
    assert [who for who, _ in calls] == ["prep", "x-1", "prep"]  # x-2's call did not run
    state = await twin.executions.load("x-2")
    assert state is not None and state.status is ExecutionStatus.RUNNING
    assert state.next_node_id == "call" and "prep" in state.node_results


async def test_a_held_back_node_spends_no_attempt_and_no_retry(
    twin: Twin, calls: list[tuple[str, int]]
) -> None:
    """W2: waiting for a token is not an attempt; the dispatch ended normally."""
    await twin.process(start(twin, "x-1"))

    await twin.process(start(twin, "x-2"))

    counters = await twin.counters.read("x-2")
    assert counters.node_retries == {} and counters.total_retries == 0
    assert counters.node_crashes == {} and counters.open_attempt is None


async def test_the_history_says_which_key_held_the_node_back_and_until_when(
    twin: Twin, calls: list[tuple[str, int]]
) -> None:
    await twin.process(start(twin, "x-1"))

    result = await twin.process(start(twin, "x-2"))

    page = await twin.executions.history("x-2")
    kinds = [entry.kind for entry in page.entries]
    assert kinds[-1] is HistoryKind.RATE_LIMITED
    assert HistoryKind.NODE_STARTED not in kinds[kinds.index(HistoryKind.NODE_FINISHED) + 1 :]
    limited = page.entries[-1]
    assert limited.node_id == "call" and limited.attempt is None
    assert dict(limited.detail) == {"key": "acme", "due_ms": result.schedule[0][1]}


async def test_the_held_back_node_runs_at_its_due_time_as_its_first_attempt(
    twin: Twin, calls: list[tuple[str, int]]
) -> None:
    await twin.process(start(twin, "x-1"))
    [(copy, due_ms)] = (await twin.process(start(twin, "x-2"))).schedule
    twin.clock.advance((due_ms - twin.clock.now_ms() - 1) / 1000)
    early = await twin.process(copy)
    # Denied again, the early comer is queued one interval (1 s) behind its own turn; nothing
    # was reserved, so coming back when the token is free it still gets it.
    assert early.outcome == "rate_limited" and early.schedule[0][1] == due_ms + 1_000
    twin.clock.advance(0.001)

    result = await twin.process(early.schedule[0][0])

    assert result.outcome == "completed"
    assert calls[-1] == ("x-2", 1)  # ctx.attempt of the real run is its first
    assert [who for who, _ in calls].count("prep") == 2  # prep is not run again


async def test_another_key_has_its_own_bucket(twin: Twin, calls: list[tuple[str, int]]) -> None:
    await twin.process(start(twin, "x-1", customer="acme"))

    assert (await twin.process(start(twin, "x-2", customer="globex"))).outcome == "completed"
    with tenant_scope("default"):
        assert (await twin.process(start(twin, "x-3", customer=7))).outcome == "completed"


async def test_a_node_without_a_limit_never_waits(twin: Twin, calls: list[tuple[str, int]]) -> None:
    outcomes = [
        (await twin.process(start(twin, f"x-{n}", flow_id="other"))).outcome for n in range(5)
    ]

    assert outcomes == ["completed"] * 5


async def test_without_a_key_each_node_of_each_flow_has_its_own_bucket(
    twin: Twin, calls: list[tuple[str, int]]
) -> None:
    await twin.catalog.register(limited_flow({"per_second": 1}, flow_id="keyless"), owner=SHARED)
    await twin.catalog.register(limited_flow({"per_second": 1}, flow_id="keyless2"), owner=SHARED)

    first = await twin.process(start(twin, "x-1", flow_id="keyless"))
    other_flow = await twin.process(start(twin, "x-2", flow_id="keyless2"))
    same_flow = await twin.process(start(twin, "x-3", flow_id="keyless"))

    assert (first.outcome, other_flow.outcome, same_flow.outcome) == (
        "completed",
        "completed",
        "rate_limited",
    )
    page = await twin.executions.history("x-3")
    assert page.entries[-1].detail["key"] == "keyless:call"


async def test_a_key_that_does_not_render_fails_the_node_with_a_named_error(
    twin: Twin, calls: list[tuple[str, int]]
) -> None:
    await twin.catalog.register(
        limited_flow({"key": "${input.missing.deeper}", "per_second": 5}, flow_id="badkey"),
        owner=SHARED,
    )

    result = await twin.process(start(twin, "x-1", flow_id="badkey"))

    assert result.outcome == "failed"
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.ERROR
    assert state.error is not None and state.error.node_id == "call"
    assert "RateLimitKeyError: rate_limit.key '${input.missing.deeper}'" in state.error.message
    assert [who for who, _ in calls] == ["prep"]


class CountingNotes:
    """The memory notes, counting clears (a steady step must pay none)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.clears = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def clear(self, execution_id: str) -> None:
        self.clears += 1
        await self._inner.clear(execution_id)


async def test_a_held_back_execution_is_noted_as_waiting_until_the_node_runs(
    twin: Twin, calls: list[tuple[str, int]]
) -> None:
    notes = CountingNotes(twin.waiting)
    twin.waiting = notes  # type: ignore[assignment]
    await twin.process(start(twin, "x-1"))
    assert notes.clears == 0, "a step that was never held back clears nothing"

    held = await twin.process(start(twin, "x-2"))

    assert held.waited is WaitReason.RATE_LIMIT
    [(copy, due_ms)] = held.schedule
    with tenant_scope("default"):
        waiting = await notes.get("x-2")
    assert waiting is not None
    assert (waiting.reason, waiting.key, waiting.due_ms) == (WaitReason.RATE_LIMIT, "acme", due_ms)
    twin.clock.advance(1)

    assert (await twin.process(copy)).outcome == "completed"
    with tenant_scope("default"):
        assert await notes.get("x-2") is None
    assert notes.clears == 1


HERD = 20
#: Five runs a second, one at a time: a run every 200 ms.
HERD_LIMIT: dict[str, Any] = {"key": "api", "per_second": 5, "burst": 1}


async def test_many_executions_waiting_on_one_key_cost_a_dispatch_or_two_each(
    twin: Twin,
) -> None:
    """No herd: executions denied on one key come back one interval apart, in the order they
    were denied, so each runs when it comes back — O(N) dispatches, not ~N²/2 — with one
    ``rate_limited`` entry each, and the runs never closer than the rate allows."""
    runs: list[tuple[str, int]] = []

    def call(params: Any, ctx: Any) -> Any:
        runs.append((ctx.execution_id, twin.clock.now_ms()))
        return "called"

    twin.handlers = handler_registry(prep=lambda params, ctx: "prepared", call=call)
    await twin.catalog.register(limited_flow(HERD_LIMIT, flow_id="herd"), owner=SHARED)
    with tenant_scope("default"):  # someone else just took the token: every start waits
        assert (
            await twin.rate_buckets.take("api", RateRule(5, 1), now_ms=twin.clock.now_ms())
        ).allowed
    taken_ms = twin.clock.now_ms()
    due: list[tuple[int, int, TaskEnvelope]] = []
    for n in range(HERD):
        heapq.heappush(due, (twin.clock.now_ms(), n, start(twin, f"h-{n}", flow_id="herd")))

    dispatches = 0
    while due:
        at_ms, n, carrier = heapq.heappop(due)
        twin.clock.advance(max(0, at_ms - twin.clock.now_ms()) / 1000)
        result = await twin.process(carrier)
        dispatches += 1
        for copy, copy_due in result.schedule:
            heapq.heappush(due, (copy_due, n, copy))
        assert dispatches <= HERD * HERD, "the herd never settles"

    assert sorted(who for who, _ in runs) == sorted(f"h-{n}" for n in range(HERD))
    assert dispatches <= 2 * HERD + 2
    for n in range(HERD):
        page = await twin.executions.history(f"h-{n}")
        kinds = [entry.kind for entry in page.entries]
        assert kinds.count(HistoryKind.RATE_LIMITED) == 1, (f"h-{n}", kinds)
    starts = [taken_ms] + [at for _, at in runs]
    assert all(later - earlier >= 200 for earlier, later in itertools.pairwise(starts))
    assert [who for who, _ in runs] == [f"h-{n}" for n in range(HERD)], "in the order denied"


class CountingSaves:
    """The memory executions, counting saves (a re-hold must pay none)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.saves = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def save(self, *args: Any, **kwargs: Any) -> Any:
        self.saves += 1
        return await self._inner.save(*args, **kwargs)


async def test_a_copy_held_back_again_writes_no_entry_and_no_checkpoint(
    twin: Twin, calls: list[tuple[str, int]]
) -> None:
    """One ``rate_limited`` entry per held-back node: trying again updates the waiting note
    (its new due time) and schedules the next copy, nothing else."""
    await twin.process(start(twin, "x-1"))
    [(copy, due_ms)] = (await twin.process(start(twin, "x-2"))).schedule
    before = await twin.executions.history("x-2")
    saves = CountingSaves(twin.executions)
    twin.executions = saves  # type: ignore[assignment]
    twin.clock.advance((due_ms - twin.clock.now_ms() - 1) / 1000)

    again = await twin.process(copy)

    assert (again.outcome, again.waited) == ("rate_limited", WaitReason.RATE_LIMIT)
    [(next_copy, next_due)] = again.schedule
    assert next_copy.origin == "rate_limit" and next_due == due_ms + 1_000
    assert saves.saves == 0
    after = await twin.executions.history("x-2")
    assert [e.seq for e in after.entries] == [e.seq for e in before.entries]
    with tenant_scope("default"):
        waiting = await twin.waiting.get("x-2")
    assert waiting is not None and waiting.due_ms == next_due


async def test_a_copy_held_back_at_a_later_node_writes_that_node_its_entry(
    twin: Twin,
) -> None:
    """A copy whose node runs and whose next node is then held back is a new wait."""
    twin.handlers = handler_registry(call=lambda params, ctx: "called")
    await twin.catalog.register(twice({"key": "api", "per_second": 1, "burst": 1}), owner=SHARED)
    with tenant_scope("default"):
        await twin.rate_buckets.take("api", RateRule(1, 1), now_ms=twin.clock.now_ms())
    first = await twin.process(start(twin, "t-1", flow_id="twice"))
    [(copy, due_ms)] = first.schedule
    twin.clock.advance((due_ms - twin.clock.now_ms()) / 1000)

    second = await twin.process(copy)  # "one" runs, "two" waits for the next token

    assert second.outcome == "rate_limited"
    page = await twin.executions.history("t-1")
    held = [e.node_id for e in page.entries if e.kind is HistoryKind.RATE_LIMITED]
    assert held == ["one", "two"]


# --- a run in this process (plaita run): it sleeps until the token is due -------------------


def in_process(
    flow: Flow,
    clock: FakeClock,
    *,
    buckets: Any = None,
    timeout_ms: int | None = None,
    input: dict[str, Any] | None = None,
) -> FlowExecution:
    seen: list[float] = []

    def call(params: Any, ctx: Any) -> Any:
        seen.append(clock.now_ms())
        return len(seen)

    extra = {} if buckets is None else {"rate_buckets": buckets}
    return FlowExecution(
        flow,
        ExecutionContext(execution_id="x-1", flow_id=flow.flow_id, input=input or {}),
        handlers=handler_registry(prep=lambda params, ctx: "prepared", call=call),
        clock=clock,
        new_id=SequentialIds().new_id,
        options=RunOptions(timeout_ms=timeout_ms),
        sleep=clock.sleep,
        **extra,
    )


def twice(limit: dict[str, Any]) -> Flow:
    """Two runs of the limited handler, one bucket (the same key) for both."""
    node = {"type": "task", "handler": "t:call", "rate_limit": limit}
    return Flow.from_document(
        {
            "flow_id": "twice",
            "start": "one",
            "nodes": [
                {"id": "one", **node, "next": "two"},
                {"id": "two", **node, "next": "done"},
                {"id": "done", "type": "end", "output": "$LAST_NODE"},
            ],
        }
    )


async def test_a_run_in_this_process_waits_for_the_token(clock: FakeClock) -> None:
    execution = in_process(
        twice({"key": "api", "per_second": 0.5}), clock, buckets=MemoryRateBuckets()
    )

    assert await execution.arun() == 2
    assert clock.sleeps == [2.0]  # one run every 2 s: the second waited for its token


async def test_a_run_in_this_process_waits_no_longer_than_its_budget(clock: FakeClock) -> None:
    execution = in_process(
        twice({"key": "api", "per_second": 0.5}),
        clock,
        buckets=MemoryRateBuckets(),
        timeout_ms=500,
    )

    with pytest.raises(ExecutionDeadlineError, match="node 'two'"):
        await execution.arun()
    assert clock.sleeps == [0.5]


async def test_a_run_given_no_rate_buckets_fails_rather_than_run_unlimited(
    clock: FakeClock,
) -> None:
    execution = in_process(twice({"per_second": 5}), clock)

    with pytest.raises(FlowExecutionException, match="given no rate buckets") as caught:
        await execution.arun()
    assert isinstance(caught.value.__cause__, RateLimitsUnavailableError)


async def test_a_run_in_this_process_runs_its_burst_at_once(clock: FakeClock) -> None:
    execution = in_process(
        twice({"key": "${who}", "per_second": 0.5, "burst": 2}),
        clock,
        buckets=MemoryRateBuckets(),
        input={"who": "acme"},
    )

    assert await execution.arun() == 2
    assert clock.sleeps == []  # a burst of 2: both ran at once
