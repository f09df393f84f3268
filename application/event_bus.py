"""The event bus port, event handlers and what every backend shares (V3, V9).

A bus publishes events, lets in-process code wait for one (``wait_for_event``), keeps the
subscriptions the event filter reads, and runs **handlers**: functions registered for an
event-type pattern (``user.*``, matched with ``fnmatchcase``) that react to every matching
event. This module owns the parts that must behave the same on every backend:

- ``HandlerDispatcher`` runs one task per (event, matching handler): the retry loop of the
  handler's ``RetryPolicy`` with an injected sleep, a log line per failed attempt, a named
  final outcome, and the **handled mark** that stops a re-published event from running a
  handler that already succeeded for it (the mark is written only after success, so an event
  whose handler gave up can be published again).
- ``BusShutdown`` is the ``close()`` contract (V9): idempotent, stop new dispatches, wait a
  bounded time for the ones in flight and name each straggler without cancelling it, then
  the backend's teardown steps (waits, listeners, connections) in order; a failed step raises
  ``EventBusCloseError`` and a later ``close()`` retries only the steps still undone.
- ``publish_from_sync_code`` is ``publish_sync``: it refuses to run on a thread whose loop is
  running (the caller would block the loop that has to do the work), hands the publish to the
  bus's own loop when that loop runs on another thread, and otherwise runs a private loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import enum
import functools
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from types import ModuleType
from typing import Any, Protocol, TypeVar

import attrs

from plaita.application.ports import EventWaiter, SubscriptionStore
from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import (
    CloseFromHandlerError,
    DuplicateHandlerError,
    EventBusClosedError,
    EventBusCloseError,
    InvalidHandlerError,
    PublishSyncInLoopError,
    PublishSyncTimeoutError,
)
from plaita.domain.events import Event, EventSubscription, RetryPolicy, handler_matches

log = logging.getLogger("plaita.events.bus")

#: A handler takes the event; a sync one runs in a worker thread, an async one on the loop.
EventHandler = Callable[[Event], object]
Sleep = Callable[[float], Awaitable[None]]
F = TypeVar("F", bound=Callable[..., object])

DEFAULT_RETRY_POLICY = RetryPolicy()
#: How long ``close()`` waits for dispatches in flight before naming them (V9).
DISPATCH_DRAIN_TIMEOUT_S = 5.0
#: How long ``publish_sync`` waits for the publish and the dispatches it started.
PUBLISH_SYNC_TIMEOUT_S = 5.0
# publish_sync on another thread's loop: the drain there is bounded by the timeout; the
# grace covers the publish itself and the hop between the threads.
_PUBLISH_SYNC_GRACE_S = 1.0

_HANDLER_SPECS_ATTRIBUTE = "__plaita_event_handlers__"


class EventBus(EventWaiter, Protocol):
    """Publish events, wait for them, keep subscriptions and run handlers (V3, V9)."""

    async def start(self) -> None:
        """Bind the bus to the running loop and start its listeners (idempotent).

        ``publish`` and ``wait_for_event`` start the bus themselves; a process that only
        registers handlers calls it so events published elsewhere reach them.
        """
        ...

    async def publish(self, event: Event) -> None:
        """Store the event, keep it in its correlation's inbox, wake matching waits, and
        dispatch it to every matching handler in the background (``close`` drains them).

        Memory dispatches from here; Redis from each process's listener, so handlers of every
        process see it. A handler that already succeeded for this event id is not run again.
        Raises ``EventBusClosedError`` once ``close()`` began.
        """
        ...

    def publish_sync(self, event: Event, *, timeout_s: float = PUBLISH_SYNC_TIMEOUT_S) -> None:
        """``publish`` from synchronous code (a sync task handler, a script).

        On a thread with a running loop it raises ``PublishSyncInLoopError`` (await
        ``publish`` there). When the bus's loop runs on another thread the publish runs there;
        otherwise on a private loop. The memory bus then waits at most ``timeout_s`` for the
        dispatches the publish started, naming stragglers; raises ``PublishSyncTimeoutError``
        when the publish itself does not finish in time.
        """
        ...

    async def register_subscription(self, subscription: EventSubscription) -> None:
        """Store a subscription for the event filter (V4)."""
        ...

    async def unregister_subscription(self, subscription_id: str) -> bool:
        """Remove a subscription; False when there was none."""
        ...

    def register_handler(
        self,
        pattern: str,
        handler: EventHandler,
        *,
        handler_id: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    ) -> str:
        """Run ``handler`` for every event whose type matches ``pattern``; its handler id.

        The id defaults to the handler's qualified name; a second registration under one id
        raises ``DuplicateHandlerError``.
        """
        ...

    def unregister_handler(self, handler_id: str) -> bool:
        """Stop dispatching to a handler; False when no handler has this id."""
        ...

    def register_handlers_from(self, source: ModuleType | Iterable[object]) -> list[str]:
        """Register the functions ``@event_handler`` marked in a module (those defined
        there) or in an iterable; their handler ids."""
        ...

    async def get_event(self, event_id: str) -> Event | None:
        """A published event by id, or None (unknown or expired)."""
        ...

    async def close(self) -> None:
        """Shut down per V9 (idempotent). Raises ``CloseFromHandlerError`` from inside one of
        this bus's handlers and ``EventBusCloseError`` when a teardown step failed."""
        ...


class HandledMarks(Protocol):
    """Which handlers already succeeded for which event (the publish dedup of V3)."""

    async def is_handled(self, event_id: str, handler_id: str) -> bool:
        """True once ``handler_id`` succeeded for ``event_id`` (until the mark expires)."""
        ...

    async def mark_handled(self, event_id: str, handler_id: str) -> None:
        """Record that ``handler_id`` succeeded for ``event_id``."""
        ...


# --- registrations ------------------------------------------------------------------------


@attrs.frozen
class HandlerSpec:
    """What ``@event_handler`` records on a function until a bus picks it up."""

    pattern: str
    handler_id: str
    retry: RetryPolicy


@attrs.frozen
class HandlerRegistration:
    handler_id: str
    pattern: str
    handler: EventHandler
    retry: RetryPolicy


def default_handler_id(handler: object) -> str:
    """``module.qualname`` of the function (of the wrapped one for a ``functools.partial``,
    of the class for a callable object): stable across restarts, so handled marks stay valid."""
    target = handler.func if isinstance(handler, functools.partial) else handler
    named = target if hasattr(target, "__qualname__") else type(target)
    module = getattr(named, "__module__", None)
    qualname = getattr(named, "__qualname__", None)
    if not isinstance(qualname, str) or not qualname:
        raise InvalidHandlerError(
            f"cannot derive a handler id from {handler!r}: it has no qualified name; "
            "pass handler_id='...'"
        )
    return f"{module}.{qualname}" if module else qualname


def event_handler(
    pattern: str,
    *,
    bus: EventBus | None = None,
    retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    handler_id: str | None = None,
) -> Callable[[F], F]:
    """Declare a function an event handler for ``pattern`` (fnmatch, e.g. ``user.*``).

    With ``bus`` it is registered at once. Without, the declaration is recorded on the
    function and ``bus.register_handlers_from(module)`` registers it later: handler modules
    can be imported before the bus exists (the container builds the bus, not the module).
    """
    _check_pattern(pattern)
    _check_retry(retry)

    def decorate(function: F) -> F:
        spec = HandlerSpec(pattern, handler_id or default_handler_id(function), retry)
        if bus is not None:
            bus.register_handler(pattern, function, handler_id=spec.handler_id, retry=retry)
            return function
        declared = getattr(function, _HANDLER_SPECS_ATTRIBUTE, ())
        setattr(function, _HANDLER_SPECS_ATTRIBUTE, (*declared, spec))
        return function

    return decorate


def declared_handlers(
    source: ModuleType | Iterable[object],
) -> list[tuple[EventHandler, HandlerSpec]]:
    """The ``@event_handler`` declarations of a module or of the given functions.

    A module contributes only functions defined in it, so a handler imported into a second
    module is not registered twice. An explicitly listed function that declares nothing is a
    mistake and raises ``InvalidHandlerError``.
    """
    if isinstance(source, ModuleType):
        candidates = [
            value
            for value in vars(source).values()
            if callable(value) and getattr(value, "__module__", None) == source.__name__
        ]
        explicit = False
    else:
        candidates = list(source)
        explicit = True
    found: list[tuple[EventHandler, HandlerSpec]] = []
    seen: set[int] = set()
    for candidate in candidates:
        if id(candidate) in seen:
            continue
        seen.add(id(candidate))
        specs = _specs_of(candidate)
        if not specs or not callable(candidate):
            if explicit:
                raise InvalidHandlerError(
                    f"{candidate!r} is not marked with @event_handler(...); decorate it or "
                    "register it with bus.register_handler(pattern, handler)"
                )
            continue
        found.extend((candidate, spec) for spec in specs)
    return found


def _specs_of(candidate: object) -> tuple[HandlerSpec, ...]:
    try:
        specs = getattr(candidate, _HANDLER_SPECS_ATTRIBUTE, ())
    except Exception:  # a module attribute whose __getattr__ raises is simply not a handler
        return ()
    if isinstance(specs, tuple) and all(isinstance(spec, HandlerSpec) for spec in specs):
        return specs
    return ()


def _check_pattern(pattern: object) -> None:
    if not isinstance(pattern, str) or not pattern.strip():
        raise InvalidHandlerError(
            f"a handler pattern must be a non-empty event type or fnmatch pattern such as "
            f"'user.*', got {pattern!r}"
        )


def _check_retry(retry: object) -> None:
    if not isinstance(retry, RetryPolicy):
        raise InvalidHandlerError(
            f"retry must be a plaita.domain.events.RetryPolicy, got {retry!r}"
        )


# --- dispatch -----------------------------------------------------------------------------


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
        _check_pattern(pattern)
        _check_retry(retry)
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


# --- close() (V9) -------------------------------------------------------------------------


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


# --- publish_sync -------------------------------------------------------------------------


class BusRegistrations:
    """What every bus does the same way: subscriptions through the store, handlers through
    the dispatcher, each refused once the bus is closing (V3, V9). Backends set the three
    attributes in their ``__init__``."""

    _subscriptions: SubscriptionStore
    _dispatcher: HandlerDispatcher
    _shutdown: BusShutdown

    async def register_subscription(self, subscription: EventSubscription) -> None:
        self._shutdown.check_open(f"register_subscription {subscription.subscription_id!r}")
        await self._subscriptions.add(subscription)

    async def unregister_subscription(self, subscription_id: str) -> bool:
        self._shutdown.check_open(f"unregister_subscription {subscription_id!r}")
        return await self._subscriptions.remove(subscription_id)

    def register_handler(
        self,
        pattern: str,
        handler: EventHandler,
        *,
        handler_id: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    ) -> str:
        return self._dispatcher.register(pattern, handler, handler_id=handler_id, retry=retry)

    def unregister_handler(self, handler_id: str) -> bool:
        return self._dispatcher.unregister(handler_id)

    def register_handlers_from(self, source: ModuleType | Iterable[object]) -> list[str]:
        return self._dispatcher.register_declared(source)


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
