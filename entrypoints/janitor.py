"""The index janitor as a background task of a long-running plaita service (V7).

The event-filter service starts it beside its read loop; it stops with the same stop event.
Its plan (interval, budget, on/off) comes from ``PLAITA_JANITOR_*`` through the container.
"""

from __future__ import annotations

import asyncio

from plaita.entrypoints.container import Container


async def run_index_janitor(container: Container, stop: asyncio.Event) -> None:
    """Prune the event and subscription indexes every interval until ``stop`` is set.

    Returns at once (after a WARNING) when the janitor is disabled; a failing tick is logged
    and retried at the next one, so the service beside it keeps running.
    """
    await container.index_janitor().run(stop)
