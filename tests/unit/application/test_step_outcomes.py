"""What listeners hear from a worker step, and the reclaim gate (E6, E9, V6, W2).

The engine tells a step's outcome (advanced, suspended, ended, node failed); the worker
decides what a failure means. So a node failure the worker retries never tells listeners the
flow ended, and a wait satisfied at once from the inbox never tells them it suspended.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from plaita.application.ports import WorkerInstance
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.events import PublishEvent
from plaita.application.use_cases.step import RECLAIM_SKIPPED, Disposition, StepSettings
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType
from plaita.domain.errors import ExecutionLeaseError
from plaita.domain.execution import ExecutionStatus
from plaita.domain.lease import Lease

from .conftest import handler_registry
from .twin import Twin


@attrs.define
class Heard:
    """A lifecycle listener that keeps what it was told."""

    flow_ends: list[tuple[str, Any, BaseException | None]] = attrs.field(factory=list)
    suspends: list[tuple[str, str]] = attrs.field(factory=list)

    def on_flow_end(self, execution_id: str, result: Any, error: BaseException | None) -> None:
        self.flow_ends.append((execution_id, result, error))

    def on_flow_suspend(self, execution_id: str, node_id: str) -> None:
        self.suspends.append((execution_id, node_id))


def failing_until(attempts: int) -> Any:
    """A handler that raises a transient error on its first ``attempts - 1`` calls."""
    calls = {"n": 0}

    def handler(params: Any, ctx: Any) -> Any:
        calls["n"] += 1
        if calls["n"] < attempts:
            raise ConnectionError("database unavailable")
        return {"id": 1}

    return handler


async def test_a_retried_node_failure_tells_no_listener_the_flow_ended(twin: Twin) -> None:
    """E9, E15: the failure is retried, the execution still runs: no flow end (an error
    ``event=flow.end`` on every retry would tell operators it had failed)."""
    heard = Heard()
    twin.listeners.append(heard)
    twin.handlers = handler_registry(request=failing_until(3), ship=lambda p, c: "shipped")
    envelope = twin.envelope_start(10)
    outcomes = []
    for _ in range(4):
        result = await twin.process(envelope)
        outcomes.append(result.outcome)
        if not result.schedule:
            break
        envelope = result.schedule[0][0]
    assert outcomes == ["retry_scheduled", "retry_scheduled", "completed"]
    assert [(xid, error) for xid, _, error in heard.flow_ends] == [("x-1", None)]
    assert heard.flow_ends[0][1] == "shipped"


async def test_a_node_failure_that_ends_the_execution_tells_listeners_once(twin: Twin) -> None:
    """E9: the worker judged it terminal (its retry budget is spent): one flow end, with the
    error."""
    heard = Heard()
    twin.listeners.append(heard)
    twin.handlers = handler_registry(request=failing_until(100))
    twin.settings = StepSettings(
        holder_id="worker-a", default_retries=1, generations=LEGACY_GENERATIONS
    )
    envelope = twin.envelope_start(10)
    for _ in range(3):
        result = await twin.process(envelope)
        if not result.schedule:
            break
        envelope = result.schedule[0][0]
    assert result.outcome == "node_budget_exhausted"
    [(execution_id, _, error)] = heard.flow_ends
    assert execution_id == "x-1" and error is not None and "database unavailable" in str(error)


async def test_a_wait_satisfied_from_the_inbox_tells_no_listener_it_suspended(twin: Twin) -> None:
    """V6: the decision was published before the wait registered; the step takes it from the
    inbox and goes on in the same dispatch — it never suspended."""
    heard = Heard()
    twin.listeners.append(heard)
    publish = PublishEvent(events=twin.events, clock=twin.clock, ids=twin.ids, inbox=twin.inbox)
    await publish("approval_decision", data={"approved": True}, correlation_id="x-1")
    result = await twin.process(twin.envelope_start(5000))
    assert result.outcome == "completed"
    assert heard.suspends == []
    assert list(await twin.subscriptions.find("approval_decision")) == []
    with tenant_scope("default"):
        state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.COMPLETED


async def test_a_wait_with_nothing_in_the_inbox_tells_listeners_it_suspended(twin: Twin) -> None:
    heard = Heard()
    twin.listeners.append(heard)
    result = await twin.process(twin.envelope_start(5000))
    assert result.outcome == "suspended" and heard.suspends == [("x-1", "wait")]


# --- the reclaim gate (W2) ----------------------------------------------------------------


def stream_id(twin: Twin) -> str:
    """A stream id written now (its time is the carrier's age, W14)."""
    return f"{twin.clock.now_ms()}-0"


async def test_a_reclaimed_carrier_beside_a_live_lease_is_left_pending_uncounted(
    twin: Twin,
) -> None:
    """W2 (reclaim row 3): a live holder works on the execution; the reclaimed carrier waits,
    and its wait costs it no attempt."""
    await twin.process(twin.envelope_start(5000))
    await register(twin, "live-holder", age_s=1.0)
    assert await twin.leases.acquire("x-1", "live-holder", ttl_ms=600_000) is not None
    before = await twin.counters.read("x-1")
    result = await twin.process(
        twin.envelope_start(5000), message_id=stream_id(twin), reclaimed=True
    )
    assert (result.disposition, result.outcome) == (Disposition.LEAVE_PENDING, RECLAIM_SKIPPED)
    assert result.detail == "live_lease"
    assert await twin.counters.read("x-1") == before


async def register(twin: Twin, holder_id: str, *, age_s: float, status: str = "running") -> None:
    now = twin.clock.now_ms()
    record = WorkerInstance(holder_id, status, now - round(age_s * 1000), now - 60_000)
    await twin.registry.put(record, ttl_ms=600_000)


@pytest.mark.parametrize(
    ("age_s", "registered"), [(4.5, True), (None, False)], ids=["stale-heartbeat", "no-record"]
)
async def test_a_reclaimed_carrier_of_a_dead_holder_takes_the_execution_over(
    twin: Twin, age_s: float | None, registered: bool
) -> None:
    """P6 (reclaim row 4): the holder was killed: its heartbeat is two beats old, or its record
    lapsed, while its lease has two minutes to run. The reclaimed carrier releases that lease, takes
    a new generation and runs from the checkpoint; the dead holder could write nothing."""
    await twin.process(twin.envelope_start(5000))  # suspended at the approval wait
    if registered:
        await register(twin, "dead-holder", age_s=age_s or 0)
    dead = await twin.leases.acquire("x-1", "dead-holder", ttl_ms=120_000)
    assert dead is not None
    result = await twin.process(
        twin.resume(ResumeType.CANCEL), message_id=stream_id(twin), reclaimed=True
    )
    assert result.outcome != RECLAIM_SKIPPED, result
    state = await twin.executions.load("x-1")
    assert state is not None and state.status.value == "cancelled"
    generation = await twin.leases.current_generation("x-1")
    assert generation is not None and generation > dead.generation
    with pytest.raises(ExecutionLeaseError):  # the holder, woken up, is fenced off (W4)
        await twin.executions.save(state, fence=dead.generation)


async def test_a_reclaimed_carrier_beside_a_holder_that_lags_but_lives_waits(twin: Twin) -> None:
    """P6 (reclaim row 3): a heartbeat 3 s old is one late beat, not a death: no takeover."""
    await twin.process(twin.envelope_start(5000))
    await register(twin, "slow-holder", age_s=3.0)
    held = await twin.leases.acquire("x-1", "slow-holder", ttl_ms=120_000)
    result = await twin.process(
        twin.resume(ResumeType.CANCEL), message_id=stream_id(twin), reclaimed=True
    )
    assert (result.outcome, result.detail) == (RECLAIM_SKIPPED, "live_lease")
    assert await twin.leases.holder("x-1") == held


class HolderLookupFails:
    """A lease manager whose holder lookup fails (a store outage)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def holder(self, execution_id: str) -> Lease | None:
        raise ConnectionError("Connection closed by server")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_a_reclaimed_carrier_whose_lease_lookup_fails_is_left_pending(twin: Twin) -> None:
    """W2 (reclaim row 6): a failed lookup proves nothing; unknown is never taken for free."""
    twin.leases = HolderLookupFails(twin.leases)  # type: ignore[assignment]
    result = await twin.process(twin.envelope_start(10), message_id=stream_id(twin), reclaimed=True)
    assert (result.outcome, result.detail) == (RECLAIM_SKIPPED, "lease_lookup_failed")


async def test_a_reclaimed_carrier_of_a_free_lease_runs(twin: Twin) -> None:
    """W2 (reclaim row 1): its holder is gone; the carrier runs from the checkpoint."""
    result = await twin.process(twin.envelope_start(10), message_id=stream_id(twin), reclaimed=True)
    assert result.outcome == "completed"
