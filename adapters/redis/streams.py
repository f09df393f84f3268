"""One Redis stream read through one consumer group, shared by the queue and the event log.

Replies are normalised here so callers see ``str`` ids whatever the client's ``protocol`` and
``decode_responses`` settings are. Entry fields are read undecoded, whatever the client's
``decode_responses``: any producer can write to a stream, and a client that decodes would fail
the whole reply — every entry read with it, and every later read and reclaim — on one byte that
is not UTF-8. Each caller decodes each entry on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio as redis
from redis.client import NEVER_DECODE
from redis.exceptions import ResponseError

from plaita.application.codec import RawFields

#: An entry as (message id, fields as stored); fields are empty for a deleted entry.
RawStreamEntry = tuple[str, dict[bytes, bytes]]

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


async def undecoded(client: redis.Redis, *command: Any) -> Any:
    """Run a command that returns stream entries, its reply left as bytes (see above)."""
    return await client.execute_command(  # type: ignore[no-untyped-call]
        *command, **{NEVER_DECODE: True}
    )


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

    async def add(self, fields: RawFields) -> str:
        entry: dict[Any, Any] = dict(fields)
        return text(await self._client.xadd(self.stream, entry))

    async def read(
        self, consumer: str, *, start: str, count: int, block_ms: int
    ) -> list[RawStreamEntry]:
        """New entries (``start=">"``) or ``consumer``'s own pending ones after ``start``."""
        command: list[Any] = ["XREADGROUP", "GROUP", self.group, consumer, "COUNT", count]
        if block_ms > 0:
            # BLOCK 0 means "forever" to Redis; the port's 0 means "do not wait".
            command += ["BLOCK", block_ms]
        reply = await undecoded(self._client, *command, "STREAMS", self.stream, start)
        return entries_of_read(reply)

    async def ack(self, message_id: str) -> None:
        await self._client.xack(self.stream, self.group, message_id)

    async def claim_idle(
        self, consumer: str, *, min_idle_ms: int, count: int
    ) -> list[RawStreamEntry]:
        claimed: list[RawStreamEntry] = []
        cursor = "0-0"
        for _ in range(_MAX_CLAIM_CALLS):
            reply = await undecoded(
                self._client,
                "XAUTOCLAIM",
                self.stream,
                self.group,
                consumer,
                min_idle_ms,
                cursor,
                "COUNT",
                count - len(claimed),
            )
            # Redis 7 replies [cursor, entries, deleted ids] and drops the deleted ids from the
            # pending list itself; Redis 6.2 replied [cursor, entries] with nil entries instead.
            cursor = text(reply[0])
            for message_id, fields in reply[1]:
                if message_id is not None and fields:
                    claimed.append((text(message_id), dict(fields)))
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
        [counts] = await lengths_and_pending(self._client, [self])
        return counts

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
        entries = await undecoded(self._client, "XRANGE", self.stream, f"({last}", "+", "COUNT", 1)
        if not entries:
            return None
        return int(text(entries[0][0]).split("-", 1)[0])


def entries_of_read(reply: Any) -> list[RawStreamEntry]:
    """The entries of an XREAD/XREADGROUP reply, fields as read (a deleted entry: empty)."""
    # RESP2: [[stream, [(id, fields), ...]]]; RESP3: {stream: [[(id, fields), ...]]}.
    if not reply:
        return []
    if isinstance(reply, Mapping):
        batches = [batch for value in reply.values() for batch in value]
    else:
        batches = [entries for _stream, entries in reply]
    return [
        (text(message_id), dict(fields or {}))
        for entries in batches
        for message_id, fields in entries or []
        if message_id is not None
    ]


async def lengths_and_pending(
    client: redis.Redis, streams: Sequence[RedisGroupStream]
) -> list[tuple[int, int]]:
    """(length, pending) of each stream, in one pipeline (one round trip on one node; the
    streams of one queue partition share a hash tag, so one on a cluster too)."""
    async with client.pipeline(transaction=False) as pipe:
        for stream in streams:
            pipe.xlen(stream.stream)
            pipe.xpending(stream.stream, stream.group)
        replies = await pipe.execute(raise_on_error=False)
    counts = []
    for length, summary in zip(replies[::2], replies[1::2], strict=True):
        if isinstance(length, Exception):
            raise length
        if isinstance(summary, ResponseError) and "NOGROUP" in str(summary):
            counts.append((int(length), 0))
            continue
        if isinstance(summary, Exception):
            raise summary
        counts.append((int(length), int(summary["pending"])))
    return counts
