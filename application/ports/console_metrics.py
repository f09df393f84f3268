"""The console's metrics (C5): the deployment as the stores show it, and the requests served."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from plaita.application.ports.worker_registry import WorkerInstance


@attrs.frozen
class ClusterSnapshot:
    """What the console reads from the stores at each scrape: no single worker sees it."""

    stream_length: int
    pending: int
    dlq_length: int
    delayed: int
    workers: Sequence[WorkerInstance]
    now_ms: int
    #: How long the oldest carrier no worker has read yet has waited; 0 when none waits.
    lag_ms: int = 0


class ConsoleMetrics(Protocol):
    """The console's gauges of the deployment and its request counter, in its own registry."""

    def observe(self, snapshot: ClusterSnapshot) -> None:
        """Set the queue, delay and worker gauges to what ``snapshot`` shows.

        Every worker status is exported (0 when none has it); a worker no longer in the
        snapshot loses its heartbeat-age series.
        """
        ...

    def answered(self, method: str, route: str, status: int) -> None:
        """One console request to the route template ``route`` was answered with ``status``."""
        ...

    def render(self) -> bytes:
        """Everything recorded, in the Prometheus text exposition format."""
        ...
