"""Dead-letter alerts (C5): best effort, never in the way of consuming."""

from __future__ import annotations

from typing import Protocol

import attrs


@attrs.frozen
class DeadLetterAlert:
    """What an operator is told when a carrier lands in the dead-letter queue (C5)."""

    dlq_id: str | None
    message_id: str
    execution_id: str | None
    tenant_id: str | None
    reason: str
    at_ms: int

    def to_json(self) -> dict[str, object]:
        """The alert as the webhook posts it, named ``plaita.dead_letter``."""
        return {"event": "plaita.dead_letter", **attrs.asdict(self)}


class AlertSink(Protocol):
    """Where dead-letter alerts go (a webhook), through a bounded queue."""

    def offer(self, alert: DeadLetterAlert) -> bool:
        """Queue ``alert`` without waiting; False when it was dropped (the queue is full).

        Never blocks and never raises: consuming must not wait on it.
        """
        ...
