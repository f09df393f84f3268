"""The event bus port, event handlers and what every backend shares (V3, V9).

A bus publishes events, lets in-process code wait for one (``wait_for_event``), keeps the
subscriptions the event filter reads, and runs **handlers**: functions registered for an
event-type pattern (``user.*``, matched with ``fnmatchcase``) that react to every matching
event. This package owns the parts that must behave the same on every backend:

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

Modules: ``port`` (the ``EventBus`` and ``HandledMarks`` protocols and their defaults),
``declarations`` (``@event_handler`` and handler ids), ``dispatch`` (``HandlerDispatcher``),
``shutdown`` (``BusShutdown``), ``registrations`` (``BusRegistrations``) and ``publish_sync``.
"""

from plaita.application.event_bus.declarations import (
    HandlerRegistration,
    HandlerSpec,
    declared_handlers,
    default_handler_id,
    event_handler,
)
from plaita.application.event_bus.dispatch import (
    HandlerDispatcher,
    HandlerOutcome,
    HandlerResult,
    Straggler,
)
from plaita.application.event_bus.port import (
    DEFAULT_RETRY_POLICY,
    DISPATCH_DRAIN_TIMEOUT_S,
    PUBLISH_SYNC_TIMEOUT_S,
    EventBus,
    EventHandler,
    HandledMarks,
    Sleep,
)
from plaita.application.event_bus.publish_sync import publish_from_sync_code
from plaita.application.event_bus.registrations import BusRegistrations
from plaita.application.event_bus.shutdown import (
    BusShutdown,
    OwnedResource,
    TeardownStep,
    release_steps,
)

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "DISPATCH_DRAIN_TIMEOUT_S",
    "PUBLISH_SYNC_TIMEOUT_S",
    "BusRegistrations",
    "BusShutdown",
    "EventBus",
    "EventHandler",
    "HandledMarks",
    "HandlerDispatcher",
    "HandlerOutcome",
    "HandlerRegistration",
    "HandlerResult",
    "HandlerSpec",
    "OwnedResource",
    "Sleep",
    "Straggler",
    "TeardownStep",
    "declared_handlers",
    "default_handler_id",
    "event_handler",
    "publish_from_sync_code",
    "release_steps",
]
