"""Executions: start, list, show, operator actions (W23) and delete (W13).

Every route opens ``tenant_scope`` for the tenant the request acts for, after the token was
checked for it (W24): an execution of another tenant is simply not there (404).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Query

from plaita.application.actor import actor_scope
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.operator_controls import ControlResult
from plaita.domain.execution import ExecutionStatus
from plaita.domain.execution_query import ExecutionQuery
from plaita.domain.history import DEFAULT_HISTORY_PAGE, MAX_HISTORY_PAGE
from plaita.domain.operator_controls import MAX_PAGE_LIMIT
from plaita.entrypoints.console import schemas, views
from plaita.entrypoints.console.auth import (
    AdminAccess,
    ConsoleToken,
    Operator,
    ViewerAccess,
    api_actor,
    authorize_tenant,
)
from plaita.entrypoints.console.context import Console, ConsoleDep, responses

router = APIRouter(prefix="/api/v1/executions", tags=["executions"])

ExecutionId = schemas.IdPath
PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE_LIMIT)]
PageCursor = Annotated[
    str | None,
    Query(min_length=1, max_length=1024, description="A previous page's next_cursor."),
]
#: What an operator action answers when it did not go through (W23).
ACTION_ERRORS = responses(403, 404, 409, 422)


@router.post(
    "",
    status_code=201,
    response_model=schemas.StartedExecutionView,
    responses=responses(403, 404, 422),
)
async def start_execution(
    body: schemas.StartExecutionRequest, token: Operator, console: ConsoleDep
) -> schemas.StartedExecutionView:
    """Start an execution of a registered flow (W6: a dedup key starts it at most once)."""
    tenant = authorize_tenant(token, body.tenant)
    with tenant_scope(tenant), actor_scope(api_actor(token)):
        started = await console.container.start_execution()(
            body.flow_id,
            version=body.version,
            params=body.input,
            execution_id=body.execution_id,
            dedup_key=body.dedup_key,
            tenant_id=tenant,
            target_instance_id=body.target_instance_id,
            priority=body.priority,
        )
    return schemas.StartedExecutionView(
        execution_id=started.execution_id,
        flow_id=started.flow_id,
        version=started.version,
        deduplicated=started.deduplicated,
    )


@router.delete(
    "/{execution_id}",
    response_model=schemas.DeletedExecutionView,
    responses=responses(403, 404, 422),
)
async def delete_execution(
    execution_id: ExecutionId,
    access: AdminAccess,
    console: ConsoleDep,
    reason: Annotated[str, Query(min_length=1, max_length=500)] = "deleted from the console",
) -> schemas.DeletedExecutionView:
    """Revoke the execution's lease, remove its state and leave a tombstone (W13).

    Deleting twice keeps the first ``deleted_at``; queued carriers meet the tombstone.
    """
    with tenant_scope(access.tenant):
        deleted = await console.container.delete_execution()(
            execution_id, reason=f"{reason} (by {access.token.name})"
        )
    return schemas.DeletedExecutionView.model_validate(deleted.to_json())


@router.get("", response_model=schemas.ExecutionPage, responses=responses(403, 422))
async def list_executions(
    access: ViewerAccess,
    console: ConsoleDep,
    flow_id: schemas.IdQuery | None = None,
    status: ExecutionStatus | None = None,
    created_from_ms: schemas.CreatedFromQuery = None,
    created_to_ms: schemas.CreatedToQuery = None,
    input_condition: schemas.InputConditionQuery = None,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
) -> schemas.ExecutionPage:
    """The tenant's executions, newest first, a page at a time: filtered by flow, status,
    creation time (both ends inclusive) and one condition on the input (``customer.id =
    42``). A filter that cannot be read is ``InvalidExecutionQueryError`` (422), naming it.

    With a creation window or an input condition a page may hold fewer than ``limit``
    executions, even none, and still have a ``next_cursor``: at most 2,000 executions are
    looked at per call; follow the cursor for more."""
    query = ExecutionQuery.build(
        created_from_ms=created_from_ms,
        created_to_ms=created_to_ms,
        input_condition=input_condition,
    )
    with tenant_scope(access.tenant):
        listing = await console.container.list_executions()(
            flow_id=flow_id, status=status, limit=limit, cursor=cursor, query=query
        )
    return views.page(listing)


@router.get(
    "/{execution_id}/history",
    response_model=schemas.HistoryPageView,
    responses=responses(403, 404, 422),
)
async def execution_history(
    execution_id: ExecutionId,
    access: ViewerAccess,
    console: ConsoleDep,
    after: Annotated[
        int | None, Query(ge=0, description="A previous page's next_cursor (an entry's seq).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_HISTORY_PAGE)] = DEFAULT_HISTORY_PAGE,
) -> schemas.HistoryPageView:
    """What happened to the execution, oldest first, a page at a time: every attempt of
    every node, failures with their tracebacks, retries, waits, events, operator actions."""
    with tenant_scope(access.tenant):
        page = await console.container.execution_history()(execution_id, after=after, limit=limit)
    return schemas.HistoryPageView(
        entries=[schemas.HistoryEntryView(**entry.to_json()) for entry in page.entries],
        next_cursor=page.next_cursor,
        dropped=page.dropped,
    )


@router.get(
    "/{execution_id}/children",
    response_model=schemas.ExecutionPage,
    responses=responses(403, 404, 422),
)
async def list_children(
    execution_id: ExecutionId,
    access: ViewerAccess,
    console: ConsoleDep,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
) -> schemas.ExecutionPage:
    """The executions its subflow and map nodes started (E13, E14), a page at a time: node
    by node in the flow's order, a map's children in item order. Empty for an execution
    whose flow has no such node; a cursor that is no page's next_cursor is
    ``InvalidChildCursorError`` (422)."""
    with tenant_scope(access.tenant):
        listing = await console.container.list_children()(execution_id, cursor=cursor, limit=limit)
    return views.page(listing)


@router.get(
    "/{execution_id}", response_model=schemas.ExecutionDetail, responses=responses(403, 404, 422)
)
async def show_execution(
    execution_id: ExecutionId, access: ViewerAccess, console: ConsoleDep
) -> schemas.ExecutionDetail:
    """One execution: where it is, what it waits for, its node timeline, result and error."""
    with tenant_scope(access.tenant):
        state = await console.container.get_execution()(execution_id)
        flags = await console.container.controls().get(execution_id)
        held_back = await console.container.waiting_notes().get(execution_id)
    return views.detail(state, flags, held_back)


Act = Callable[[Console], Callable[[str], Awaitable[ControlResult]]]


async def _act(
    console: Console,
    token: ConsoleToken,
    body: schemas.ActionRequest | None,
    execution_id: str,
    act: Act,
) -> schemas.ActionResult:
    tenant = authorize_tenant(token, (body or schemas.ActionRequest()).tenant)
    with tenant_scope(tenant), actor_scope(api_actor(token)):
        result = await act(console)(execution_id)
    return schemas.ActionResult.model_validate(result.to_json())


@router.post(
    "/{execution_id}/resume",
    status_code=202,
    response_model=schemas.ActionResult,
    responses=ACTION_ERRORS,
)
async def resume_execution(
    execution_id: ExecutionId,
    token: Operator,
    console: ConsoleDep,
    body: schemas.ActionRequest | None = None,
) -> schemas.ActionResult:
    """Enqueue a continue for a running or suspended execution (a stuck one, W19).

    An execution in error or cancelled is refused (409): retry it instead.
    """
    return await _act(
        console, token, body, execution_id, lambda c: c.container.continue_execution()
    )


@router.post(
    "/{execution_id}/retry",
    status_code=202,
    response_model=schemas.ActionResult,
    responses=ACTION_ERRORS,
)
async def retry_execution(
    execution_id: ExecutionId,
    token: Operator,
    console: ConsoleDep,
    body: schemas.RetryRequest | None = None,
) -> schemas.ActionResult:
    """Run a stopped execution again under the same id (W7, W23).

    Without ``from_node`` an execution in error is woken up at its failed node; with it, the
    execution restarts at that node. A running execution is a conflict (409).
    """
    request = body or schemas.RetryRequest()

    def act(c: Console) -> Callable[[str], Awaitable[ControlResult]]:
        retry = c.container.retry_execution()

        async def run(execution_id: str) -> ControlResult:
            return await retry(execution_id, from_node=request.from_node)

        return run

    return await _act(console, token, request, execution_id, act)


@router.post(
    "/{execution_id}/cancel",
    status_code=202,
    response_model=schemas.ActionResult,
    responses=ACTION_ERRORS,
)
async def cancel_execution(
    execution_id: ExecutionId,
    token: Operator,
    console: ConsoleDep,
    body: schemas.ActionRequest | None = None,
) -> schemas.ActionResult:
    """Flag the cancel, then let the worker cancel it under the lease (W23)."""
    return await _act(console, token, body, execution_id, lambda c: c.container.cancel_execution())


@router.post(
    "/{execution_id}/pause",
    status_code=202,
    response_model=schemas.ActionResult,
    responses=ACTION_ERRORS,
)
async def pause_execution(
    execution_id: ExecutionId,
    token: Operator,
    console: ConsoleDep,
    body: schemas.ActionRequest | None = None,
) -> schemas.ActionResult:
    """Stop the execution taking new steps; its carriers wait parked (W23)."""
    return await _act(console, token, body, execution_id, lambda c: c.container.pause_execution())


@router.post(
    "/{execution_id}/unpause",
    status_code=202,
    response_model=schemas.ActionResult,
    responses=ACTION_ERRORS,
)
async def unpause_execution(
    execution_id: ExecutionId,
    token: Operator,
    console: ConsoleDep,
    body: schemas.ActionRequest | None = None,
) -> schemas.ActionResult:
    """Clear the pause and enqueue the parked carriers again (W23)."""
    return await _act(console, token, body, execution_id, lambda c: c.container.unpause_execution())


@router.post("/bulk", response_model=schemas.BulkResult, responses=responses(403, 422))
async def bulk_action(
    body: schemas.BulkRequest, token: Operator, console: ConsoleDep
) -> schemas.BulkResult:
    """One action over the tenant's executions matching the filter, newest first (W23):
    the same filters as the listing, so a search's executions are the ones acted on
    (``dry_run`` counts them first).

    Each execution's failure is listed with its error and never stops the others.
    """
    tenant = authorize_tenant(token, body.tenant)
    with tenant_scope(tenant), actor_scope(api_actor(token)):
        result = await console.container.bulk_action()(
            body.action,
            flow_id=body.flow_id,
            status=body.status,
            dry_run=body.dry_run,
            limit=body.limit,
            query=ExecutionQuery.build(
                created_from_ms=body.created_from_ms,
                created_to_ms=body.created_to_ms,
                input_condition=body.input_condition,
            ),
        )
    return schemas.BulkResult.model_validate(result.to_json())
