"""One Redis stream read through one consumer group, shared by the queue and the event log.

Replies are normalised here so callers see ``str`` whatever the client's ``protocol`` and
``decode_responses`` settings are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio as redis
from redis.exceptions import ResponseError

#: An entry as (message id, fields); fields are empty for an entry deleted from the stream.
StreamEntry = tuple[str, dict[str, str]]

# XAUTOCLAIM scans at most COUNT*10 pending entries per call; a few calls find idle entries
# that sit behind a long run of young ones without looping forever on a huge backlog.
_MAX_CLAIM_CALLS = 10


def text(value: object) -> str:
    if isinstance(value, bytes):
        # A foreign producer may write non-UTF-8 bytes; keep them readable as evidence (R4).
        return value.decode("utf-8", errors="replace")
    return str(value)


def text_fields(raw: Mapping[Any, Any] | None) -> dict[str, str]:
    return {text(key): text(value) for key, value in (raw or {}).items()}


class RedisGroupStream:
    """A stream and its consumer group: add, read, ack, claim idle, inspect."""

    def __init__(self, client: redis.Redis, stream: str, group: str) -> None:
        self._client = client
        self.stream = stream
        self.group = group

    async def ensure_group(self) -> None:
        try:
            await self._client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def add(self, fields: Mapping[str, str]) -> str:
        entry: dict[Any, Any] = dict(fields)
        return text(await self._client.xadd(self.stream, entry))

    async def read(
        self, consumer: str, *, start: str, count: int, block_ms: int
    ) -> list[StreamEntry]:
        """New entries (``start=">"``) or ``consumer``'s own pending ones after ``start``."""
        reply = await self._client.xreadgroup(
            self.group,
            consumer,
            {self.stream: start},
            count=count,
            # BLOCK 0 means "forever" to Redis; the port's 0 means "do not wait".
            block=block_ms if block_ms > 0 else None,
        )
        return _entries_of_read(reply)

    async def ack(self, message_id: str) -> None:
        await self._client.xack(self.stream, self.group, message_id)

    async def claim_idle(self, consumer: str, *, min_idle_ms: int, count: int) -> list[StreamEntry]:
        claimed: list[StreamEntry] = []
        cursor = "0-0"
        for _ in range(_MAX_CLAIM_CALLS):
            reply = await self._client.xautoclaim(
                self.stream, self.group, consumer, min_idle_ms, cursor, count=count - len(claimed)
            )
            # Redis 7 replies [cursor, entries, deleted ids] and drops the deleted ids from the
            # pending list itself; Redis 6.2 replied [cursor, entries] with nil entries instead.
            cursor = text(reply[0])
            for message_id, fields in reply[1]:
                if message_id is not None and fields:
                    claimed.append((text(message_id), text_fields(fields)))
            if cursor == "0-0" or len(claimed) >= count:
                break
        return claimed

    async def touch(self, consumer: str, message_ids: Sequence[str]) -> int:
        """XCLAIM … 0 JUSTID to ``consumer``: idle time reset, delivery count unchanged.

        Ids no longer pending (acked, unknown, deleted) are ignored; the number still pending
        is returned.
        """
        if not message_ids:
            return 0
        # Duplicates would be claimed (and counted) twice; the memory twin counts them once.
        try:
            claimed = await self._client.xclaim(
                self.stream, self.group, consumer, 0, list(dict.fromkeys(message_ids)), justid=True
            )
        except ResponseError as exc:
            if "NOGROUP" in str(exc):
                return 0
            raise
        return len(claimed or [])

    async def delivery_counts(self, message_ids: Sequence[str]) -> dict[str, int]:
        """How often each pending entry was delivered (entries no longer pending are absent)."""
        if not message_ids:
            return {}
        async with self._client.pipeline(transaction=False) as pipe:
            for message_id in message_ids:
                pipe.xpending_range(
                    self.stream, self.group, min=message_id, max=message_id, count=1
                )
            replies = await pipe.execute()
        return {
            text(row["message_id"]): int(row["times_delivered"]) for rows in replies for row in rows
        }

    async def length_and_pending(self) -> tuple[int, int]:
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.xlen(self.stream)
            pipe.xpending(self.stream, self.group)
            length, summary = await pipe.execute(raise_on_error=False)
        if isinstance(length, Exception):
            raise length
        if isinstance(summary, ResponseError) and "NOGROUP" in str(summary):
            return int(length), 0
        if isinstance(summary, Exception):
            raise summary
        return int(length), int(summary["pending"])

    async def oldest_unread_ms(self) -> int | None:
        """The id time of the first entry after the group's last-delivered id (None: none).

        Two round trips (XINFO GROUPS, then XRANGE from that id, exclusive); stats only.
        """
        try:
            groups = await self._client.xinfo_groups(self.stream)
        except ResponseError:
            return None  # no stream yet
        last = next(
            (
                text(group.get("last-delivered-id", "0-0"))
                for group in groups
                if text(group.get("name", "")) == self.group
            ),
            "0-0",
        )
        entries = await self._client.xrange(self.stream, min=f"({last}", count=1)
        if not entries:
            return None
        return int(text(entries[0][0]).split("-", 1)[0])


def _entries_of_read(reply: Any) -> list[StreamEntry]:
    # RESP2: [[stream, [(id, fields), ...]]]; RESP3: {stream: [[(id, fields), ...]]}.
    if not reply:
        return []
    if isinstance(reply, Mapping):
        batches = [batch for value in reply.values() for batch in value]
    else:
        batches = [entries for _stream, entries in reply]
    return [
        (text(message_id), text_fields(fields))
        for entries in batches
        for message_id, fields in entries or []
        if message_id is not None
    ]
