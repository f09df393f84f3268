"""Trimming a consumer-group stream below what every group still needs (S5).

Streams grow by one entry per carrier or notification and used to be kept forever. One
script (``stream_trim.lua``) finds, atomically, the oldest entry any group still needs —
pending, or not yet delivered — and removes what lies below it, so an entry that a worker
or an event filter still has to read or ack can never be trimmed.
"""

from __future__ import annotations

import redis.asyncio as redis

from plaita.adapters.redis.scripts import read_script
from plaita.domain.retention import check_trim_age_ms


class StreamTrimmer:
    def __init__(self, client: redis.Redis, stream: str, *more: str) -> None:
        """``more``: streams trimmed with ``stream`` by the same script (one hash tag: a queue
        partition's priority streams), each on its own."""
        self._streams = [stream, *more]
        self._script = client.register_script(read_script("stream_trim"))

    async def trim(self, *, min_age_ms: int) -> int:
        """Remove the entries every group has acked and that are at least ``min_age_ms``
        old (0: any age); how many were removed."""
        args = [check_trim_age_ms(min_age_ms)]
        return int(await self._script(keys=self._streams, args=args))
