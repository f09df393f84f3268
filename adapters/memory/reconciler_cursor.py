"""ReconcilerCursor twin: the event reconciler's cursor, only ever moved forward (V5)."""

from __future__ import annotations


class MemoryReconcilerCursor:
    def __init__(self) -> None:
        self._cursor_ms: int | None = None

    async def get(self) -> int | None:
        return self._cursor_ms

    async def set(self, cursor_ms: int) -> None:
        if self._cursor_ms is None or cursor_ms > self._cursor_ms:
            self._cursor_ms = cursor_ms
