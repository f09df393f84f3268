"""The metrics port (C5): what a worker counts, whatever records it."""

from __future__ import annotations

from typing import Protocol


class WorkerMetrics(Protocol):
    """A worker's counters and gauges: dispatches, dead letters, resumes, queue, liveness.

    Recording never fails the caller and never waits: a call only updates values in memory,
    which an exporter serves to scrapers (``MetricsExporter``). With metrics off the null
    object records nothing.
    """

    @property
    def enabled(self) -> bool:
        """False when nothing records: nobody scrapes, so no gauge needs refreshing."""
        ...

    def dispatched(self, outcome: str, disposition: str) -> None:
        """One dispatch returned with ``outcome`` and was settled by ``disposition``."""
        ...

    def crashed(self) -> None:
        """A dispatch raised instead of returning; its carrier stays pending."""
        ...

    def dead_lettered(self, reason: str) -> None:
        """A carrier went to the DLQ; ``reason`` is the guard's."""
        ...

    def guard_kept(self, reason: str) -> None:
        """The guard kept a carrier pending instead of dead-lettering it."""
        ...

    def dlq_trimmed(self, count: int) -> None:
        """The DLQ length cap dropped ``count`` more of the oldest dead letters (W10)."""
        ...

    def flow_control_waited(self, reason: str) -> None:
        """A carrier was kept to wait for room to run; ``reason`` is a ``WaitReason`` value."""
        ...

    def reclaim_skipped(self) -> None:
        """A reclaimed carrier was left alone because its execution's lease is live."""
        ...

    def resumed(self, latency_seconds: float) -> None:
        """An event resume began this long after its carrier was written."""
        ...

    def queue_sizes(self, *, length: int, pending: int, dead_letters: int) -> None:
        """The stream's length and pending count and the DLQ's length, just read."""
        ...

    def worker_up(self, up: bool) -> None:
        """1 while the worker consumes, 0 once it drains."""
        ...

    def heartbeat(self, at_seconds: float) -> None:
        """The registry record was written at ``at_seconds`` (epoch)."""
        ...

    def disk_blocked(self, blocked: bool) -> None:
        """The disk guard stopped (or let again) this worker read and claim."""
        ...
