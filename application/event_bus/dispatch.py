"""Running handlers: one task per (event, handler), the retry loop, handled marks (V3)."""

from __future__ import annotations

import asyncio
import contextvars
import enum
import functools
import inspect
import logging
from collections import deque
from collections.abc import Iterable, Sequence
from types import ModuleType

import attrs

from plaita.application.event_bus.declarations import (
    HandlerRegistration,
    check_pattern,
    check_retry,
    declared_handlers,
    default_handler_id,
)
from plaita.application.event_bus.port import (
    DEFAULT_RETRY_POLICY,
    EventHandler,
    HandledMarks,
    Sleep,
)
from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import (
    DuplicateHandlerError,
    EventBusClosedError,
    InvalidHandlerError,
)
from plaita.domain.events import Event, RetryPolicy, handler_matches

log = logging.getLogger("plaita.events.bus")


class HandlerOutcome(enum.StrEnum):
    SUCCEEDED = "succeeded"
    #: Every attempt failed; the handled mark was not written, so a re-publish retries.
    GAVE_UP = "gave_up"
    #: The handler had already succeeded for this event id; it did not run.
    ALREADY_HANDLED = "already_handled"


@attrs.frozen
class HandlerResult:
    event_id: str
    handler_id: str
    outcome: HandlerOutcome
    attempts: int
    error: str | None = None


@attrs.frozen
class Straggler:
    """A dispatch still running when a bounded wait for it ended."""

    event_id: str
    handler_id: str


# The dispatcher whose handler this context runs, if any. Tasks a handler creates copy the
# context and so inherit it: their close() is refused too, because it would wait for them.
_RUNNING_HANDLER_OF: contextvars.ContextVar[HandlerDispatcher | None] = contextvars.ContextVar(
    "plaita_event_handler_of", default=None
)


class HandlerDispatcher:
    """Runs handlers for events: registration, retries, handled marks, in-flight tracking."""

    def __init__(
        self, marks: HandledMarks, *, sleep: Sleep = asyncio.sleep, failure_history: int = 1000
    ) -> None:
        self._marks = marks
        self._sleep = sleep
        self._handlers: dict[str, HandlerRegistration] = {}
        self._in_flight: dict[tuple[str, str], asyncio.Task[HandlerResult]] = {}
        self._accepting = True
        #: The latest final failures, newest last: what an operator or a test inspects.
        self.failures: deque[HandlerResult] = deque(maxlen=failure_history)

    # registrations

    def register(
        self,
        pattern: str,
        handler: EventHandler,
        *,
        handler_id: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    ) -> str:
        if not self._accepting:
            raise EventBusClosedError(
                f"the bus is closed; handler for {pattern!r} not registered — build a new bus"
            )
        check_pattern(pattern)
        check_retry(retry)
        if not callable(handler):
            raise InvalidHandlerError(f"a handler must be callable, got {handler!r}")
        if handler_id is not None and (not isinstance(handler_id, str) or not handler_id.strip()):
            raise InvalidHandlerError(f"handler_id must be a non-empty string, got {handler_id!r}")
        chosen = handler_id or default_handler_id(handler)
        existing = self._handlers.get(chosen)
        if existing is not None:
            raise DuplicateHandlerError(
                f"handler id {chosen!r} is already registered (pattern {existing.pattern!r}); "
                "pass another handler_id=... or unregister_handler() the first one"
            )
        self._handlers[chosen] = HandlerRegistration(chosen, pattern, handler, retry)
        return chosen

    def register_declared(self, source: ModuleType | Iterable[object]) -> list[str]:
        return [
            self.register(spec.pattern, handler, handler_id=spec.handler_id, retry=spec.retry)
            for handler, spec in declared_handlers(source)
        ]

    def unregister(self, handler_id: str) -> bool:
        return self._handlers.pop(handler_id, None) is not None

    def matching(self, event_type: str) -> list[HandlerRegistration]:
        """The handlers an event of this type goes to, in registration order."""
        return [r for r in self._handlers.values() if handler_matches(r.pattern, event_type)]

    @property
    def has_handlers(self) -> bool:
        return bool(self._handlers)

    # dispatching

    @property
    def accepting(self) -> bool:
        return self._accepting

    def stop_accepting(self) -> None:
        self._accepting = False

    def in_handler(self) -> bool:
        """True while the calling context runs one of this dispatcher's handlers."""
        return _RUNNING_HANDLER_OF.get() is self

    def dispatch(self, event: Event) -> list[asyncio.Task[HandlerResult]]:
        """Start one task per matching handler on the running loop; the tasks started.

        A (event, handler) pair already in flight in this process is not started twice.
        Once the bus is closing nothing starts, and each refused pair is named in the log.
        """
        registrations = self.matching(event.event_type)
        if not self._accepting:
            for registration in registrations:
                log.warning(
                    "event=event_bus.dispatch_refused reason=closing event_id=%s handler_id=%s "
                    "— the bus is closing; the event stays in the event log, publish it again "
                    "on a running bus if this handler must see it",
                    event.event_id,
                    registration.handler_id,
                )
            return []
        loop = asyncio.get_running_loop()
        started: list[asyncio.Task[HandlerResult]] = []
        for registration in registrations:
            key = (event.event_id, registration.handler_id)
            if key in self._in_flight:
                log.info(
                    "event=event_bus.dispatch_skipped reason=in_flight event_id=%s handler_id=%s",
                    *key,
                )
                continue
            task = loop.create_task(
                self._run(event, registration),
                name=f"plaita-event-handler:{registration.handler_id}:{event.event_id}",
            )
            self._in_flight[key] = task
            task.add_done_callback(functools.partial(self._finished, key))
            started.append(task)
        return started

    def _finished(self, key: tuple[str, str], task: asyncio.Task[HandlerResult]) -> None:
        if self._in_flight.get(key) is task:
            del self._in_flight[key]
        if task.cancelled():
            log.warning(
                "event=event_bus.dispatch_cancelled event_id=%s handler_id=%s — the handler did "
                "not finish and its handled mark was not written; publish the event again",
                *key,
            )
        elif (error := task.exception()) is not None:
            log.error(
                "event=event_bus.dispatch_crashed event_id=%s handler_id=%s error=%r",
                *key,
                error,
            )

    async def _run(self, event: Event, registration: HandlerRegistration) -> HandlerResult:
        _RUNNING_HANDLER_OF.set(self)  # the task runs in its own copy of the context
        handler_id = registration.handler_id
        try:
            if await self._marks.is_handled(event.event_id, handler_id):
                log.info(
                    "event=event_bus.already_handled event_id=%s handler_id=%s",
                    event.event_id,
                    handler_id,
                )
                return HandlerResult(event.event_id, handler_id, HandlerOutcome.ALREADY_HANDLED, 0)
        except Exception as exc:
            # Without the mark we cannot know; running again is the at-least-once side.
            log.warning(
                "event=event_bus.mark_read_failed event_id=%s handler_id=%s error=%r "
                "— running the handler anyway",
                event.event_id,
                handler_id,
                exc,
            )
        retry = registration.retry
        attempts = 1 + retry.max_retries
        for attempt in range(1, attempts + 1):
            try:
                with tenant_scope(event.tenant_id):
                    await _call(registration.handler, event)
            except Exception as exc:
                if attempt == attempts:
                    return self._gave_up(event, handler_id, attempt, exc)
                delay = retry.delay_before_retry(attempt)
                log.warning(
                    "event=event_bus.handler_failed event_id=%s handler_id=%s attempt=%d "
                    "of=%d retry_in_s=%s error=%r",
                    event.event_id,
                    handler_id,
                    attempt,
                    attempts,
                    delay,
                    exc,
                )
                await self._sleep(delay)
            else:
                await self._mark(event, handler_id)
                return HandlerResult(event.event_id, handler_id, HandlerOutcome.SUCCEEDED, attempt)
        raise AssertionError("unreachable: the last attempt returns")  # pragma: no cover

    def _gave_up(
        self, event: Event, handler_id: str, attempts: int, error: Exception
    ) -> HandlerResult:
        result = HandlerResult(
            event.event_id, handler_id, HandlerOutcome.GAVE_UP, attempts, repr(error)
        )
        self.failures.append(result)
        log.error(
            "event=event_bus.handler_gave_up event_id=%s handler_id=%s attempts=%d error=%r "
            "— no handled mark was written; fix the cause and publish the event again",
            event.event_id,
            handler_id,
            attempts,
            error,
        )
        return result

    async def _mark(self, event: Event, handler_id: str) -> None:
        try:
            await self._marks.mark_handled(event.event_id, handler_id)
        except Exception as exc:
            log.warning(
                "event=event_bus.mark_write_failed event_id=%s handler_id=%s error=%r — the "
                "handler succeeded but will run again if the event is published again",
                event.event_id,
                handler_id,
                exc,
            )

    # waiting for dispatches

    def in_flight(self) -> list[Straggler]:
        return [Straggler(*key) for key, task in self._in_flight.items() if not task.done()]

    async def wait_for(
        self,
        tasks: Sequence[asyncio.Task[HandlerResult]],
        timeout_s: float,
        *,
        during: str,
        left: str = "left to finish (not cancelled)",
    ) -> list[Straggler]:
        """Wait at most ``timeout_s`` for ``tasks``, never cancelling them; the stragglers.

        Each straggler is logged with its event id and handler id and what happens to it
        (``left``). Tasks of another event loop cannot be awaited here and are named at once.
        """
        loop = asyncio.get_running_loop()
        here = [t for t in tasks if not t.done() and t.get_loop() is loop]
        if here:
            await asyncio.wait(here, timeout=timeout_s)
        names = {task: key for key, task in self._in_flight.items()}
        stragglers = [
            Straggler(*names[task])
            for task in tasks
            if not task.done() and task in names  # a task of ours still running
        ]
        for straggler in stragglers:
            log.warning(
                "event=event_bus.dispatch_straggler during=%s event_id=%s handler_id=%s "
                "waited_s=%s — still running, %s; check later that it completed (its handled "
                "mark is written on success), or publish the event again",
                during,
                straggler.event_id,
                straggler.handler_id,
                timeout_s,
                left,
            )
        return stragglers

    async def drain(self, timeout_s: float) -> list[Straggler]:
        """Wait (bounded) for every dispatch in flight; see ``wait_for``."""
        return await self.wait_for(list(self._in_flight.values()), timeout_s, during="close")


async def _call(handler: EventHandler, event: Event) -> None:
    if _is_async(handler):
        await handler(event)  # type: ignore[misc]
        return
    # A sync handler may block (I/O, CPU): it runs in a worker thread, with this context.
    result = await asyncio.to_thread(handler, event)
    if inspect.isawaitable(result):
        await result


def _is_async(handler: object) -> bool:
    # An object whose __call__ is a coroutine function is an async handler too.
    call = getattr(handler, "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)
