"""Two small concurrency tools of the worker loop, kept apart so the loop reads as its steps.

``KeyedLocks`` serialises the carriers of one execution inside this process (across
processes the execution lease does); ``pause`` is the back-off every loop of the worker
waits with, so that a stop ends any wait at once (I5).
"""

from __future__ import annotations

import asyncio
import contextlib

from plaita.application.keyed_locks import KeyedLocks

__all__ = ["KeyedLocks", "pause"]


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` or until ``stop`` is set: every back-off is interruptible (I5)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
