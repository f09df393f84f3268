"""Cron schedules on the memory twin (W22): the operator's use cases and the scheduler tick,
with an injected clock — several schedulers on one store, claims that expire, a start that
is fired twice for one due and converges, and the overlap policies against real executions
run by the worker step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.adapters.memory.schedules import MemoryScheduleStore
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.schedules import (
    CreateSchedule,
    DeleteSchedule,
    ListSchedules,
    PauseSchedule,
    RunSchedulerTick,
    ShowSchedule,
    TickReport,
    TickSettings,
    TriggerSchedule,
)
from plaita.application.use_cases.start_execution import StartExecution
from plaita.domain.cron_schedules import DueOutcome, Schedule, ScheduleRef
from plaita.domain.errors import (
    InvalidPriorityError,
    ScheduleExistsError,
    UnknownFlowError,
    UnknownScheduleError,
)
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.priorities import Priority
from plaita.domain.schedule_ticks import SkipReason

from .conftest import FakeClock
from .twin import Twin

#: A flow that ends at once, so the worker step completes it in one carrier.
QUICK = {"flow_id": "quick", "start": "done", "nodes": [{"id": "done", "type": "end"}]}
MINUTE = 60_000
NIGHTLY = ScheduleRef("default", "nightly")


@attrs.define
class Scheduling:
    twin: Twin
    store: MemoryScheduleStore

    @property
    def clock(self) -> FakeClock:
        return self.twin.clock

    def create(self) -> CreateSchedule:
        return CreateSchedule(store=self.store, flows=self.twin.catalog, clock=self.clock)

    def tick(
        self, holder: str = "scheduler-a", *, start: StartExecution | None = None
    ) -> RunSchedulerTick:
        return RunSchedulerTick(
            store=self.store,
            start=start or self.twin.start_execution,
            executions=self.twin.executions,
            clock=self.clock,
            settings=TickSettings(holder_id=holder, claim_ttl_ms=30_000),
        )

    async def executions(self) -> Sequence[ExecutionState]:
        return await self.twin.executions.list(limit=1000)

    async def keys(self) -> list[str | None]:
        return sorted(state.dedup_key for state in await self.executions())  # type: ignore[type-var]

    def to_next_minute(self, seconds: int = 5) -> None:
        """Move the clock to ``seconds`` past the next whole minute."""
        now = self.clock.now_ms()
        self.clock.advance((now // MINUTE * MINUTE + MINUTE + seconds * 1000 - now) / 1000)


@pytest.fixture
async def scheduling(twin: Twin) -> Scheduling:
    await twin.catalog.register(Flow.from_document(QUICK), owner=SHARED)
    return Scheduling(twin, MemoryScheduleStore(twin.clock))


async def nightly(scheduling: Scheduling, **options: Any) -> None:
    options.setdefault("cron", "* * * * *")
    await scheduling.create()("nightly", flow_id="quick", **options)


def due_key(due_ms: int, schedule_id: str = "nightly") -> str:
    return f"sched:{schedule_id}:due:{due_ms}"


def fired(report: TickReport) -> list[int]:
    return [due.due_ms for due in report.dues if due.outcome is DueOutcome.FIRED]


# --- creating, listing, showing ------------------------------------------------------------


async def test_a_created_schedule_is_listed_with_its_next_run(scheduling: Scheduling) -> None:
    view = await scheduling.create()("nightly", flow_id="quick", cron="0 3 * * *")

    [listed] = await ListSchedules(store=scheduling.store, clock=scheduling.clock)()

    assert listed.schedule == view.schedule
    assert listed.next_runs == view.next_runs
    assert listed.next_runs[0] % 86_400_000 == 3 * 3_600_000


async def test_a_schedule_of_a_flow_the_tenant_cannot_run_is_refused(
    scheduling: Scheduling,
) -> None:
    with pytest.raises(UnknownFlowError):
        await scheduling.create()("nightly", flow_id="nowhere", cron="* * * * *")

    assert await scheduling.store.list() == []


async def test_an_id_taken_is_refused(scheduling: Scheduling) -> None:
    await nightly(scheduling)

    with pytest.raises(ScheduleExistsError):
        await nightly(scheduling, cron="0 3 * * *")


async def test_show_names_the_next_run_times_and_the_last_executions_status(
    scheduling: Scheduling,
) -> None:
    await nightly(scheduling)
    scheduling.to_next_minute()
    await scheduling.tick()()
    show = ShowSchedule(
        store=scheduling.store, executions=scheduling.twin.executions, clock=scheduling.clock
    )

    view = await show("nightly", count=3)

    assert len(view.next_runs) == 3
    assert view.next_runs[1] - view.next_runs[0] == MINUTE
    assert view.last_status is ExecutionStatus.PENDING
    assert view.to_json()["next_run_ms"] == view.next_runs[0]


async def test_a_tenant_sees_and_touches_only_its_own_schedules(scheduling: Scheduling) -> None:
    """W24."""
    with tenant_scope("acme"):
        with pytest.raises(UnknownFlowError):  # the shared flow is visible to acme …
            await scheduling.create()("nightly", flow_id="nothing-here", cron="* * * * *")
        await scheduling.create()("nightly", flow_id="quick", cron="* * * * *")

    assert await ListSchedules(store=scheduling.store, clock=scheduling.clock)() == []
    with pytest.raises(UnknownScheduleError):
        await DeleteSchedule(store=scheduling.store)("nightly")
    with tenant_scope("acme"):
        assert await DeleteSchedule(store=scheduling.store)("nightly") == ScheduleRef(
            "acme", "nightly"
        )


# --- the tick: one execution per due ------------------------------------------------------


async def test_each_due_starts_one_execution_keyed_by_its_due_time(
    scheduling: Scheduling,
) -> None:
    """W22: the key is the due time, not the time of the fire (here 5 s later)."""
    await nightly(scheduling)
    scheduling.to_next_minute(seconds=5)
    due = scheduling.clock.now_ms() - 5_000

    report = await scheduling.tick()()

    assert fired(report) == [due]
    assert await scheduling.keys() == [due_key(due)]
    [state] = await scheduling.executions()
    assert state.flow_id == "quick" and state.status is ExecutionStatus.PENDING


async def test_a_second_tick_for_the_same_due_starts_nothing(scheduling: Scheduling) -> None:
    await nightly(scheduling)
    scheduling.to_next_minute()
    await scheduling.tick("scheduler-a")()

    again = await scheduling.tick("scheduler-b")()

    assert again.dues == ()
    assert len(await scheduling.executions()) == 1


async def test_the_next_due_is_never_swallowed_by_the_previous_one(
    scheduling: Scheduling,
) -> None:
    await nightly(scheduling)
    scheduling.to_next_minute()
    first = fired(await scheduling.tick()())
    scheduling.to_next_minute()
    second = fired(await scheduling.tick()())

    assert second[0] - first[0] == MINUTE
    assert await scheduling.keys() == [due_key(first[0]), due_key(second[0])]


class ForgetfulStore(MemoryScheduleStore):
    """A store whose first record of a due is lost, as when a scheduler is killed after its
    start was enqueued and before it recorded the due."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.lost = 0

    async def record_due(
        self, ref: ScheduleRef, due_ms: int, outcome: DueOutcome, **kw: Any
    ) -> bool:
        if self.lost == 0:
            self.lost += 1
            raise ConnectionError("killed before the record")
        return await super().record_due(ref, due_ms, outcome, **kw)


async def test_a_due_fired_again_after_a_crash_converges_on_the_first_execution(
    twin: Twin,
) -> None:
    """W22, #118: scheduler A started the due and died before recording it; once A's claim
    expired, B fires the same due again — and the due's dedup key finds A's execution."""
    await twin.catalog.register(Flow.from_document(QUICK), owner=SHARED)
    scheduling = Scheduling(twin, ForgetfulStore(twin.clock))
    await nightly(scheduling)
    scheduling.to_next_minute()
    with pytest.raises(ConnectionError):
        await scheduling.tick("scheduler-a")()
    [first] = await scheduling.executions()

    held = await scheduling.tick("scheduler-b")()
    assert held.dues == () and held.held == 1  # A's claim still stands
    scheduling.clock.advance(31)  # the claim TTL passes; still on time
    report = await scheduling.tick("scheduler-b")()

    [again] = report.dues
    assert again.outcome is DueOutcome.FIRED and again.deduplicated
    assert again.execution_id == first.execution_id and again.recorded
    assert [s.execution_id for s in await scheduling.executions()] == [first.execution_id]


async def test_a_store_error_mid_tick_leaves_the_due_to_the_same_schedulers_next_tick(
    twin: Twin,
) -> None:
    """Its own claim does not keep a scheduler off its own due."""
    await twin.catalog.register(Flow.from_document(QUICK), owner=SHARED)
    scheduling = Scheduling(twin, ForgetfulStore(twin.clock))
    await nightly(scheduling)
    scheduling.to_next_minute()
    with pytest.raises(ConnectionError):
        await scheduling.tick("scheduler-a")()

    report = await scheduling.tick("scheduler-a")()

    assert [due.deduplicated for due in report.dues] == [True]
    assert len(await scheduling.executions()) == 1


async def test_a_refused_start_fails_the_due_for_good_and_the_next_due_still_runs(
    scheduling: Scheduling,
) -> None:
    await nightly(scheduling)
    scheduling.to_next_minute()
    # The flow is gone from the catalog the start reads (deleted since the schedule was made).
    failing = attrs.evolve(scheduling.twin, flows=MemoryFlowRepository()).start_execution

    report = await scheduling.tick(start=failing)()

    [failed] = report.dues
    assert failed.outcome is DueOutcome.FAILED and failed.recorded
    assert failed.error is not None and failed.error.startswith("UnknownFlowError")
    stored = await scheduling.store.get(NIGHTLY)
    assert stored is not None and stored.state.failed == 1
    assert stored.state.last_error is not None and "quick" in stored.state.last_error
    scheduling.to_next_minute()
    assert len(fired(await scheduling.tick()())) == 1


# --- overlap, against executions the worker step runs -------------------------------------


async def test_skip_skips_the_due_while_the_last_execution_runs_and_fires_once_it_ended(
    scheduling: Scheduling,
) -> None:
    await nightly(scheduling, overlap="skip")
    scheduling.to_next_minute()
    await scheduling.tick()()  # started, pending: nobody ran it yet

    scheduling.to_next_minute()
    skipped = await scheduling.tick()()
    await scheduling.twin.drain_queue()  # the worker completes it
    scheduling.to_next_minute()
    after = await scheduling.tick()()

    assert [(d.outcome, d.reason) for d in skipped.dues] == [
        (DueOutcome.SKIPPED, SkipReason.OVERLAP)
    ]
    assert len(fired(after)) == 1
    assert len(await scheduling.executions()) == 2


async def test_buffer_one_starts_the_waiting_due_as_soon_as_the_last_execution_ended(
    scheduling: Scheduling,
) -> None:
    await nightly(scheduling, overlap="buffer_one")
    scheduling.to_next_minute()
    await scheduling.tick()()
    scheduling.to_next_minute()
    buffered = await scheduling.tick()()
    scheduling.to_next_minute()
    dropped = await scheduling.tick()()

    await scheduling.twin.drain_queue()
    scheduling.clock.advance(10)
    late = await scheduling.tick()()

    [waiting] = buffered.dues
    assert waiting.outcome is DueOutcome.BUFFERED
    assert [(d.outcome, d.reason) for d in dropped.dues] == [
        (DueOutcome.SKIPPED, SkipReason.OVERLAP)
    ]
    # Started under the key of the due it waited for, not of the time it ran.
    assert fired(late) == [waiting.due_ms]
    assert due_key(waiting.due_ms) in await scheduling.keys()


async def test_allow_starts_every_due_beside_the_running_ones(scheduling: Scheduling) -> None:
    await nightly(scheduling, overlap="allow")
    for _ in range(3):
        scheduling.to_next_minute()
        await scheduling.tick()()

    statuses = {state.status for state in await scheduling.executions()}
    assert len(await scheduling.executions()) == 3 and statuses == {ExecutionStatus.PENDING}


# --- catch-up after a downtime -------------------------------------------------------------


@pytest.mark.parametrize(
    ("catch_up", "started"),
    [("none", 1), ("latest", 1), ("all", 10)],
)
async def test_after_ten_minutes_without_a_scheduler_the_catch_up_policy_decides(
    scheduling: Scheduling, catch_up: str, started: int
) -> None:
    await nightly(scheduling, catch_up=catch_up)
    for _ in range(10):
        scheduling.to_next_minute(seconds=0)
    scheduling.clock.advance(5)

    report = await scheduling.tick()()

    assert len(fired(report)) == started
    assert len(report.dues) == 10  # every due recorded: started or skipped
    assert fired(report)[-1] == scheduling.clock.now_ms() - 5_000


# --- pause, resume, trigger, delete --------------------------------------------------------


async def test_a_paused_schedule_fires_nothing_and_resuming_passes_over_its_dues(
    scheduling: Scheduling,
) -> None:
    await nightly(scheduling, catch_up="all")
    pause = PauseSchedule(store=scheduling.store, clock=scheduling.clock)
    await pause("nightly", paused=True)
    for _ in range(3):
        scheduling.to_next_minute()
        assert (await scheduling.tick()()).dues == ()

    view = await pause("nightly", paused=False)
    assert view.state.cursor_ms == scheduling.clock.now_ms()
    assert (await scheduling.tick()()).dues == ()
    scheduling.to_next_minute()
    assert len(fired(await scheduling.tick()())) == 1


async def test_a_trigger_starts_one_more_execution_each_time_under_a_key_of_its_own(
    scheduling: Scheduling,
) -> None:
    """W22: "run now" twice runs twice, and never merges with a due — even while paused."""
    await nightly(scheduling)
    await PauseSchedule(store=scheduling.store, clock=scheduling.clock)("nightly", paused=True)
    trigger = TriggerSchedule(
        store=scheduling.store, start=scheduling.twin.start_execution, ids=scheduling.twin.ids
    )

    first = await trigger("nightly")
    second = await trigger("nightly")

    assert first.dedup_key.startswith("sched:nightly:manual:")
    assert first.dedup_key != second.dedup_key
    assert first.started.execution_id != second.started.execution_id
    assert not first.started.deduplicated
    assert len(await scheduling.executions()) == 2


async def test_unknown_schedules_are_named(scheduling: Scheduling) -> None:
    trigger = TriggerSchedule(
        store=scheduling.store, start=scheduling.twin.start_execution, ids=scheduling.twin.ids
    )
    with pytest.raises(UnknownScheduleError, match="nightly"):
        await trigger("nightly")
    with pytest.raises(UnknownScheduleError):
        await PauseSchedule(store=scheduling.store, clock=scheduling.clock)("nightly", paused=True)
    with pytest.raises(UnknownScheduleError):
        await DeleteSchedule(store=scheduling.store)("nightly")


# --- priorities ----------------------------------------------------------------------------


async def test_every_start_of_a_schedule_carries_its_priority(scheduling: Scheduling) -> None:
    """A nightly batch scheduled ``low`` waits behind the day's urgent starts."""
    await nightly(scheduling, priority="low")
    scheduling.to_next_minute(seconds=5)

    assert len(fired(await scheduling.tick()())) == 1
    trigger = TriggerSchedule(
        store=scheduling.store, start=scheduling.twin.start_execution, ids=scheduling.twin.ids
    )
    await trigger("nightly")

    carriers = await scheduling.twin.queue.read("probe", count=10, block_ms=0)
    assert [d.envelope.priority for d in carriers if d.envelope] == [Priority.LOW] * 2


async def test_a_schedule_with_a_bad_priority_is_refused_by_name(scheduling: Scheduling) -> None:
    with pytest.raises(InvalidPriorityError, match="urgent"):
        await nightly(scheduling, priority="urgent")
    assert await ListSchedules(store=scheduling.store, clock=scheduling.clock)() == []


@pytest.mark.parametrize("level", list(Priority))
def test_a_schedules_priority_survives_its_stored_form_and_normal_is_not_written(
    level: Priority,
) -> None:
    schedule = Schedule.create(
        schedule_id="nightly",
        tenant_id="default",
        flow_id="quick",
        cron="* * * * *",
        now_ms=1_760_000_000_000,
        priority=level.value,
    )
    stored = schedule.to_json()
    assert ("priority" in stored) is (level is not Priority.NORMAL)
    assert Schedule.from_json(stored) == schedule
