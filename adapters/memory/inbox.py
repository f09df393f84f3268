"""In-memory twin of the Redis inbox: events per (tenant, correlation id), TTL on the clock (V6)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from plaita.application.ports import Clock
from plaita.domain.events import Event, InboxEntry

INBOX_MAX_ENTRIES = 1000
INBOX_TTL_SECONDS = 7 * 24 * 60 * 60

_Key = tuple[str, str]  # (tenant id, correlation id)


class MemoryInbox:
    def __init__(
        self,
        clock: Clock,
        *,
        ttl_seconds: int = INBOX_TTL_SECONDS,
        max_entries: int = INBOX_MAX_ENTRIES,
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError(
                f"an inbox ttl must be a positive number of seconds, got {ttl_seconds}"
            )
        if max_entries <= 0:
            raise ValueError(f"an inbox keeps at least one event, got max_entries={max_entries}")
        self._clock = clock
        self._ttl_ms = ttl_seconds * 1000
        self._max_entries = max_entries
        #: key -> (events oldest first, taken (execution id, event id) -> subscription, expiry)
        self._boxes: dict[_Key, tuple[deque[Event], dict[tuple[str, str], str], int]] = {}

    async def add(self, event: Event) -> None:
        if event.correlation_id is None:
            return
        key = (event.tenant_id, event.correlation_id)
        events, taken, expires_at = self._live(key) or (deque(maxlen=self._max_entries), {}, 0)
        events.append(event)
        self._boxes[key] = (events, taken, max(expires_at, self._now_ms() + self._ttl_ms))

    async def entries(
        self, tenant_id: str, correlation_id: str, execution_id: str
    ) -> Sequence[InboxEntry]:
        box = self._live((tenant_id, correlation_id))
        if box is None:
            return []
        events, taken, _ = box
        return [InboxEntry(e, taken.get((execution_id, e.event_id))) for e in events]

    async def take(
        self,
        tenant_id: str,
        correlation_id: str,
        execution_id: str,
        event_id: str,
        subscription_id: str,
    ) -> str:
        key = (tenant_id, correlation_id)
        events, taken, expires_at = self._live(key) or (deque(maxlen=self._max_entries), {}, 0)
        holder = taken.setdefault((execution_id, event_id), subscription_id)
        self._boxes[key] = (events, taken, max(expires_at, self._now_ms() + self._ttl_ms))
        return holder

    def _live(self, key: _Key) -> tuple[deque[Event], dict[tuple[str, str], str], int] | None:
        box = self._boxes.get(key)
        if box is not None and self._now_ms() >= box[2]:
            del self._boxes[key]
            return None
        return box

    def _now_ms(self) -> int:
        return round(self._clock.monotonic() * 1000)
