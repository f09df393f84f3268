"""Word that an execution ended, for whoever awaits its result (``ExecutionHandle.result``)."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Protocol


class EndWatch:
    """One waiter's view of the notices of one execution, open while its ``watch`` is: an
    ``asyncio.Event`` of the loop that opened it, which an adapter sets (from that loop, or
    through ``loop.call_soon_threadsafe``)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    async def wait(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for a notice of the execution's end; True if one came.

        True also when the notices may have been missed (the feed's connection dropped):
        either way the caller re-reads the state, which is the only truth.
        """
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                await self.event.wait()
        except TimeoutError:
            return False
        self.event.clear()
        return True


class EndNotices(Protocol):
    """Best-effort notices of executions that ended (completed, error, cancelled).

    A notice can be lost (a dropped connection, a process that dies between its checkpoint
    and the notice): a waiter never trusts one, it re-reads the state on every notice and
    at a bounded interval without one. Notices are scoped to the current tenant.
    """

    async def announce(self, execution_id: str) -> None:
        """Tell every watcher of ``execution_id`` (in any process) that it ended or is gone."""
        ...

    def watch(self, execution_id: str) -> AbstractAsyncContextManager[EndWatch]:
        """Listen for ``execution_id``'s end: notices announced after entry are not missed."""
        ...

    async def aclose(self) -> None:
        """Stop listening and release what the notices hold (a subscription, a task)."""
        ...
