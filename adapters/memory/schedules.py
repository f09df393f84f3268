"""In-memory twin of the Redis schedule store (W22)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from plaita.application.ports import Clock, DueClaim, StoredSchedule
from plaita.domain.cron_schedules import (
    DueOutcome,
    Schedule,
    ScheduleRef,
    ScheduleState,
    record_due,
    resumed,
    schedule_exists,
)


class MemoryScheduleStore:
    """ScheduleStore in memory: one record per (tenant, id), claims with an expiry read from
    the clock. Definitions are kept as JSON, as Redis keeps them."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._records: dict[ScheduleRef, tuple[dict[str, object], ScheduleState]] = {}
        self._claims: dict[tuple[ScheduleRef, int], tuple[str, int]] = {}

    async def create(self, schedule: Schedule, *, paused: bool = False) -> None:
        if schedule.ref in self._records:
            raise schedule_exists(schedule.ref)
        self._records[schedule.ref] = (
            schedule.to_json(),
            ScheduleState.new(schedule, paused=paused),
        )

    async def get(self, ref: ScheduleRef) -> StoredSchedule | None:
        record = self._records.get(ref)
        if record is None:
            return None
        return StoredSchedule(Schedule.from_json(record[0]), record[1])

    async def list(self, tenant_id: str | None = None) -> Sequence[StoredSchedule]:
        refs = sorted(
            (ref for ref in self._records if tenant_id is None or ref.tenant_id == tenant_id),
            key=lambda ref: (ref.tenant_id, ref.schedule_id),
        )
        return [
            StoredSchedule(Schedule.from_json(self._records[r][0]), self._records[r][1])
            for r in refs
        ]

    async def set_paused(
        self, ref: ScheduleRef, paused: bool, *, now_ms: int
    ) -> StoredSchedule | None:
        record = self._records.get(ref)
        if record is None:
            return None
        document, state = record
        state = attrs.evolve(state, paused=True) if paused else resumed(state, now_ms)
        self._records[ref] = (document, state)
        return StoredSchedule(Schedule.from_json(document), state)

    async def delete(self, ref: ScheduleRef) -> bool:
        return self._records.pop(ref, None) is not None

    async def claim_due(
        self, ref: ScheduleRef, due_ms: int, *, holder: str, ttl_ms: int
    ) -> DueClaim:
        if ttl_ms <= 0:
            raise ValueError(f"a claim ttl must be a positive number of milliseconds, got {ttl_ms}")
        record = self._records.get(ref)
        if record is None:
            return DueClaim.GONE
        if not record[1].handles(due_ms):
            return DueClaim.DONE
        now_ms = self._clock.now_ms()
        claim = self._claims.get((ref, due_ms))
        if claim is not None and claim[0] != holder and claim[1] > now_ms:
            return DueClaim.HELD
        self._forget_expired(now_ms)
        self._claims[(ref, due_ms)] = (holder, now_ms + ttl_ms)
        return DueClaim.CLAIMED

    async def record_due(
        self,
        ref: ScheduleRef,
        due_ms: int,
        outcome: DueOutcome,
        *,
        execution_id: str | None = None,
        error: str | None = None,
    ) -> bool:
        record = self._records.get(ref)
        if record is None:
            return False
        after = record_due(record[1], due_ms, outcome, execution_id=execution_id, error=error)
        self._claims.pop((ref, due_ms), None)
        if after is None:
            return False
        self._records[ref] = (record[0], after)
        return True

    def _forget_expired(self, now_ms: int) -> None:
        # Claims expire like Redis keys with a TTL: none outlives its due's handling for long.
        for key in [key for key, (_, expires) in self._claims.items() if expires <= now_ms]:
            del self._claims[key]
