"""Dedup keys of scheduled starts: one execution per due, one per "run now" request (W22).

Keys are ``sched:{schedule_id}:{kind}:{tail}``. The tail is the last ``:``-separated segment
and never contains ``:`` itself, and the kinds differ, so the three key spaces are disjoint
and each key names exactly one (schedule, due / request / second) — whatever the schedule id
(which follows the id rule, ``plaita.domain.ids``, so it may hold ``:``).
"""

from __future__ import annotations

import enum

import attrs

from plaita.domain.errors import ScheduleDedupError
from plaita.domain.ids import validate_schedule_id

#: WARNING logged when a cron fire falls back to the wall-clock key.
DUE_MISSING_EVENT = "schedule.due_missing"


class KeySource(enum.StrEnum):
    """Where a scheduled start's dedup key came from."""

    DUE_AT = "due_at"
    NEXT_RUN_AT = "next_run_at"
    #: Neither due time was known: the key is the wall-clock second of the fire.
    FIRED_AT = "fired_at"
    MANUAL = "manual"


@attrs.frozen
class ScheduleKey:
    key: str
    source: KeySource
    #: The due time the key stands for; ``None`` for manual and fallback keys.
    due_ms: int | None = None
    #: Set when the key cannot tell two fires of one due apart; log it at WARNING.
    warning: str | None = None


def cron_dedup_key(schedule_id: str, due_ms: int) -> str:
    """The key of one due: every re-fire of it (lock expiry, reclaim) lands on the same one."""
    _check_schedule_id(schedule_id)
    _check_time(due_ms, "due_ms")
    return f"sched:{schedule_id}:due:{due_ms}"


def manual_dedup_key(schedule_id: str, request_id: str) -> str:
    """The key of one "run now" request: an explicit ask to run again, never merged with a due."""
    _check_schedule_id(schedule_id)
    if not request_id or ":" in request_id:
        raise ScheduleDedupError(
            f"schedule {schedule_id!r}: request id {request_id!r} must be non-empty and "
            "contain no ':'; pass the request's unique id"
        )
    return f"sched:{schedule_id}:manual:{request_id}"


def fired_dedup_key(schedule_id: str, fired_at_ms: int) -> str:
    """The last-resort key: the wall-clock second of the fire (the old, weaker key of #118)."""
    _check_schedule_id(schedule_id)
    _check_time(fired_at_ms, "fired_at_ms")
    return f"sched:{schedule_id}:fired:{fired_at_ms // 1000}"


def cron_fire_key(
    schedule_id: str, *, due_at_ms: int | None, next_run_at_ms: int | None, fired_at_ms: int
) -> ScheduleKey:
    """The key of a cron fire: the caller's due, else the schedule's next_run_at, else the
    wall-clock second with a WARNING.

    Keyed by due time, not fire time: two fires of one due in different seconds (state write
    failed and the 30 s lock expired, or the carrier was reclaimed) must not start twice, and
    the next due must never be swallowed by the previous one (#23, #118).
    """
    if due_at_ms is not None:
        return ScheduleKey(cron_dedup_key(schedule_id, due_at_ms), KeySource.DUE_AT, due_at_ms)
    if next_run_at_ms is not None:
        return ScheduleKey(
            cron_dedup_key(schedule_id, next_run_at_ms), KeySource.NEXT_RUN_AT, next_run_at_ms
        )
    return ScheduleKey(
        fired_dedup_key(schedule_id, fired_at_ms),
        KeySource.FIRED_AT,
        warning=(
            f"schedule {schedule_id!r} fired with no due time and no next_run_at; keyed by the "
            "wall-clock second, so a re-fire in another second may start twice — repair the "
            "schedule's next_run_at"
        ),
    )


def manual_fire_key(schedule_id: str, request_id: str) -> ScheduleKey:
    return ScheduleKey(manual_dedup_key(schedule_id, request_id), KeySource.MANUAL)


def _check_schedule_id(schedule_id: str) -> None:
    # InvalidScheduleIdError is a ScheduleDedupError: no key is built for a bad id.
    validate_schedule_id(schedule_id)


def _check_time(value: int, name: str) -> None:
    # bool is an int: `True` is not a due time. A negative time would put '-' in the tail.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ScheduleDedupError(f"{name} {value!r} is not epoch milliseconds (an int ≥ 0)")
