"""Cron schedules on Redis: one hash per schedule, a key per claimed due, one index (W22)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text, text_fields
from plaita.application.ports import DueClaim, StoredSchedule
from plaita.domain.cron_schedules import (
    DueOutcome,
    Schedule,
    ScheduleRef,
    ScheduleState,
    failure_text,
    schedule_exists,
)

#: Hash fields of the state; a missing field is None (or 0 for the counts).
_OPTIONAL = {"last_due": "last_due_ms", "buffered": "buffered_due_ms"}


class RedisScheduleStore:
    """ScheduleStore on ``{tns}:sched:{<schedule_id>}`` (``RedisKeys.schedule``: definition
    and state fields), ``…:claim:<due_ms>`` (``schedule_claim``) and the deployment's index
    ``{ns}:schedules`` of ``<tenant>:<schedule_id>`` members.

    A schedule's hash and its claims share the schedule id's hash tag: every state change is
    one script in one slot (``schedule_*.lua``). The index lives in another slot. A create
    adds to the index first and then stores the hash; a delete removes the hash first and
    then the member: a crash between the two leaves an index member without a hash, which
    listings pass over and a later create or delete of that id puts right (ADR 0024).
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._create = client.register_script(read_script("schedule_create"))
        self._pause = client.register_script(read_script("schedule_pause"))
        self._claim = client.register_script(read_script("schedule_claim"))
        self._record = client.register_script(read_script("schedule_record"))

    async def create(self, schedule: Schedule, *, paused: bool = False) -> None:
        ref = schedule.ref
        await self._client.sadd(self._keys.schedules(), _member(ref))
        state = ScheduleState.new(schedule, paused=paused)
        stored = await self._create(
            keys=[self._key(ref)],
            args=[
                json.dumps(schedule.to_json(), separators=(",", ":")),
                "1" if paused else "0",
                state.cursor_ms,
            ],
        )
        if int(stored) == 0:
            raise schedule_exists(ref)

    async def get(self, ref: ScheduleRef) -> StoredSchedule | None:
        return _stored(await self._client.hgetall(self._key(ref)))

    async def list(self, tenant_id: str | None = None) -> Sequence[StoredSchedule]:
        members = sorted(text(m) for m in await self._client.smembers(self._keys.schedules()))
        refs = [ref for ref in map(_ref, members) if tenant_id in (None, ref.tenant_id)]
        refs.sort(key=lambda ref: (ref.tenant_id, ref.schedule_id))
        if not refs:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for ref in refs:
                pipe.hgetall(self._key(ref))
            replies = await pipe.execute()
        return [stored for stored in map(_stored, replies) if stored is not None]

    async def set_paused(
        self, ref: ScheduleRef, paused: bool, *, now_ms: int
    ) -> StoredSchedule | None:
        reply = await self._pause(keys=[self._key(ref)], args=["1" if paused else "0", now_ms])
        flat = [text(value) for value in reply]
        return _stored(dict(zip(flat[::2], flat[1::2], strict=True)))

    async def delete(self, ref: ScheduleRef) -> bool:
        deleted = int(await self._client.delete(self._key(ref)))
        await self._client.srem(self._keys.schedules(), _member(ref))
        return deleted == 1

    async def claim_due(
        self, ref: ScheduleRef, due_ms: int, *, holder: str, ttl_ms: int
    ) -> DueClaim:
        if ttl_ms <= 0:
            raise ValueError(f"a claim ttl must be a positive number of milliseconds, got {ttl_ms}")
        reply = await self._claim(
            keys=[self._key(ref), self._claim_key(ref, due_ms)], args=[due_ms, holder, ttl_ms]
        )
        return DueClaim(text(reply))

    async def record_due(
        self,
        ref: ScheduleRef,
        due_ms: int,
        outcome: DueOutcome,
        *,
        execution_id: str | None = None,
        error: str | None = None,
    ) -> bool:
        reply = await self._record(
            keys=[self._key(ref), self._claim_key(ref, due_ms)],
            args=[
                due_ms,
                outcome.value,
                execution_id or "",
                failure_text(error) if outcome is DueOutcome.FAILED else "",
            ],
        )
        return int(reply) == 1

    def _key(self, ref: ScheduleRef) -> str:
        return self._keys.schedule(ref.tenant_id, ref.schedule_id)

    def _claim_key(self, ref: ScheduleRef, due_ms: int) -> str:
        return self._keys.schedule_claim(ref.tenant_id, ref.schedule_id, due_ms)


def _member(ref: ScheduleRef) -> str:
    return f"{ref.tenant_id}:{ref.schedule_id}"


def _ref(member: str) -> ScheduleRef:
    # A tenant id never holds ':', a schedule id may: the first ':' separates them.
    tenant_id, _, schedule_id = member.partition(":")
    return ScheduleRef(tenant_id, schedule_id)


def _stored(raw: Mapping[Any, Any] | None) -> StoredSchedule | None:
    fields = text_fields(raw)
    if "definition" not in fields:
        return None
    state: dict[str, Any] = {
        "cursor_ms": int(fields["cursor"]),
        "paused": fields.get("paused") == "1",
        "last_execution_id": fields.get("last_execution"),
        "fired": int(fields.get("fired", 0)),
        "skipped": int(fields.get("skipped", 0)),
        "failed": int(fields.get("failed", 0)),
        "last_error": fields.get("last_error"),
    }
    for field, name in _OPTIONAL.items():
        state[name] = int(fields[field]) if field in fields else None
    return StoredSchedule(
        Schedule.from_json(json.loads(fields["definition"])), ScheduleState(**state)
    )
