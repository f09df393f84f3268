"""The partitions of a task queue on Redis: reading them all at once, and whether a layout
still holds carriers (``--partitions``).

Reading P partitions keeps one blocking XREADGROUP per partition open, across calls: a
carrier on any partition is taken at once, and an idle worker sends one read per partition
per block time, never a polling loop. What such a read returns while the worker is busy
waits in a buffer for the next call (pending on this consumer, as any carrier being
dispatched), so a call never returns more than it asked for. A task queue's partitions
are its priority streams (``PriorityStreams``): its reads take from that buffer in priority
order (``in_priority_order``); the event log's take first in, first out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Protocol

import attrs
import redis.asyncio as redis
from redis.exceptions import ResponseError

from plaita.adapters.redis.queue_priorities import PartitionEntry, PriorityBuffer
from plaita.adapters.redis.streams import RawStreamEntry, RedisGroupStream, text, undecoded


class PartitionStream(Protocol):
    """What is read of one partition: its stream, or its priority streams."""

    async def read(
        self, consumer: str, *, start: str, count: int, block_ms: int
    ) -> list[RawStreamEntry]: ...


#: How long past its BLOCK a read's reply may take before a call gives up waiting for it
#: (the read stays open and is collected by the next call).
_REPLY_GRACE_S = 1.0
#: How many entries after a group's last delivery are counted when Redis cannot say (its
#: ``lag`` is unknown once entries were deleted); the refusal says "at least" that many.
_UNREAD_SCAN = 1000


@attrs.define
class _ConsumerReads:
    reads: dict[int, asyncio.Task[list[RawStreamEntry]]] = attrs.field(factory=dict)
    buffer: PriorityBuffer = attrs.field(factory=PriorityBuffer)
    next_sweep: int = 0

    def take(self, count: int, *, in_priority_order: bool) -> list[PartitionEntry]:
        if in_priority_order:
            return self.buffer.take(count)
        entries = self.buffer.entries
        return [entries.popleft() for _ in range(min(count, len(entries)))]


class PartitionedReads:
    """New entries of every partition for a consumer; see the module docstring."""

    def __init__(
        self, streams: Sequence[PartitionStream], *, in_priority_order: bool = False
    ) -> None:
        self._streams = list(streams)
        self._in_priority_order = in_priority_order
        self._consumers: dict[str, _ConsumerReads] = {}

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[PartitionEntry]:
        state = self._consumers.setdefault(consumer, _ConsumerReads())
        self._collect(state)
        if not state.buffer:
            if block_ms <= 0:
                await self._sweep(state, consumer, count)
            else:
                for partition, stream in enumerate(self._streams):
                    if partition not in state.reads:
                        state.reads[partition] = asyncio.ensure_future(
                            stream.read(consumer, start=">", count=count, block_ms=block_ms)
                        )
                await self._wait(state, block_ms)
        return state.take(count, in_priority_order=self._in_priority_order)

    async def _wait(self, state: _ConsumerReads, block_ms: int) -> None:
        """Until an open read brings entries, or every one ended empty, or the block time is
        over. Each read ends by itself within its BLOCK (plus a round trip), so the deadline
        has a grace: entries already there are never cut off by a client-side timer. No read
        is reopened here: an empty partition costs one read per call."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block_ms / 1000 + _REPLY_GRACE_S
        while not state.buffer:
            waiting = [task for task in state.reads.values() if not task.done()]
            remaining = deadline - loop.time()
            if not waiting or remaining <= 0:
                break
            await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            self._collect(state)

    def in_flight(self, consumer: str) -> int:
        """How many blocking reads ``consumer`` has open (at most one per partition)."""
        state = self._consumers.get(consumer)
        return 0 if state is None else sum(not task.done() for task in state.reads.values())

    def forget(self, entries: Sequence[tuple[int, str]]) -> None:
        """Drop buffered entries a reclaim just took (so no carrier is dispatched twice)."""
        taken = set(entries)
        for state in self._consumers.values():
            # A read that has ended holds entries as good as buffered: take them in first.
            self._collect(state, raise_errors=False)
            state.buffer.forget(taken)

    async def close(self) -> None:
        """Cancel the open reads (what they had read stays pending, for reclaim)."""
        tasks = [task for state in self._consumers.values() for task in state.reads.values()]
        self._consumers.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _sweep(self, state: _ConsumerReads, consumer: str, count: int) -> None:
        """Non-blocking: the partitions one after the other until ``count`` entries, starting
        one further each call so no partition always waits for the others."""
        start = state.next_sweep
        state.next_sweep = (start + 1) % len(self._streams)
        for offset in range(len(self._streams)):
            wanted = count - len(state.buffer.entries)
            if wanted <= 0:
                break
            partition = (start + offset) % len(self._streams)
            if partition in state.reads:
                continue  # its blocking read delivers what arrives there
            entries = await self._streams[partition].read(
                consumer, start=">", count=wanted, block_ms=0
            )
            state.buffer.extend(partition, entries)

    @staticmethod
    def _collect(state: _ConsumerReads, *, raise_errors: bool = True) -> None:
        """Move what the ended reads brought into the buffer; raise the first failure (or,
        without ``raise_errors``, leave the failed reads for the next call to raise)."""
        failure: BaseException | None = None
        for partition, task in list(state.reads.items()):
            if not task.done():
                continue
            error = None if task.cancelled() else task.exception()
            if error is not None and not raise_errors:
                continue
            del state.reads[partition]
            if task.cancelled():
                continue
            if error is not None:
                failure = failure or error
                continue
            state.buffer.extend(partition, task.result())
        if failure is not None:
            raise failure


async def waiting_carriers(
    client: redis.Redis, streams: Sequence[RedisGroupStream], delayed: Sequence[str]
) -> int:
    """Carriers a layout still holds: pending or unread in its streams, waiting in its delay
    sets (the group's own view; acked entries not yet trimmed do not count)."""
    total = 0
    for stream in streams:
        try:
            groups = await client.xinfo_groups(stream.stream)
        except ResponseError:
            continue  # no stream: nothing waits there
        mine = next((g for g in groups if text(g.get("name", "")) == stream.group), None)
        if mine is None:
            total += int(await client.xlen(stream.stream))
            continue
        total += int(mine.get("pending") or 0)
        lag = mine.get("lag")
        if lag is not None:
            total += int(lag)
            continue
        last = text(mine.get("last-delivered-id", "0-0"))
        entries = await undecoded(
            client, "XRANGE", stream.stream, f"({last}", "+", "COUNT", _UNREAD_SCAN
        )
        total += len(entries or [])
    for key in delayed:
        total += int(await client.zcard(key))
    return total
