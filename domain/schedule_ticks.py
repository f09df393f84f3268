"""One scheduler tick of one schedule: which dues start now, which are skipped (W22).

Given the schedule, its recorded state, the time now and whether the execution it started
last still runs, ``plan_tick`` returns every due waiting since the cursor, in ascending
order, each with what to do: start it, skip it, or buffer it. Nothing here starts anything;
the scheduler claims each due, performs the step and records it (``record_due``), in this
order.

A due is **on time** while it is at most the *grace* late (``misfire_grace_ms``: a minute, or
twice a poll plus a claim when those are longer — a due a live scheduler picks up late, after
a crashed replica's claim expired, is still on time). Older dues were **missed**, and the
catch-up policy says what becomes of them. On-time dues always go on to the overlap policy:
no policy swallows a due that came while a scheduler was running.

The overlap policy then walks the dues in order: a due just started counts as running for
the dues after it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from plaita.domain.cron_schedules import (
    MAX_CATCH_UP,
    CatchUpPolicy,
    OverlapPolicy,
    Schedule,
    ScheduleState,
)

#: A due picked up within this long of its time is on time (see ``misfire_grace_ms``).
MIN_MISFIRE_GRACE_MS = 60_000
#: The most waiting dues one tick looks at (the newest); the cursor passes over older ones.
MAX_PENDING_DUES = 1000


class DueAction(enum.StrEnum):
    FIRE = "fire"
    SKIP = "skip"
    BUFFER = "buffer"


class SkipReason(enum.StrEnum):
    #: Missed, and catch-up is ``none``.
    MISSED = "missed"
    #: Missed, and a later due stands for it (catch-up ``latest``).
    SUPERSEDED = "superseded"
    #: Missed, older than the newest ``MAX_CATCH_UP`` (catch-up ``all``).
    BEYOND_CATCH_UP = "beyond_catch_up"
    #: The previous execution still runs (overlap ``skip``, or ``buffer_one`` with one waiting).
    OVERLAP = "overlap"


@attrs.frozen
class PlannedDue:
    due_ms: int
    action: DueAction
    reason: SkipReason | None = None


@attrs.frozen
class PendingDues:
    """The dues waiting since the cursor, ascending, and whether older ones were left out
    (more than ``MAX_PENDING_DUES`` waited: those are passed over without a record)."""

    dues: tuple[int, ...]
    truncated: bool = False


@attrs.frozen
class TickPlan:
    steps: tuple[PlannedDue, ...]
    #: The next due after now (None: the expression names no later time).
    next_run_ms: int | None

    @property
    def fires(self) -> tuple[int, ...]:
        return tuple(step.due_ms for step in self.steps if step.action is DueAction.FIRE)


def misfire_grace_ms(poll_interval_ms: int, claim_ttl_ms: int) -> int:
    """How late a due may start and still be on time: a minute, or twice a poll interval
    plus a claim's TTL when that is longer."""
    return max(MIN_MISFIRE_GRACE_MS, 2 * (poll_interval_ms + claim_ttl_ms))


def pending_dues(schedule: Schedule, state: ScheduleState, now_ms: int) -> PendingDues:
    """The dues after the cursor up to now, at most the newest ``MAX_PENDING_DUES``."""
    dues, truncated = schedule.cron.dues_between(state.cursor_ms, now_ms, MAX_PENDING_DUES)
    return PendingDues(tuple(dues), truncated)


def needs_previous_status(schedule: Schedule, state: ScheduleState, pending: PendingDues) -> bool:
    """Whether the plan depends on the last execution still running: only for ``skip`` and
    ``buffer_one``, only when something waits, only when there was a last execution."""
    waiting = bool(pending.dues) or state.buffered_due_ms is not None
    return (
        schedule.overlap is not OverlapPolicy.ALLOW
        and waiting
        and state.last_execution_id is not None
    )


def plan_tick(
    schedule: Schedule,
    state: ScheduleState,
    pending: PendingDues,
    *,
    now_ms: int,
    previous_running: bool,
    grace_ms: int = MIN_MISFIRE_GRACE_MS,
) -> TickPlan:
    """What to do with each waiting due now (see the module's rules); nothing while paused."""
    next_run = schedule.cron.next_after(now_ms)
    if state.paused:
        return TickPlan((), next_run)
    on_time = [due for due in pending.dues if now_ms - due <= grace_ms]
    missed = [due for due in pending.dues if now_ms - due > grace_ms]
    passed, candidates = _catch_up(schedule.catch_up, missed, on_time)
    steps = [*passed, *_overlap(schedule.overlap, state, candidates, previous_running)]
    steps.sort(key=lambda step: step.due_ms)
    return TickPlan(tuple(steps), next_run)


def _catch_up(
    policy: CatchUpPolicy, missed: Sequence[int], on_time: Sequence[int]
) -> tuple[list[PlannedDue], list[int]]:
    """The missed dues skipped, and the dues that go on to the overlap policy (ascending)."""
    if policy is CatchUpPolicy.NONE:
        keep: list[int] = []
        reason = SkipReason.MISSED
    elif policy is CatchUpPolicy.LATEST:
        keep = [] if on_time or not missed else [missed[-1]]
        reason = SkipReason.SUPERSEDED
    else:
        keep = list(missed[-MAX_CATCH_UP:])
        reason = SkipReason.BEYOND_CATCH_UP
    kept = set(keep)
    skipped = [PlannedDue(due, DueAction.SKIP, reason) for due in missed if due not in kept]
    return skipped, [*keep, *on_time]


def _overlap(
    policy: OverlapPolicy,
    state: ScheduleState,
    candidates: Sequence[int],
    previous_running: bool,
) -> list[PlannedDue]:
    steps: list[PlannedDue] = []
    busy = previous_running
    buffered = state.buffered_due_ms
    if policy is OverlapPolicy.BUFFER_ONE and buffered is not None and not busy:
        steps.append(PlannedDue(buffered, DueAction.FIRE))
        buffered, busy = None, True
    for due in candidates:
        if policy is OverlapPolicy.ALLOW or not busy:
            steps.append(PlannedDue(due, DueAction.FIRE))
            busy = True
        elif policy is OverlapPolicy.BUFFER_ONE and buffered is None:
            steps.append(PlannedDue(due, DueAction.BUFFER))
            buffered = due
        else:
            steps.append(PlannedDue(due, DueAction.SKIP, SkipReason.OVERLAP))
    return steps
