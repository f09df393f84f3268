"""An in-memory twin of a Redis stream read through one consumer group.

It keeps what Redis keeps: entries in id order, a last-delivered position and a pending
entries list with owner, delivery count and last delivery time per entry. Entries are
trimmed like the Redis trim script does (``trim_acknowledged``): only below the oldest one
the group still needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

import attrs

from plaita.application.ports import Clock

#: What an entry's fields may hold: text, or (the task queue's raw entries) bytes as well.
Field = TypeVar("Field", str, str | bytes)
#: (message id, fields, delivery count)
Delivered = tuple[str, dict[Field, Field], int]


@attrs.define
class _Pending:
    consumer: str
    delivery_count: int
    delivered_at_ms: int


class MemoryGroupStream(Generic[Field]):
    """Add, read new or own pending entries, ack, claim idle entries; ages from the Clock."""

    def __init__(self, clock: Clock, *, arrived: asyncio.Condition | None = None) -> None:
        """``arrived`` is notified on every add; streams read together share one."""
        self._clock = clock
        self._entries: dict[str, dict[Field, Field]] = {}
        self._order: list[str] = []
        self._next = 0
        self._pending: dict[str, _Pending] = {}
        self._last_id = (0, 0)
        self._arrived = arrived or asyncio.Condition()

    async def add(self, fields: Mapping[Field, Field]) -> str:
        now_ms = self._clock.now_ms()
        last_ms, last_seq = self._last_id
        self._last_id = (last_ms, last_seq + 1) if now_ms <= last_ms else (now_ms, 0)
        message_id = f"{self._last_id[0]}-{self._last_id[1]}"
        self._entries[message_id] = dict(fields)
        self._order.append(message_id)
        async with self._arrived:
            self._arrived.notify_all()
        return message_id

    async def read_new(self, consumer: str, *, count: int, block_ms: int) -> list[Delivered[Field]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block_ms / 1000
        while True:
            batch = self._deliver_new(consumer, count)
            remaining = deadline - loop.time()
            if batch or remaining <= 0:
                return batch
            async with self._arrived:
                try:
                    await asyncio.wait_for(self._arrived.wait_for(self._has_new), remaining)
                except TimeoutError:
                    return []

    def read_pending(self, consumer: str, *, after: str, count: int) -> list[Delivered[Field]]:
        """``consumer``'s own pending entries with ids after ``after``; counts a delivery each."""
        after_key = _id_key(after)
        own = [
            message_id
            for message_id in self._pending_in_order()
            if self._pending[message_id].consumer == consumer and _id_key(message_id) > after_key
        ]
        return [self._deliver(message_id, consumer) for message_id in own[:count]]

    def ack(self, message_id: str) -> None:
        self._pending.pop(message_id, None)

    def claim_idle(self, consumer: str, *, min_idle_ms: int, count: int) -> list[Delivered[Field]]:
        """Like XAUTOCLAIM: take entries idle for at least ``min_idle_ms``, whoever owns them."""
        now_ms = self._now_ms()
        idle = [
            message_id
            for message_id in self._pending_in_order()
            if now_ms - self._pending[message_id].delivered_at_ms >= min_idle_ms
        ]
        return [self._deliver(message_id, consumer) for message_id in idle[:count]]

    def touch(self, consumer: str, message_ids: Sequence[str]) -> int:
        """Like XCLAIM … 0 JUSTID: pending entries become ``consumer``'s, idle from now.

        The delivery count is unchanged; ids not pending are ignored. How many were pending.
        """
        now_ms = self._now_ms()
        touched = 0
        for message_id in dict.fromkeys(message_ids):
            entry = self._pending.get(message_id)
            if entry is None:
                continue
            entry.consumer = consumer
            entry.delivered_at_ms = now_ms
            touched += 1
        return touched

    def newest(self, count: int) -> list[tuple[str, dict[Field, Field]]]:
        """Like XREVRANGE + - COUNT: the last ``count`` entries, newest first."""
        latest = self._order[-count:] if count > 0 else []
        return [(message_id, dict(self._entries[message_id])) for message_id in reversed(latest)]

    @property
    def length(self) -> int:
        return len(self._order)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def trim_acknowledged(self, *, min_age_ms: int) -> int:
        """Remove the entries below the oldest pending or undelivered one that are at least
        ``min_age_ms`` old by their id's time (``stream_trim.lua``); how many."""
        bounds = [_id_key(message_id) for message_id in self._order[self._next : self._next + 1]]
        if self._pending:
            bounds.append(min(_id_key(message_id) for message_id in self._pending))
        if min_age_ms > 0:
            bounds.append((self._clock.now_ms() - min_age_ms, 0))
        bound = min(bounds, default=None)
        trimmed = 0
        while trimmed < len(self._order) and (
            bound is None or _id_key(self._order[trimmed]) < bound
        ):
            trimmed += 1
        for message_id in self._order[:trimmed]:
            del self._entries[message_id]
        del self._order[:trimmed]
        self._next -= trimmed
        return trimmed

    def trim_to(self, max_len: int) -> int:
        """Like XTRIM MAXLEN (exact): drop the oldest entries beyond ``max_len``; how many."""
        dropped = max(0, len(self._order) - max_len)
        for message_id in self._order[:dropped]:
            del self._entries[message_id]
            self._pending.pop(message_id, None)
        del self._order[:dropped]
        self._next = max(0, self._next - dropped)
        return dropped

    def deliver_new(self, consumer: str, count: int) -> list[Delivered[Field]]:
        """Like XREADGROUP … > without BLOCK: up to ``count`` new entries, now pending."""
        return self._deliver_new(consumer, count)

    def _deliver_new(self, consumer: str, count: int) -> list[Delivered[Field]]:
        batch = self._order[self._next : self._next + count]
        self._next += len(batch)
        return [self._deliver(message_id, consumer) for message_id in batch]

    def _deliver(self, message_id: str, consumer: str) -> Delivered[Field]:
        previous = self._pending.get(message_id)
        delivery_count = 1 if previous is None else previous.delivery_count + 1
        self._pending[message_id] = _Pending(consumer, delivery_count, self._now_ms())
        return message_id, dict(self._entries[message_id]), delivery_count

    def oldest_unread_ms(self) -> int | None:
        """The id time of the first entry the group has not delivered yet (None: none)."""
        if not self._has_new():
            return None
        return int(self._order[self._next].split("-", 1)[0])

    def has_new(self) -> bool:
        """Whether the group has an entry it has not delivered yet."""
        return self._has_new()

    def _has_new(self) -> bool:
        return self._next < len(self._order)

    def _pending_in_order(self) -> list[str]:
        return sorted(self._pending, key=_id_key)

    def _now_ms(self) -> int:
        return round(self._clock.monotonic() * 1000)


def _id_key(message_id: str) -> tuple[int, int]:
    milliseconds, _, sequence = message_id.partition("-")
    return int(milliseconds), int(sequence or 0)
