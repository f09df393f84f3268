"""Task handlers of the approval example (``examples/flows/approval.json``).

Each handler takes ``(params, ctx)`` and returns JSON; plaita imports this module only because
the worker is started with ``--handler-modules examples.handlers``.
"""

from __future__ import annotations

from typing import Any


def create_request(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    amount = params["amount"]
    if not isinstance(amount, int | float) or amount < 0:
        # A ValueError is deterministic: no retry, the execution fails with this message.
        raise ValueError(f"amount must be a non-negative number, got {amount!r}")
    return {"request_id": f"req-{ctx.execution_id[:8]}", "amount": amount}


def auto_approve(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"approved": True, "by": "policy", "reason": f"{params['amount']} is under the limit"}


async def record_decision(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    decision = params["decision"]
    return {"approved": bool(decision.get("approved")), "by": decision.get("by", "approver")}


def ship(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"outcome": "shipped", "request_id": params["request_id"]}


def reject(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"outcome": "rejected", "request_id": params["request_id"]}
