"""The one place that wires plaita together (dependency-injector), split by concern:

- ``memory``, ``redis``, ``sql``: one adapter family each, every store it offers;
- ``stores``: every port's store, chosen by ``backend`` and ``storage``;
- ``use_cases``: the use cases, the worker step among them, wired to the stores;
- ``services``: the worker, the event filter and what they carry (metrics, registry record,
  disk guard, alerts) — ``Container``, the whole wiring.

Only this package imports ``plaita.adapters`` (an import-linter contract): every command, the
console, ``plaita dev``, the demo and the benches ask it. Tests override providers here
instead of patching.
"""

from __future__ import annotations

from dependency_injector import providers

from plaita.application.handlers import HandlerRegistry
from plaita.application.use_cases.flows import FlowCatalog
from plaita.entrypoints.container.redis import dlq_key_problems
from plaita.entrypoints.container.services import Container
from plaita.entrypoints.container.sql import schema_revision, upgrade_schema
from plaita.entrypoints.container.stores import system_clock
from plaita.entrypoints.settings import Settings

__all__ = [
    "Container",
    "build_container",
    "build_library_container",
    "dlq_key_problems",
    "run_handlers_of",
    "schema_revision",
    "system_clock",
    "upgrade_schema",
]


def build_container(settings: Settings) -> Container:
    """A container configured from a validated ``Settings``."""
    container = Container()
    container.config.from_pydantic(settings)
    return container


def build_library_container(settings: Settings) -> Container:
    """The container of a ``plaita.Client``: application code registers its own flows, so
    their graph and expressions are checked at registration and their handlers by the worker
    that imports them (an embedded ``Worker`` checks them at registration too)."""
    container = build_container(settings)
    container.flows.override(
        providers.Singleton(
            FlowCatalog,
            container.flow_repository,
            None,
            clock=container.clock,
            cache_size=container.config.flow_cache_size,
            cache_ttl_ms=container.config.flow_cache_ttl_ms,
        )
    )
    return container


def run_handlers_of(
    container: Container, handlers: HandlerRegistry, *, concurrency: int | None
) -> None:
    """Make the worker this container builds next run ``handlers`` (its allowlist) with
    ``concurrency`` dispatches at once (None: the settings'); before ``worker()`` is built."""
    container.handlers.override(providers.Object(handlers))
    if concurrency is not None:
        container.config.concurrency.override(concurrency)
    # A worker that ran on this container before keeps its own allowlist: build anew.
    container.process_task.reset()
    container.worker.reset()
