"""The injected clock: wall time for records, a monotonic one for deadlines."""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    """Time, read through one object so tests move it instead of sleeping."""

    def now_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch (for records and ages)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards (for deadlines)."""
        ...
