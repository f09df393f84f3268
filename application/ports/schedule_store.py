"""Cron schedules, their recorded state and the claims of their dues (W22)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol

import attrs

from plaita.domain.cron_schedules import DueOutcome, Schedule, ScheduleRef, ScheduleState


@attrs.frozen
class StoredSchedule:
    """A schedule as stored: its definition and what the schedulers recorded."""

    schedule: Schedule
    state: ScheduleState

    @property
    def ref(self) -> ScheduleRef:
        """Which schedule this is."""
        return self.schedule.ref


class DueClaim(enum.StrEnum):
    """What a claim of one (schedule, due) got."""

    #: This holder may perform the due now (a claim it already held is renewed).
    CLAIMED = "claimed"
    #: Another holder's claim on the due has not expired: leave the due to it.
    HELD = "held"
    #: The due was recorded already (or passed over): nothing to do.
    DONE = "done"
    #: The schedule does not exist (any more).
    GONE = "gone"


class ScheduleStore(Protocol):
    """Schedules by (tenant, id), for every tenant of the deployment.

    The definition never changes after ``create``; the state moves only by ``set_paused``
    and ``record_due`` (the domain's ``record_due`` rule, applied atomically), and each due
    is performed by one holder at a time thanks to ``claim_due`` — several schedulers may
    run against one store.
    """

    async def create(self, schedule: Schedule, *, paused: bool = False) -> None:
        """Store a new schedule with ``ScheduleState.new``, or raise ScheduleExistsError.

        When the tenant has a schedule of that id, nothing is written.
        """
        ...

    async def get(self, ref: ScheduleRef) -> StoredSchedule | None:
        """The schedule and its state, or None."""
        ...

    async def list(self, tenant_id: str | None = None) -> Sequence[StoredSchedule]:
        """The tenant's schedules, or every tenant's with None, sorted by (tenant, id)."""
        ...

    async def set_paused(
        self, ref: ScheduleRef, paused: bool, *, now_ms: int
    ) -> StoredSchedule | None:
        """Pause or unpause in one atomic step; the schedule after, or None without one.

        Unpausing moves the cursor to ``now_ms`` (``cron_schedules.resumed``): dues that fell
        while it was paused are passed over.
        """
        ...

    async def delete(self, ref: ScheduleRef) -> bool:
        """Remove the schedule and its state; False when it did not exist.

        Claims of its dues expire on their own.
        """
        ...

    async def claim_due(
        self, ref: ScheduleRef, due_ms: int, *, holder: str, ttl_ms: int
    ) -> DueClaim:
        """Claim one due for ``holder`` for ``ttl_ms`` while it still waits (``DueClaim``).

        One atomic step with the check that the due still waits (``ScheduleState.handles``).
        """
        ...

    async def record_due(
        self,
        ref: ScheduleRef,
        due_ms: int,
        outcome: DueOutcome,
        *,
        execution_id: str | None = None,
        error: str | None = None,
    ) -> bool:
        """Record what became of one due and drop its claim, in one atomic step.

        Applies ``cron_schedules.record_due``; False, changing nothing, when the due was
        recorded already or the schedule is gone.
        """
        ...
