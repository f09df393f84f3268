"""The task queue (W1, W2, W10, R4): carriers on a consumer-group stream, and its DLQ."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from plaita.domain.envelope import TaskEnvelope

#: A stream entry's fields exactly as they were written: (name, value) pairs, base64.
RawBase64 = tuple[tuple[str, str], ...]


@attrs.frozen
class Delivery:
    """One carrier as read from the queue.

    ``envelope`` is None when the entry could not be decoded; ``problem`` then says why and
    ``raw`` keeps the fields as evidence for the dead-letter queue (R4). An entry that is not
    UTF-8 shows its bytes ``\\x``-escaped in ``raw`` and keeps them losslessly in
    ``raw_base64``: every (field name, value) pair, in order, each base64-encoded.
    """

    message_id: str
    envelope: TaskEnvelope | None
    raw: dict[str, str]
    delivery_count: int
    reclaimed: bool = False
    problem: str | None = None
    raw_base64: RawBase64 | None = None


@attrs.frozen
class QueueStats:
    """The task stream's size as one read saw it."""

    length: int
    pending: int
    #: The stream-id time (ms) of the oldest carrier no worker has read yet; None when every
    #: carrier was read. ``now - oldest_unread_ms`` is how far the workers lag behind.
    oldest_unread_ms: int | None = None


@attrs.frozen
class DeadLetter:
    """One entry of the dead-letter queue: the carrier's fields and why it is there."""

    dlq_id: str
    message_id: str
    reason: str
    raw: dict[str, str]
    #: The carrier's exact bytes when it was not UTF-8 (see ``Delivery``), else None.
    raw_base64: RawBase64 | None = None


class TaskQueue(Protocol):
    """The carriers workers consume, acked only after their dispatch returned (W1)."""

    async def ensure_group(self) -> None:
        """Create the stream and its consumer group if missing (group starts at id 0)."""
        ...

    async def enqueue(self, envelope: TaskEnvelope) -> str:
        """Append a carrier; return its message id."""
        ...

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[Delivery]:
        """New carriers for ``consumer``; waits up to ``block_ms`` when there are none."""
        ...

    async def ack(self, message_id: str) -> None:
        """Mark a carrier done; only after its dispatch returned (W1)."""
        ...

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int) -> list[Delivery]:
        """Take over carriers pending on other consumers longer than ``min_idle_ms`` (W2)."""
        ...

    async def touch(self, consumer: str, message_ids: Sequence[str]) -> int:
        """Reset the idle time of carriers ``consumer`` holds; how many were still pending.

        XCLAIM … 0 JUSTID to itself, so a live holder's carrier is not reclaimed (W5, I0).
        Never increments the delivery count; ids no longer pending are ignored.
        """
        ...

    async def stats(self) -> QueueStats:
        """Stream length and number of pending (delivered, not acked) carriers."""
        ...

    async def dead_letter(self, delivery: Delivery, reason: str) -> str:
        """Copy the carrier's raw fields and ``reason`` to the DLQ, then ack it; the DLQ id.

        The DLQ is a lossy FIFO (W10, S5): the same atomic step trims it to its length cap,
        dropping the oldest entries; ``dead_letters_dropped`` counts them.
        """
        ...

    async def dead_letters_dropped(self) -> int:
        """How many dead letters the cap dropped through this queue object since it was made.

        A running total: each worker counts what its own writes dropped.
        """
        ...

    async def dead_letter_length(self) -> int:
        """How many entries the DLQ holds now (at most its length cap, W10)."""
        ...

    async def dead_letters(self, *, count: int = 100) -> list[DeadLetter]:
        """The newest dead letters, newest first."""
        ...

    async def trim_acknowledged(self) -> int:
        """Remove the entries below the oldest one the group still needs (S5); how many.

        What the group needs is every pending entry and every entry not yet delivered: none
        of them, and nothing after them, is ever removed, whatever runs meanwhile (one
        atomic step on Redis). Acked entries behind them stay until those are acked.
        """
        ...
