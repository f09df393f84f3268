"""In-memory twin of the Redis delay queue: due carriers move into a MemoryTaskQueue (W8, V8)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.application.codec import encode_envelope
from plaita.application.ports import Clock
from plaita.domain.envelope import TaskEnvelope


class MemoryDelayQueue:
    """DelayQueue in memory; carriers are held encoded, exactly as in the Redis sorted set.

    Timer ids are ``<now_ms>-<sequence>`` from the injected clock, so tests see stable ids.
    Carriers due at the same millisecond move in the order they were scheduled (the Redis
    adapter promises no order for them).
    """

    def __init__(self, clock: Clock, queue: MemoryTaskQueue) -> None:
        self._clock = clock
        self._queue = queue
        self._sequence = itertools.count()
        #: timer id → (due ms, schedule sequence, stream fields)
        self._held: dict[str, tuple[int, int, dict[str, str]]] = {}

    async def schedule(self, envelope: TaskEnvelope, *, due_ms: int) -> str:
        return await self.schedule_raw(encode_envelope(envelope), due_ms=due_ms)

    async def schedule_raw(self, fields: Mapping[str, str], *, due_ms: int) -> str:
        """Hold stream fields as they are until ``due_ms``; the timer id."""
        if not fields:
            raise ValueError("a delayed carrier needs at least one stream field")
        sequence = next(self._sequence)
        timer_id = f"{self._clock.now_ms()}-{sequence}"
        self._held[timer_id] = (due_ms, sequence, dict(fields))
        return timer_id

    async def move_due(self, *, now_ms: int, limit: int = 500) -> int:
        if limit <= 0:
            return 0
        due = sorted(
            (held[0], held[1], timer_id)
            for timer_id, held in self._held.items()
            if held[0] <= now_ms
        )[:limit]
        # Each carrier leaves the held set before the await that enqueues it, so a concurrent
        # move_due never takes it twice.
        taken = [(timer_id, self._held.pop(timer_id)) for _due, _seq, timer_id in due]
        for index, (_timer_id, (_due_ms, _sequence, fields)) in enumerate(taken):
            try:
                await self._queue.enqueue_raw(fields)
            except BaseException:
                # Not moved (or not known to be): back into the held set, never lost.
                self._held.update(taken[index:])
                raise
        return len(taken)

    async def pending(self) -> int:
        return len(self._held)
