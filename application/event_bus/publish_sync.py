"""``publish_sync``: publishing from synchronous code (V3)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any

from plaita.domain.errors import PublishSyncInLoopError, PublishSyncTimeoutError

# publish_sync on another thread's loop: the drain there is bounded by the timeout; the
# grace covers the publish itself and the hop between the threads.
_PUBLISH_SYNC_GRACE_S = 1.0


def publish_from_sync_code(
    home_loop: asyncio.AbstractEventLoop | None,
    publish: Callable[[], Coroutine[Any, Any, None]],
    *,
    event_id: str,
    timeout_s: float,
    after_private_loop: Callable[[], Coroutine[Any, Any, None]] | None = None,
) -> None:
    """Run ``publish()`` for synchronous code; the shared body of ``publish_sync``.

    - A running loop on this thread: ``PublishSyncInLoopError`` — blocking here would stall
      that loop, and if it is the bus's loop the publish could never run (a deadlock).
    - The bus's loop runs on another thread (a sync handler in a worker thread, a thread
      next to the worker): the publish runs there, and this thread waits for it.
    - Otherwise: a private loop runs the publish; ``after_private_loop`` then runs on it too
      (the Redis bus drops the connections opened on that loop, which dies with it).
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise PublishSyncInLoopError(
            f"publish_sync(event {event_id!r}) was called on a thread whose event loop is "
            "running; use `await bus.publish(event)` there (blocking would stall that loop)"
        )
    if home_loop is not None and home_loop.is_running() and not home_loop.is_closed():
        future = asyncio.run_coroutine_threadsafe(publish(), home_loop)
        try:
            future.result(timeout_s + _PUBLISH_SYNC_GRACE_S)
        except concurrent.futures.TimeoutError:
            raise PublishSyncTimeoutError(
                f"the bus loop did not finish publishing event {event_id!r} within "
                f"{timeout_s + _PUBLISH_SYNC_GRACE_S} s; it may still be published — check "
                "bus.get_event(event_id) before publishing it again"
            ) from None
        return

    async def on_private_loop() -> None:
        try:
            async with asyncio.timeout(timeout_s + _PUBLISH_SYNC_GRACE_S):
                await publish()
        except TimeoutError:
            raise PublishSyncTimeoutError(
                f"publishing event {event_id!r} did not finish within "
                f"{timeout_s + _PUBLISH_SYNC_GRACE_S} s; it may still be published — check "
                "bus.get_event(event_id) before publishing it again"
            ) from None
        finally:
            if after_private_loop is not None:
                await after_private_loop()

    asyncio.run(on_private_loop())
