"""Task handlers for the builder's tests: a real module, importable as
``tests.unit.sdk.handlers`` from the repository root, so callables resolve to
``"tests.unit.sdk.handlers:<name>"`` and a worker (or ``plaita run``) imports them back.
"""

from __future__ import annotations

from typing import Any

from plaita.application.engine.context import NodeContext

JSON = Any


def price(params: dict[str, JSON], ctx: NodeContext) -> dict[str, JSON]:
    """Multiply quantity by unit price."""
    return {"total": params["quantity"] * params["unit_price"], "node": ctx.node_id}


async def label(params: dict[str, JSON], ctx: NodeContext) -> dict[str, JSON]:
    """An async handler: the builder treats it like any module-level function."""
    return {"label": f"{params['item']} for {params['total']}"}


class Handlers:
    """Holds a method and a static method: attributes of a class, not module-level names."""

    def method(self, params: dict[str, JSON], ctx: NodeContext) -> JSON:
        return params

    @staticmethod
    def static(params: dict[str, JSON], ctx: NodeContext) -> JSON:
        return params


def shadowed(params: dict[str, JSON], ctx: NodeContext) -> JSON:
    return "first"


#: The first ``shadowed``; the module-level name now leads to the second one below.
FIRST_SHADOWED = shadowed


def shadowed(params: dict[str, JSON], ctx: NodeContext) -> JSON:
    return "second"
