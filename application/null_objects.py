"""Null objects: the port of a feature that is off, so no caller tests for None.

Each takes every call of its port and does nothing, answering what "off" means. They live
here rather than among the adapters because they touch nothing outside the process: any
layer may build one (a worker without ``--metrics-port``, a test) without wiring adapters.
"""

from __future__ import annotations


class NoMetrics:
    """WorkerMetrics with metrics off (``--metrics-port 0``): every call records nothing."""

    enabled = False

    def dispatched(self, outcome: str, disposition: str) -> None:
        pass

    def crashed(self) -> None:
        pass

    def dead_lettered(self, reason: str) -> None:
        pass

    def guard_kept(self, reason: str) -> None:
        pass

    def dlq_trimmed(self, count: int) -> None:
        pass

    def reclaim_skipped(self) -> None:
        pass

    def resumed(self, latency_seconds: float) -> None:
        pass

    def queue_sizes(self, *, length: int, pending: int, dead_letters: int) -> None:
        pass

    def worker_up(self, up: bool) -> None:
        pass

    def heartbeat(self, at_seconds: float) -> None:
        pass

    def disk_blocked(self, blocked: bool) -> None:
        pass


class NoMetricsExporter:
    """MetricsExporter with metrics off: nothing listens."""

    def serve(self) -> None:
        return None

    def close(self) -> None:
        pass
