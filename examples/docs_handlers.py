"""Task handlers used by the runnable examples in ``docs/flows.md``.

Every handler is called as ``handler(params, ctx)`` and returns JSON, which becomes
``$NODE[<node id>]``. Run the examples from the repository root with
``--handler-modules examples.docs_handlers``; ``tests/docs/test_flows_md.py`` runs every one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from plaita.domain.failures import DeterministicNodeError, TransientNodeError

JSON = Any

#: (execution_id, node_id) pairs whose first attempt ``flaky`` has already failed.
_FAILED_ONCE: set[tuple[str, str]] = set()


def echo(params: dict[str, JSON], ctx: Any) -> dict[str, JSON]:
    """Return the rendered params unchanged: handy to see what templates produce."""
    return params


def quote(params: dict[str, JSON], ctx: Any) -> dict[str, JSON]:
    """Price an order; ``quantity`` and ``unit_price`` arrive as numbers via ``"${...}"``."""
    return {"total": params["quantity"] * params["unit_price"], "currency": params["currency"]}


def check_amount(params: dict[str, JSON], ctx: Any) -> dict[str, JSON]:
    """Refuse a negative amount with a ValueError: deterministic, never retried."""
    amount = params["amount"]
    if amount < 0:
        raise ValueError(f"amount must not be negative, got {amount}")
    return {"amount": amount, "checked": True}


def flaky(params: dict[str, JSON], ctx: Any) -> dict[str, JSON]:
    """Fail transiently on the first attempt of each (execution, node), then succeed."""
    key = (ctx.execution_id, ctx.node_id)
    if key not in _FAILED_ONCE:
        _FAILED_ONCE.add(key)
        raise TransientNodeError(f"upstream busy on attempt {ctx.attempt}; try again")
    _FAILED_ONCE.discard(key)
    return {"status": "ok", "attempt": ctx.attempt}


async def slow(params: dict[str, JSON], ctx: Any) -> dict[str, JSON]:
    """Take ``seconds``; an async handler is cancelled cleanly when its attempt times out."""
    await asyncio.sleep(params["seconds"])
    return {"finished": True}


def slow_sync(params: dict[str, JSON], ctx: Any) -> dict[str, JSON]:
    """The sync way: work in 5 ms slices and stop once ``ctx.cancelled`` turns true."""
    deadline = time.monotonic() + params["seconds"]
    while time.monotonic() < deadline:
        if ctx.cancelled:  # the attempt timed out or the execution was cancelled
            return {"finished": False}
        time.sleep(0.005)
    return {"finished": True}


async def fetch_rate(params: dict[str, JSON], ctx: Any) -> dict[str, JSON]:
    """An async handler: awaited on the engine's event loop, under the node's timeout."""
    await asyncio.sleep(0)  # stands in for an HTTP call to a rates service
    rates = {"EUR": 1.0, "USD": 1.25, "GBP": 0.75}
    currency = params["currency"]
    if currency not in rates:
        # Retrying cannot make an unknown currency known: say so, and skip the retries.
        raise DeterministicNodeError(f"no rate for currency {currency!r}")
    return {"currency": currency, "rate": rates[currency]}


def whoami(params: dict[str, JSON], ctx: Any) -> dict[str, JSON]:
    """Show what ``ctx`` offers (the execution id changes per run, so it is compared only)."""
    return {
        "flow_id": ctx.flow_id,
        "node_id": ctx.node_id,
        "attempt": ctx.attempt,
        "tenant_id": ctx.tenant_id,
        "same_execution": ctx.execution_id == params["execution_id"],
        "seen_nodes": sorted(ctx.node_results),
        "cancelled": ctx.cancelled,
    }
