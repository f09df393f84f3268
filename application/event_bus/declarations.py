"""Declaring handlers: ``@event_handler``, handler ids and the checks on a registration (V3)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TypeVar

import attrs

from plaita.application.event_bus.port import DEFAULT_RETRY_POLICY, EventBus, EventHandler
from plaita.domain.errors import InvalidHandlerError
from plaita.domain.events import RetryPolicy

F = TypeVar("F", bound=Callable[..., object])

_HANDLER_SPECS_ATTRIBUTE = "__plaita_event_handlers__"


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
    check_pattern(pattern)
    check_retry(retry)

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


def check_pattern(pattern: object) -> None:
    if not isinstance(pattern, str) or not pattern.strip():
        raise InvalidHandlerError(
            f"a handler pattern must be a non-empty event type or fnmatch pattern such as "
            f"'user.*', got {pattern!r}"
        )


def check_retry(retry: object) -> None:
    if not isinstance(retry, RetryPolicy):
        raise InvalidHandlerError(
            f"retry must be a plaita.domain.events.RetryPolicy, got {retry!r}"
        )
