"""End notices in this process: the memory twin's ``EndNotices``.

A watcher is an ``asyncio.Event`` on the loop that entered ``watch``; an announcement from
any thread sets it through that loop, so a ``SyncClient`` waiting on its own loop hears a
worker that runs on another.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from plaita.application.ports import EndWatch
from plaita.application.tenancy import current_tenant

_Key = tuple[str, str]


class MemoryEndNotices:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: dict[_Key, set[EndWatch]] = {}

    async def announce(self, execution_id: str) -> None:
        with self._lock:
            watches = list(self._watches.get((current_tenant(), execution_id), ()))
        for watch in watches:
            if watch.loop.is_closed():
                continue
            watch.loop.call_soon_threadsafe(watch.event.set)

    @asynccontextmanager
    async def watch(self, execution_id: str) -> AsyncIterator[EndWatch]:
        key = (current_tenant(), execution_id)
        watch = EndWatch()
        with self._lock:
            self._watches.setdefault(key, set()).add(watch)
        try:
            yield watch
        finally:
            with self._lock:
                watches = self._watches.get(key)
                if watches is not None:
                    watches.discard(watch)
                    if not watches:
                        del self._watches[key]

    async def aclose(self) -> None:
        with self._lock:
            watches = [watch for group in self._watches.values() for watch in group]
        for watch in watches:  # a watcher still waiting re-reads the state and goes on
            if not watch.loop.is_closed():
                watch.loop.call_soon_threadsafe(watch.event.set)
