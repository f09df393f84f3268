"""One tick of one schedule (W22): which dues start, which are skipped or buffered.

The schedule fires every minute (every hour in the rows with no due on time: a minutely
schedule always has one); the cursor is T; the grace is a minute. "On time" dues are at most
a minute late at the tick, "missed" ones older.

  catch-up  overlap     previous  waiting                      -> plan
  any       allow       any       1 on time                    -> fire
  latest    allow       running   1 on time                    -> fire
  latest    skip        running   1 on time                    -> skip (overlap)
  latest    skip        ended     2 on time (every 10 s)       -> fire, skip (overlap)
  latest    buffer_one  running   2 on time, nothing buffered  -> buffer, skip (overlap)
  latest    buffer_one  running   1 on time, B buffered        -> skip (overlap); B waits
  latest    buffer_one  ended     1 on time, B buffered        -> fire B, buffer the new one
  latest    buffer_one  ended     nothing, B buffered          -> fire B
  none      allow       ended     5 missed, 1 on time          -> skip x5 (missed), fire
  none      allow       ended     5 missed                     -> skip x5 (missed)
  latest    allow       ended     5 missed                     -> skip x4 (superseded), fire newest
  latest    allow       ended     5 missed, 1 on time          -> skip x5 (superseded), fire
  all       allow       ended     5 missed, 1 on time          -> fire x6
  all       allow       ended     150 missed                   -> skip x50 (beyond), fire x100
  all       skip        ended     3 missed                     -> fire, skip x2 (overlap)
  any       any         any       paused                       -> nothing
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.cron_schedules import (
    MAX_CATCH_UP,
    CatchUpPolicy,
    OverlapPolicy,
    Schedule,
    ScheduleState,
)
from plaita.domain.schedule_ticks import (
    MAX_PENDING_DUES,
    MIN_MISFIRE_GRACE_MS,
    DueAction,
    PendingDues,
    SkipReason,
    misfire_grace_ms,
    needs_previous_status,
    pending_dues,
    plan_tick,
)

T = 1_767_225_600_000  # 2026-01-01 00:00 UTC, on a minute
MINUTE = 60_000
HOUR = 60 * MINUTE
HOURLY = "0 * * * *"
FIRE, SKIP, BUFFER = DueAction.FIRE, DueAction.SKIP, DueAction.BUFFER


def schedule(overlap: str = "allow", catch_up: str = "latest", cron: str = "* * * * *") -> Schedule:
    return Schedule.create(
        schedule_id="s",
        tenant_id="default",
        flow_id="f",
        cron=cron,
        now_ms=T,
        overlap=overlap,
        catch_up=catch_up,
    )


def plan(
    sched: Schedule,
    now_ms: int,
    *,
    running: bool = False,
    state: ScheduleState | None = None,
    unit: int = 60_000,
) -> list[tuple[float, DueAction, SkipReason | None]]:
    """The plan as (minutes — or ``unit``s — after T, action, reason) rows."""
    state = state or ScheduleState(cursor_ms=T, last_execution_id="x-0")
    pending = pending_dues(sched, state, now_ms)
    tick = plan_tick(sched, state, pending, now_ms=now_ms, previous_running=running)
    return [((s.due_ms - T) / unit, s.action, s.reason) for s in tick.steps]


def on_time(minutes: int) -> int:
    """A tick a few seconds after the due ``minutes`` after T."""
    return T + minutes * MINUTE + 5_000


# --- overlap ------------------------------------------------------------------------------


@pytest.mark.parametrize("running", [False, True])
def test_allow_fires_an_on_time_due_whatever_runs(running: bool) -> None:
    assert plan(schedule("allow"), on_time(1), running=running) == [(1, FIRE, None)]


def test_skip_skips_a_due_while_the_previous_execution_runs() -> None:
    assert plan(schedule("skip"), on_time(1), running=True) == [(1, SKIP, SkipReason.OVERLAP)]


def test_skip_fires_the_first_due_and_skips_the_next_which_would_overlap_it() -> None:
    every_10s = schedule("skip", cron="* * * * * */10")
    state = ScheduleState(cursor_ms=T)

    steps = plan(every_10s, T + 25_000, state=state)

    assert [(action, reason) for _, action, reason in steps] == [
        (FIRE, None),
        (SKIP, SkipReason.OVERLAP),
    ]


def test_buffer_one_keeps_one_due_waiting_and_skips_the_rest() -> None:
    every_10s = schedule("buffer_one", cron="* * * * * */10")

    steps = plan(every_10s, T + 25_000, running=True)

    assert [(action, reason) for _, action, reason in steps] == [
        (BUFFER, None),
        (SKIP, SkipReason.OVERLAP),
    ]


def test_buffer_one_with_a_due_buffered_skips_new_ones_while_the_previous_runs() -> None:
    state = ScheduleState(cursor_ms=T, buffered_due_ms=T, last_execution_id="x-0")

    assert plan(schedule("buffer_one"), on_time(1), running=True, state=state) == [
        (1, SKIP, SkipReason.OVERLAP)
    ]


def test_buffer_one_fires_the_buffered_due_once_the_previous_ended_and_buffers_the_new() -> None:
    state = ScheduleState(cursor_ms=T, buffered_due_ms=T, last_execution_id="x-0")

    assert plan(schedule("buffer_one"), on_time(1), state=state) == [
        (0, FIRE, None),
        (1, BUFFER, None),
    ]


def test_buffer_one_fires_the_buffered_due_when_nothing_else_waits() -> None:
    state = ScheduleState(cursor_ms=T, buffered_due_ms=T, last_execution_id="x-0")

    assert plan(schedule("buffer_one"), T + 30_000, state=state) == [(0, FIRE, None)]


# --- catch-up after a downtime ------------------------------------------------------------


def test_none_skips_the_missed_dues_and_fires_the_one_on_time() -> None:
    steps = plan(schedule(catch_up="none"), on_time(6))

    assert steps == [(m, SKIP, SkipReason.MISSED) for m in range(1, 6)] + [(6, FIRE, None)]


def test_none_skips_every_missed_due_when_none_is_on_time() -> None:
    steps = plan(schedule(catch_up="none", cron=HOURLY), T + 5 * HOUR + 30 * MINUTE, unit=HOUR)

    assert steps == [(h, SKIP, SkipReason.MISSED) for h in range(1, 6)]


def test_latest_fires_the_newest_missed_due_when_none_is_on_time() -> None:
    steps = plan(schedule(catch_up="latest", cron=HOURLY), T + 5 * HOUR + 30 * MINUTE, unit=HOUR)

    assert steps == [(h, SKIP, SkipReason.SUPERSEDED) for h in range(1, 5)] + [(5, FIRE, None)]


def test_latest_lets_the_on_time_due_stand_for_the_missed_ones() -> None:
    steps = plan(schedule(catch_up="latest"), on_time(6))

    assert steps == [(m, SKIP, SkipReason.SUPERSEDED) for m in range(1, 6)] + [(6, FIRE, None)]


def test_all_fires_every_missed_due_and_the_one_on_time() -> None:
    assert plan(schedule(catch_up="all"), on_time(6)) == [(m, FIRE, None) for m in range(1, 7)]


def test_all_fires_at_most_the_newest_hundred_missed_dues() -> None:
    steps = plan(schedule(catch_up="all", cron=HOURLY), T + 150 * HOUR + 30 * MINUTE, unit=HOUR)

    skipped = [m for m, action, _ in steps if action is SKIP]
    fired = [m for m, action, _ in steps if action is FIRE]
    assert skipped == list(range(1, 51))
    assert {reason for _, action, reason in steps if action is SKIP} == {SkipReason.BEYOND_CATCH_UP}
    assert fired == list(range(51, 151)) and len(fired) == MAX_CATCH_UP


def test_all_with_skip_fires_the_first_missed_due_and_skips_those_overlapping_it() -> None:
    steps = plan(schedule("skip", "all", cron=HOURLY), T + 3 * HOUR + 30 * MINUTE, unit=HOUR)

    assert steps == [(1, FIRE, None), (2, SKIP, SkipReason.OVERLAP), (3, SKIP, SkipReason.OVERLAP)]


@pytest.mark.parametrize(
    ("late_ms", "action"), [(MIN_MISFIRE_GRACE_MS, FIRE), (MIN_MISFIRE_GRACE_MS + 1, SKIP)]
)
def test_a_due_is_on_time_up_to_the_grace_and_missed_after_it(
    late_ms: int, action: DueAction
) -> None:
    steps = plan(schedule(catch_up="none"), T + MINUTE + late_ms)

    assert [step[1] for step in steps if step[0] == 1] == [action]


def test_a_paused_schedule_plans_nothing_but_still_knows_its_next_run() -> None:
    sched = schedule()
    state = ScheduleState(cursor_ms=T, paused=True)
    pending = pending_dues(sched, state, on_time(3))

    tick = plan_tick(sched, state, pending, now_ms=on_time(3), previous_running=False)

    assert tick.steps == ()
    assert tick.next_run_ms == T + 4 * MINUTE


def test_the_plan_names_the_next_run_after_now() -> None:
    sched = schedule()
    state = ScheduleState(cursor_ms=T)

    tick = plan_tick(sched, state, PendingDues(()), now_ms=T + 1, previous_running=False)

    assert tick.steps == () and tick.fires == ()
    assert tick.next_run_ms == T + MINUTE


def test_a_schedule_idle_for_a_year_looks_at_a_bounded_number_of_dues() -> None:
    every_second = schedule(cron="* * * * * *")
    now = T + 365 * 86_400_000

    pending = pending_dues(every_second, ScheduleState(cursor_ms=T), now)

    assert len(pending.dues) == MAX_PENDING_DUES and pending.truncated
    assert pending.dues[-1] == now


# --- when the previous execution's status is needed ---------------------------------------


@pytest.mark.parametrize(
    ("overlap", "state", "pending", "needed"),
    [
        ("allow", ScheduleState(T, last_execution_id="x"), PendingDues((T + MINUTE,)), False),
        ("skip", ScheduleState(T, last_execution_id="x"), PendingDues((T + MINUTE,)), True),
        ("skip", ScheduleState(T, last_execution_id="x"), PendingDues(()), False),
        ("skip", ScheduleState(T), PendingDues((T + MINUTE,)), False),
        (
            "buffer_one",
            ScheduleState(T, buffered_due_ms=T, last_execution_id="x"),
            PendingDues(()),
            True,
        ),
    ],
)
def test_the_previous_status_is_read_only_when_the_plan_depends_on_it(
    overlap: str, state: ScheduleState, pending: PendingDues, needed: bool
) -> None:
    assert needs_previous_status(schedule(overlap), state, pending) is needed


@pytest.mark.parametrize(
    ("poll_ms", "ttl_ms", "grace_ms"),
    [(1000, 30_000, 62_000), (100, 2000, 60_000), (10_000, 300_000, 620_000)],
)
def test_the_grace_covers_a_poll_and_a_crashed_replicas_claim(
    poll_ms: int, ttl_ms: int, grace_ms: int
) -> None:
    assert misfire_grace_ms(poll_ms, ttl_ms) == grace_ms


# --- properties over every policy ---------------------------------------------------------


@given(
    overlap=st.sampled_from(list(OverlapPolicy)),
    catch_up=st.sampled_from(list(CatchUpPolicy)),
    running=st.booleans(),
    buffered=st.booleans(),
    minutes=st.integers(min_value=0, max_value=200),
    seconds=st.integers(min_value=0, max_value=59),
)
def test_every_waiting_due_gets_one_step_and_no_on_time_due_is_swallowed(
    overlap: OverlapPolicy,
    catch_up: CatchUpPolicy,
    running: bool,
    buffered: bool,
    minutes: int,
    seconds: int,
) -> None:
    """W22 (property): the plan is ascending, covers each waiting due exactly once, and only
    the overlap policy (never catch-up) skips a due that is on time — so a live scheduler never
    swallows the next due."""
    sched = schedule(overlap.value, catch_up.value)
    state = ScheduleState(
        cursor_ms=T,
        last_execution_id="x-0",
        buffered_due_ms=T if buffered and overlap is OverlapPolicy.BUFFER_ONE else None,
    )
    now = T + minutes * MINUTE + seconds * 1000
    pending = pending_dues(sched, state, now)

    tick = plan_tick(sched, state, pending, now_ms=now, previous_running=running)

    dues = [step.due_ms for step in tick.steps]
    assert dues == sorted(dues)
    expected = set(pending.dues) | (
        {T} if state.buffered_due_ms is not None and not running else set()
    )
    assert set(dues) == expected and len(dues) == len(expected)
    for step in tick.steps:
        if now - step.due_ms <= MIN_MISFIRE_GRACE_MS and step.action is SKIP:
            assert step.reason is SkipReason.OVERLAP
    if overlap is OverlapPolicy.ALLOW:
        assert all(step.action is not BUFFER for step in tick.steps)
    else:
        # skip and buffer_one never start a second execution beside a running one.
        assert len(tick.fires) <= (0 if running else 1)
