"""Task handlers of the Python API tests: importable as ``tests.sdk.handlers``."""

from __future__ import annotations

from typing import Any

from plaita import DeterministicNodeError, NodeContext


def submit(params: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"amount": params["amount"], "execution": ctx.execution_id}


async def decide(params: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"approved": bool(params["decision"].get("approved")), "attempt": ctx.attempt}


def refuse(params: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    raise DeterministicNodeError(f"amount {params.get('amount')!r} is not allowed")


def double(params: dict[str, Any], ctx: NodeContext) -> int:
    """A map item's work: a negative item is a deterministic failure."""
    if params["n"] < 0:
        raise DeterministicNodeError(f"item {params['n']} is negative")
    return int(params["n"]) * 2
