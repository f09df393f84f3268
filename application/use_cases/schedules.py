"""Cron schedules (W22): the operator's use cases, and the scheduler's tick.

Every operator use case acts for the tenant of the unit of work (``current_tenant``), like
the execution use cases. The tick acts for every tenant: it lists every schedule and opens
each one's tenant scope for its starts.

A due starts through ``StartExecution`` with the dedup key ``sched:{schedule_id}:due:{due_ms}``
(``cron_dedup_key``: the due time, never the time of the fire), so a due fired twice — a
replica's claim expired while its start was on the way, a tick retried after a store error —
converges on one execution, and the next due, whose key differs, is never swallowed by it. A
manual trigger gets a key of its own, unique per request (``manual_dedup_key``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.application.actor import Actor, actor_scope, current_actor
from plaita.application.ports import (
    Clock,
    DueClaim,
    ExecutionRepository,
    IdGenerator,
    ScheduleStore,
    StoredSchedule,
)
from plaita.application.tenancy import current_tenant, tenant_scope
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.start_execution import StartedExecution, StartExecution
from plaita.domain.cron import DEFAULT_TIMEZONE
from plaita.domain.cron_schedules import (
    DEFAULT_CATCH_UP,
    DEFAULT_OVERLAP,
    DueOutcome,
    Schedule,
    ScheduleRef,
    ScheduleState,
)
from plaita.domain.errors import PlaitaError, UnknownScheduleError
from plaita.domain.execution import ExecutionStatus
from plaita.domain.ids import validate_schedule_id
from plaita.domain.schedule_ticks import (
    MIN_MISFIRE_GRACE_MS,
    DueAction,
    PlannedDue,
    SkipReason,
    needs_previous_status,
    pending_dues,
    plan_tick,
)
from plaita.domain.schedules import cron_dedup_key, manual_dedup_key

JSON = Any
#: Who created, paused, resumed, deleted or triggered which schedule (CLI and console alike).
audit = logging.getLogger("plaita.audit")

#: How many next run times ``show`` lists by default.
DEFAULT_NEXT_RUNS = 5
#: The most next run times one ``show`` lists.
MAX_NEXT_RUNS = 100


@attrs.frozen
class ScheduleView:
    """A schedule as an operator reads it: definition, state and the next run times."""

    schedule: Schedule
    state: ScheduleState
    next_runs: tuple[int, ...]
    #: The status of the execution it started last, when asked for (``show``) and known.
    last_status: ExecutionStatus | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            **self.schedule.to_json(),
            **self.state.to_json(),
            "next_run_ms": self.next_runs[0] if self.next_runs else None,
            "next_runs_ms": list(self.next_runs),
            "last_status": None if self.last_status is None else self.last_status.value,
        }


def schedule_view(stored: StoredSchedule, now_ms: int, count: int = 1) -> ScheduleView:
    """``stored`` with its next ``count`` run times after now (or after its cursor, later)."""
    after = max(now_ms, stored.state.cursor_ms)
    return ScheduleView(
        stored.schedule, stored.state, tuple(stored.schedule.cron.next_runs(after, count))
    )


def _ref(schedule_id: str) -> ScheduleRef:
    return ScheduleRef(current_tenant(), validate_schedule_id(schedule_id))


def _unknown(ref: ScheduleRef) -> UnknownScheduleError:
    return UnknownScheduleError(
        f"no schedule {ref.schedule_id!r} for tenant {ref.tenant_id!r}; list them with "
        "`plaita schedules list` (GET /api/v1/schedules)"
    )


async def _stored(store: ScheduleStore, ref: ScheduleRef) -> StoredSchedule:
    stored = await store.get(ref)
    if stored is None:
        raise _unknown(ref)
    return stored


def _who(ref: ScheduleRef, **fields: object) -> str:
    """The audit fields of an operator's change: who, which schedule, and ``fields``."""
    extra = "".join(f" {name}={value}" for name, value in fields.items())
    return f"by={current_actor()} tenant_id={ref.tenant_id} schedule_id={ref.schedule_id}{extra}"


async def _start(start: StartExecution, schedule: Schedule, dedup_key: str) -> StartedExecution:
    return await start(
        schedule.flow_id,
        version=schedule.flow_version,
        params=schedule.input,
        dedup_key=dedup_key,
        tenant_id=schedule.tenant_id,
        priority=schedule.priority,
    )


# --- the operator's use cases --------------------------------------------------------------


class CreateSchedule:
    """Create a schedule of a flow the tenant can run (UnknownFlowError when it cannot)."""

    def __init__(self, *, store: ScheduleStore, flows: FlowCatalog, clock: Clock) -> None:
        self._store = store
        self._flows = flows
        self._clock = clock

    async def __call__(
        self,
        schedule_id: str,
        *,
        flow_id: str,
        cron: str,
        timezone: str = DEFAULT_TIMEZONE,
        version: str | None = None,
        input: Mapping[str, JSON] | None = None,
        overlap: str = DEFAULT_OVERLAP,
        catch_up: str = DEFAULT_CATCH_UP,
        paused: bool = False,
        priority: str = "normal",
    ) -> ScheduleView:
        now_ms = self._clock.now_ms()
        schedule = Schedule.create(
            schedule_id=schedule_id,
            tenant_id=current_tenant(),
            flow_id=flow_id,
            cron=cron,
            timezone=timezone,
            flow_version=version,
            input=input,
            overlap=overlap,
            catch_up=catch_up,
            priority=priority,
            now_ms=now_ms,
        )
        # The flow must exist now; it may still be deleted later (its dues then fail).
        await self._flows.get(schedule.flow_id, schedule.flow_version)
        await self._store.create(schedule, paused=paused)
        audit.info(
            "event=schedule.created %s",
            _who(
                schedule.ref,
                flow_id=schedule.flow_id,
                cron=repr(schedule.cron.expression),
                timezone=schedule.cron.timezone,
                paused=paused,
            ),
        )
        state = ScheduleState.new(schedule, paused=paused)
        return schedule_view(StoredSchedule(schedule, state), now_ms)


class ListSchedules:
    def __init__(self, *, store: ScheduleStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def __call__(self) -> list[ScheduleView]:
        now_ms = self._clock.now_ms()
        return [schedule_view(s, now_ms) for s in await self._store.list(current_tenant())]


class ShowSchedule:
    def __init__(
        self, *, store: ScheduleStore, executions: ExecutionRepository, clock: Clock
    ) -> None:
        self._store = store
        self._executions = executions
        self._clock = clock

    async def __call__(self, schedule_id: str, *, count: int = DEFAULT_NEXT_RUNS) -> ScheduleView:
        stored = await _stored(self._store, _ref(schedule_id))
        view = schedule_view(stored, self._clock.now_ms(), max(0, min(count, MAX_NEXT_RUNS)))
        if stored.state.last_execution_id is None:
            return view
        last = await self._executions.load(stored.state.last_execution_id)
        return attrs.evolve(view, last_status=None if last is None else last.status)


class PauseSchedule:
    """Pause (``paused=True``) or resume a schedule; resuming passes over the paused dues."""

    def __init__(self, *, store: ScheduleStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def __call__(self, schedule_id: str, *, paused: bool) -> ScheduleView:
        ref = _ref(schedule_id)
        now_ms = self._clock.now_ms()
        stored = await self._store.set_paused(ref, paused, now_ms=now_ms)
        if stored is None:
            raise _unknown(ref)
        if paused:
            audit.info("event=schedule.paused %s", _who(ref))
        else:
            audit.info("event=schedule.resumed %s", _who(ref))
        return schedule_view(stored, now_ms)


class DeleteSchedule:
    """Delete a schedule; executions it started are left as they are."""

    def __init__(self, *, store: ScheduleStore) -> None:
        self._store = store

    async def __call__(self, schedule_id: str) -> ScheduleRef:
        ref = _ref(schedule_id)
        if not await self._store.delete(ref):
            raise _unknown(ref)
        audit.info("event=schedule.deleted %s", _who(ref))
        return ref


@attrs.frozen
class TriggeredRun:
    schedule_id: str
    dedup_key: str
    started: StartedExecution


class TriggerSchedule:
    """Start one execution of a schedule now, paused or not, under a key of its own."""

    def __init__(self, *, store: ScheduleStore, start: StartExecution, ids: IdGenerator) -> None:
        self._store = store
        self._start = start
        self._ids = ids

    async def __call__(self, schedule_id: str) -> TriggeredRun:
        stored = await _stored(self._store, _ref(schedule_id))
        # A fresh request id per call: "run now" twice runs twice, and never merges with a due.
        key = manual_dedup_key(stored.schedule.schedule_id, self._ids.new_id().replace(":", "-"))
        started = await _start(self._start, stored.schedule, key)
        audit.info(
            "event=schedule.triggered %s",
            _who(stored.ref, execution_id=started.execution_id, dedup_key=key),
        )
        return TriggeredRun(stored.schedule.schedule_id, key, started)


# --- the scheduler's tick ----------------------------------------------------------------


@attrs.frozen
class TickSettings:
    #: Who claims the dues: the scheduler process (unique per incarnation).
    holder_id: str
    #: How long a claim keeps other schedulers off a due: a crashed scheduler's dues wait
    #: this long for another one.
    claim_ttl_ms: int = 30_000
    grace_ms: int = MIN_MISFIRE_GRACE_MS


@attrs.frozen
class DueReport:
    """What one scheduler did with one due: recorded ``False`` when another one recorded it
    first (the start then met the due's dedup key)."""

    ref: ScheduleRef
    due_ms: int
    outcome: DueOutcome
    recorded: bool
    reason: SkipReason | None = None
    execution_id: str | None = None
    deduplicated: bool = False
    error: str | None = None


@attrs.frozen
class TickReport:
    now_ms: int
    dues: tuple[DueReport, ...] = ()
    #: Schedules with more waiting dues than one tick looks at; the oldest were passed over.
    truncated: tuple[ScheduleRef, ...] = ()
    #: Dues left to another scheduler's live claim this tick.
    held: int = 0


class RunSchedulerTick:
    """One pass over every schedule of the deployment: plan, claim, perform, record."""

    def __init__(
        self,
        *,
        store: ScheduleStore,
        start: StartExecution,
        executions: ExecutionRepository,
        clock: Clock,
        settings: TickSettings,
    ) -> None:
        self._store = store
        self._start = start
        self._executions = executions
        self._clock = clock
        self.settings = settings

    async def __call__(self) -> TickReport:
        now_ms = self._clock.now_ms()
        dues: list[DueReport] = []
        truncated: list[ScheduleRef] = []
        held = 0
        for stored in await self._store.list():
            plan, was_truncated = await self._plan(stored, now_ms)
            if was_truncated:
                truncated.append(stored.ref)
            performed, left = await self._perform(stored.schedule, plan)
            dues.extend(performed)
            held += left
        return TickReport(now_ms, tuple(dues), tuple(truncated), held)

    async def _plan(
        self, stored: StoredSchedule, now_ms: int
    ) -> tuple[tuple[PlannedDue, ...], bool]:
        schedule, state = stored.schedule, stored.state
        if state.paused:
            return (), False
        pending = pending_dues(schedule, state, now_ms)
        if not pending.dues and state.buffered_due_ms is None:
            return (), False
        running = needs_previous_status(schedule, state, pending) and await self._running(stored)
        plan = plan_tick(
            schedule,
            state,
            pending,
            now_ms=now_ms,
            previous_running=running,
            grace_ms=self.settings.grace_ms,
        )
        return plan.steps, pending.truncated

    async def _running(self, stored: StoredSchedule) -> bool:
        """Whether the execution the schedule started last has not ended (a missing one has)."""
        assert stored.state.last_execution_id is not None
        with tenant_scope(stored.schedule.tenant_id):
            last = await self._executions.load(stored.state.last_execution_id)
        return last is not None and not last.status.is_terminal

    async def _perform(
        self, schedule: Schedule, steps: tuple[PlannedDue, ...]
    ) -> tuple[list[DueReport], int]:
        """Each step in order under its claim; the first due another scheduler holds (or
        handled) ends the schedule's turn: its plan is stale, the next tick plans again."""
        reports: list[DueReport] = []
        for step in steps:
            claim = await self._store.claim_due(
                schedule.ref,
                step.due_ms,
                holder=self.settings.holder_id,
                ttl_ms=self.settings.claim_ttl_ms,
            )
            if claim is not DueClaim.CLAIMED:
                return reports, int(claim is DueClaim.HELD)
            reports.append(await self._one(schedule, step))
        return reports, 0

    async def _one(self, schedule: Schedule, step: PlannedDue) -> DueReport:
        if step.action is DueAction.SKIP:
            report = DueReport(schedule.ref, step.due_ms, DueOutcome.SKIPPED, False, step.reason)
        elif step.action is DueAction.BUFFER:
            report = DueReport(schedule.ref, step.due_ms, DueOutcome.BUFFERED, False)
        else:
            report = await self._fire(schedule, step.due_ms)
        recorded = await self._store.record_due(
            schedule.ref,
            step.due_ms,
            report.outcome,
            execution_id=report.execution_id,
            error=report.error,
        )
        return attrs.evolve(report, recorded=recorded)

    async def _fire(self, schedule: Schedule, due_ms: int) -> DueReport:
        key = cron_dedup_key(schedule.schedule_id, due_ms)
        with (
            tenant_scope(schedule.tenant_id),
            actor_scope(Actor("scheduler", f"schedule {schedule.schedule_id}")),
        ):
            try:
                started = await _start(self._start, schedule, key)
            except PlaitaError as exc:
                # A named refusal (the flow was deleted, its input no longer fits) is the
                # same on every retry: the due fails for good. A store that does not answer
                # raises something else, and the due waits for the next tick.
                return DueReport(
                    schedule.ref,
                    due_ms,
                    DueOutcome.FAILED,
                    False,
                    error=f"{type(exc).__name__}: {exc}",
                )
        return DueReport(
            schedule.ref,
            due_ms,
            DueOutcome.FIRED,
            False,
            execution_id=started.execution_id,
            deduplicated=started.deduplicated,
        )
