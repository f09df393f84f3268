"""The metrics exporter (C5): serves what a process's metrics recorded to scrapers."""

from __future__ import annotations

from typing import Protocol


class MetricsExporter(Protocol):
    """Answers scrapes of one process's metrics until closed."""

    def serve(self) -> int | None:
        """Start answering scrapes; the port it listens on, or None when metrics are off.

        Raises ``OSError`` when the configured port cannot be bound (in use, not allowed).
        """
        ...

    def close(self) -> None:
        """Stop answering scrapes (nothing to do when it never served)."""
        ...
