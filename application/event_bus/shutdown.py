"""``close()``: the shutdown every backend shares (V9)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import attrs

from plaita.application.event_bus.dispatch import HandlerDispatcher
from plaita.application.event_bus.port import DISPATCH_DRAIN_TIMEOUT_S
from plaita.domain.errors import (
    CloseFromHandlerError,
    EventBusClosedError,
    EventBusCloseError,
)

log = logging.getLogger("plaita.events.bus")


@attrs.frozen
class TeardownStep:
    """One part of a backend's teardown, run once successfully (retried after a failure)."""

    name: str
    run: Callable[[], Awaitable[None]]


class OwnedResource(Protocol):
    """Something a bus was handed to own and releases last when it closes (a pool, a flusher)."""

    async def aclose(self) -> None: ...


def release_steps(resources: Sequence[OwnedResource]) -> list[TeardownStep]:
    """One teardown step per owned resource, named by position and type for the error."""
    return [
        TeardownStep(f"release[{index}]:{type(resource).__name__}", resource.aclose)
        for index, resource in enumerate(resources)
    ]


class BusShutdown:
    """The ``close()`` contract shared by every backend (V9).

    Order: refuse from inside a handler; mark closing (publishes, waits and new dispatches are
    refused); wait up to ``drain_timeout_s`` for dispatches in flight, naming each straggler
    and leaving it running; then run the backend's steps in order — the listeners come after
    the drain because a dispatch may still be reading through them, and connections last
    because everything before may still use them. A step that fails does not stop the later
    ones; ``close()`` then raises ``EventBusCloseError`` and the next ``close()`` runs only
    the failed steps again. Concurrent ``close()`` calls share one teardown, and a caller
    cancelled while it waits does not cancel the teardown.
    """

    def __init__(
        self,
        dispatcher: HandlerDispatcher,
        steps: Sequence[TeardownStep],
        *,
        bus_name: str,
        drain_timeout_s: float = DISPATCH_DRAIN_TIMEOUT_S,
    ) -> None:
        if not drain_timeout_s >= 0:
            raise ValueError(f"drain_timeout_s must be >= 0 seconds, got {drain_timeout_s!r}")
        names = [step.name for step in steps]
        if len(set(names)) != len(names):
            raise ValueError(f"teardown step names must be unique, got {names}")
        self._dispatcher = dispatcher
        self._steps = tuple(steps)
        self._bus_name = bus_name
        self._drain_timeout_s = drain_timeout_s
        self._closing = False
        self._drained = False
        self._done: set[str] = set()
        self._closed = False
        self._task: asyncio.Task[None] | None = None

    @property
    def closing(self) -> bool:
        """True from the first ``close()`` on, even if its teardown has not finished."""
        return self._closing

    @property
    def closed(self) -> bool:
        """True once every teardown step succeeded."""
        return self._closed

    def check_open(self, operation: str) -> None:
        if self._closing:
            raise EventBusClosedError(
                f"{self._bus_name} is closed; {operation} refused — a closed bus stays closed, "
                "build a new one"
            )

    async def close(self) -> None:
        if self._dispatcher.in_handler():
            raise CloseFromHandlerError(
                f"close() of {self._bus_name} was called from inside one of its own handlers "
                "(or a task that handler started); it would wait for itself — close the bus "
                "from the code that owns it"
            )
        if self._closed:
            return
        self._closing = True
        self._dispatcher.stop_accepting()
        task = self._task
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.get_running_loop().create_task(
                self._teardown(), name=f"plaita-event-bus-close:{self._bus_name}"
            )
            task.add_done_callback(_retrieve)
            self._task = task
        await asyncio.shield(task)

    async def _teardown(self) -> None:
        if not self._drained:
            await self._dispatcher.drain(self._drain_timeout_s)
            self._drained = True
        failures: list[tuple[str, Exception]] = []
        for step in self._steps:
            if step.name in self._done:
                continue
            try:
                await step.run()
            except Exception as exc:
                log.error(
                    "event=event_bus.teardown_failed bus=%s step=%s error=%r — call close() "
                    "again to retry the steps left",
                    self._bus_name,
                    step.name,
                    exc,
                )
                failures.append((step.name, exc))
            else:
                self._done.add(step.name)
        if failures:
            described = ", ".join(f"{name}: {error!r}" for name, error in failures)
            raise EventBusCloseError(
                f"closing {self._bus_name} failed in step(s) {described}; the other steps are "
                "done — call close() again to retry only these"
            ) from failures[0][1]
        self._closed = True
        log.info("event=event_bus.closed bus=%s", self._bus_name)


def _retrieve(task: asyncio.Task[None]) -> None:
    # Every caller may have been cancelled; the failure is logged and re-raised to the next
    # close(), so it must not also surface as "Task exception was never retrieved".
    if not task.cancelled():
        task.exception()
