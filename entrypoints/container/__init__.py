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

from plaita.entrypoints.container.redis import dlq_key_problems
from plaita.entrypoints.container.services import Container
from plaita.entrypoints.container.sql import schema_revision, upgrade_schema
from plaita.entrypoints.settings import Settings

__all__ = [
    "Container",
    "build_container",
    "dlq_key_problems",
    "schema_revision",
    "upgrade_schema",
]


def build_container(settings: Settings) -> Container:
    """A container configured from a validated ``Settings``."""
    container = Container()
    container.config.from_pydantic(settings)
    return container
