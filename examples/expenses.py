"""Handlers of the expense approval in README.md and docs/python.md: ``(params, ctx) -> JSON``,
at module level so a worker imports them by name (``examples.expenses:submit``)."""

from __future__ import annotations

from typing import Any

import plaita


def submit(params: dict[str, Any], ctx: plaita.NodeContext) -> dict[str, Any]:
    if params["amount"] <= 0:
        raise plaita.DeterministicNodeError(f"amount must be above 0, got {params['amount']}")
    return {"expense_id": ctx.execution_id, "amount": params["amount"]}


def record(params: dict[str, Any], ctx: plaita.NodeContext) -> dict[str, Any]:
    decision = params["decision"]
    return {"approved": bool(decision.get("approved")), "by": decision.get("by", "approver")}
