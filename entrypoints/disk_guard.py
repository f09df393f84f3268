"""Free disk before claiming work (W18, #49).

A worker on a host low on disk would take carriers only for their steps to fail on it while
hosts with room sit idle. Below ``--min-free-disk-gib`` the worker neither reads nor claims,
so the work falls to the others; what it already runs finishes as usual. A probe that fails
(missing path, no permission) allows: a broken guard must not stop a whole pool.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable

from plaita.application.null_objects import NoMetrics
from plaita.application.ports import WorkerMetrics

log = logging.getLogger("plaita.worker.disk_guard")

GIB = 1024**3
DEFAULT_POLL_SECONDS = 15.0


def free_bytes(path: str) -> int:
    return shutil.disk_usage(path).free


class DiskGuard:
    """``allows()`` before every read and claim; a WARNING once per change of verdict."""

    def __init__(
        self,
        *,
        min_free_gib: float,
        path: str = ".",
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        probe: Callable[[str], int] = free_bytes,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.min_free_gib = min_free_gib
        self.path = path
        #: How long a blocked worker waits before it looks again.
        self.poll_seconds = poll_seconds
        self._probe = probe
        self._metrics = metrics or NoMetrics()
        self._blocked = False
        self._probe_failing = False

    @property
    def enabled(self) -> bool:
        return self.min_free_gib > 0

    @property
    def blocked(self) -> bool:
        return self._blocked

    def allows(self) -> bool:
        if not self.enabled:
            return True
        try:
            free = self._probe(self.path)
        except OSError as exc:
            if not self._probe_failing:
                log.warning(
                    "event=disk_guard.probe_failed path=%s error=%r: reading and claiming as "
                    "if there were room; fix --disk-guard-path or set --min-free-disk-gib 0",
                    self.path,
                    exc,
                )
            self._probe_failing = True
            self._set_blocked(False, None)
            return True
        self._probe_failing = False
        below = free < self.min_free_gib * GIB
        self._set_blocked(below, free / GIB)
        return not below

    def _set_blocked(self, blocked: bool, free_gib: float | None) -> None:
        if blocked == self._blocked:
            return
        self._blocked = blocked
        self._metrics.disk_blocked(blocked)
        if blocked:
            log.warning(
                "event=disk_guard.below path=%s free_gib=%.2f min_free_gib=%g: this worker "
                "stops reading and claiming carriers, other workers take them; free disk space "
                "on %s (or lower --min-free-disk-gib) and it resumes by itself",
                self.path,
                free_gib or 0.0,
                self.min_free_gib,
                self.path,
            )
        else:
            log.warning(
                "event=disk_guard.recovered path=%s free_gib=%s min_free_gib=%g: reading and "
                "claiming again",
                self.path,
                "unknown" if free_gib is None else f"{free_gib:.2f}",
                self.min_free_gib,
            )
