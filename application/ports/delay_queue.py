"""The delay queue (W8, V8): carriers held until their due time, then moved atomically."""

from __future__ import annotations

from typing import Protocol

from plaita.domain.envelope import TaskEnvelope


class DelayQueue(Protocol):
    """Retries with backoff, event timeouts and sleeps wait here for their due time."""

    async def schedule(self, envelope: TaskEnvelope, *, due_ms: int) -> str:
        """Hold ``envelope`` until ``due_ms``; a timer id (W8 retries, V8 timeouts and sleeps)."""
        ...

    async def move_due(self, *, now_ms: int, limit: int = 500) -> int:
        """Move up to ``limit`` due carriers into the task stream atomically; how many moved.

        A carrier is never in both places and never in neither: the move is one Lua script on
        Redis, so a crash between "remove from the delay set" and "add to the stream" cannot
        happen.
        """
        ...

    async def pending(self) -> int:
        """How many carriers wait for their due time."""
        ...
