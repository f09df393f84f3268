"""Expense approvals in a FastAPI app, on plaita.

    POST /expenses                     {"employee": "ada", "amount": 250}  -> the expense id
    POST /expenses/{id}/decision       {"approved": true, "by": "grace"}   -> the outcome
    GET  /expenses/{id}                                                     -> its status

An expense of up to 100 is approved by policy at once; a larger one waits — holding no
worker, surviving restarts — until a decision is posted, at most seven days.

Run it on the in-process twin (one process, nothing to install):

    uvicorn examples.fastapi_app:app

or on Redis, with the worker in this process or in `plaita worker` processes:

    PLAITA_URL=redis://127.0.0.1:6379/0 uvicorn examples.fastapi_app:app
    PLAITA_URL=redis://127.0.0.1:6379/0 PLAITA_EMBEDDED_WORKER=0 uvicorn examples.fastapi_app:app
    plaita worker --redis-url redis://127.0.0.1:6379/0 --handler-modules examples.fastapi_app
    plaita event-filter --redis-url redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

import plaita

#: How long a decision request waits for the approval to finish before answering 202.
DECISION_WAIT_S = 10.0


# --- the handlers: (params, ctx) -> JSON, at module level so workers import them by name ----


def submit(params: dict[str, Any], ctx: plaita.NodeContext) -> dict[str, Any]:
    if params["amount"] <= 0:
        raise plaita.DeterministicNodeError(f"amount must be above 0, got {params['amount']}")
    return {"expense_id": ctx.execution_id, "employee": params["employee"]}


def record(params: dict[str, Any], ctx: plaita.NodeContext) -> dict[str, Any]:
    decision = params["decision"]
    return {"approved": bool(decision.get("approved")), "by": decision.get("by", "policy")}


# --- the flow ---------------------------------------------------------------------------

approval = (
    plaita.Flow("expense_approval", version="1")
    .task("submit", submit, params={"amount": "${amount}", "employee": "${employee}"}, next="route")
    .if_("route", "amount > 100", then="wait", else_="auto")
    .event("wait", "expense.decided", timeout="P7D", timeout_next="expired", next="decide")
    .task("decide", record, params={"decision": "${$NODE['wait']['data']}"}, next="done")
    .task("auto", record, params={"decision": {"approved": True}}, next="done")
    .task("expired", record, params={"decision": {"approved": False, "by": "timeout"}}, next="done")
    .end(
        "done",
        output="{'approved': $LAST_NODE['approved'], 'by': $LAST_NODE['by'], 'amount': amount}",
    )
)


# --- the app ----------------------------------------------------------------------------


class Expense(BaseModel):
    employee: str = Field(min_length=1, max_length=100)
    amount: float


class Decision(BaseModel):
    approved: bool
    by: str = Field(min_length=1, max_length=100)


def create_app(url: str | None = None, *, embedded_worker: bool | None = None) -> FastAPI:
    """The app on ``url`` (default ``PLAITA_URL``, else the in-process twin), with a worker
    in this process unless ``embedded_worker`` is False (``PLAITA_EMBEDDED_WORKER=0``)."""
    url = url or os.environ.get("PLAITA_URL", "memory://")
    if embedded_worker is None:
        embedded_worker = os.environ.get("PLAITA_EMBEDDED_WORKER", "1") != "0"

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(plaita.Client(url))
            if embedded_worker:
                await stack.enter_async_context(plaita.Worker(client, handlers=[submit, record]))
            await client.register(approval)
            app.state.plaita = client
            yield

    app = FastAPI(title="Expenses", lifespan=lifespan)

    def client_of() -> plaita.Client:
        client: plaita.Client = app.state.plaita
        return client

    @app.post("/expenses", status_code=201)
    async def create_expense(expense: Expense) -> dict[str, str]:
        handle = await client_of().start("expense_approval", expense.model_dump())
        return {"expense_id": handle.execution_id}

    @app.post("/expenses/{expense_id}/decision")
    async def decide(expense_id: str, decision: Decision) -> dict[str, Any]:
        client = client_of()
        try:
            handle = client.handle(expense_id)
        except plaita.PlaitaError as exc:
            raise HTTPException(422, f"{type(exc).__name__}: {exc}") from None
        # Published even before the approval waits: it keeps in the execution's inbox.
        await client.publish("expense.decided", decision.model_dump(), correlation_id=expense_id)
        try:
            outcome = await handle.result(timeout=DECISION_WAIT_S)
        except plaita.ResultTimeoutError:
            raise HTTPException(202, "decision recorded; the approval is still running") from None
        except plaita.ExecutionFailedError as exc:
            raise HTTPException(409, f"the approval failed: {exc}") from None
        return {"expense_id": expense_id, **outcome}

    @app.get("/expenses/{expense_id}")
    async def show(expense_id: str) -> dict[str, str]:
        try:
            status = await client_of().handle(expense_id).status()
        except plaita.PlaitaError as exc:
            raise HTTPException(404, f"{type(exc).__name__}: {exc}") from None
        return {"expense_id": expense_id, "status": status.value}

    return app


app = create_app()
