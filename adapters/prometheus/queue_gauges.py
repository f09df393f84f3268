"""The task queue's gauges (C5), exported alike by each worker and by the console."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge


class QueueGauges:
    """Stream length, pending carriers and DLQ length, as last read, in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.stream_length = Gauge(
            "plaita_stream_length", "Entries in the task stream.", registry=registry
        )
        self.stream_pending = Gauge(
            "plaita_stream_pending", "Carriers delivered and not yet acked.", registry=registry
        )
        self.dlq_length = Gauge(
            "plaita_dlq_length", "Entries in the dead-letter queue.", registry=registry
        )

    def set(self, *, length: int, pending: int, dead_letters: int) -> None:
        """Show what one read of the queue found."""
        self.stream_length.set(length)
        self.stream_pending.set(pending)
        self.dlq_length.set(dead_letters)
