"""Cron schedules (W22): create, list, show, pause, resume, trigger, delete.

Every request acts for one tenant, checked against the token; another tenant's schedule is
simply not there (404). Reading needs a viewer token; creating, pausing, resuming and
deleting a schedule an admin one, as registering a flow does; triggering one — starting one
execution now — an operator one, as starting an execution does.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from plaita.application.actor import actor_scope
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.schedules import (
    DEFAULT_NEXT_RUNS,
    MAX_NEXT_RUNS,
    ScheduleView,
)
from plaita.domain.cron import DEFAULT_TIMEZONE, MAX_EXPRESSION_LENGTH
from plaita.domain.cron_schedules import (
    DEFAULT_CATCH_UP,
    DEFAULT_OVERLAP,
    CatchUpPolicy,
    OverlapPolicy,
)
from plaita.domain.execution import ExecutionStatus
from plaita.domain.priorities import Priority
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.console import schemas
from plaita.entrypoints.console.auth import (
    Admin,
    AdminAccess,
    ConsoleToken,
    Operator,
    ViewerAccess,
    api_actor,
    authorize_tenant,
)
from plaita.entrypoints.console.context import Console, ConsoleDep, responses

JSON = Any

router = APIRouter(prefix="/api/v1/schedules", tags=["schedules"])
ScheduleId = schemas.IdPath


class CreateScheduleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schedule_id: schemas.Id
    flow_id: schemas.Id
    cron: str = Field(
        min_length=1,
        max_length=MAX_EXPRESSION_LENGTH,
        description="Five fields (minute hour day month weekday), six with a trailing seconds "
        "field, seven with a year, or a nickname such as @hourly; e.g. '0 3 * * *'.",
    )
    timezone: schemas.Name = Field(
        default=DEFAULT_TIMEZONE, description="The IANA time zone the expression is read in."
    )
    version: schemas.Name | None = Field(
        default=None, description="The flow version each due starts; default: the latest."
    )
    input: dict[str, JSON] = Field(default_factory=dict, description="The executions' input.")
    overlap: OverlapPolicy = Field(
        default=DEFAULT_OVERLAP,
        description="While the last execution runs: allow (start anyway), skip (skip the "
        "due), buffer_one (keep one due waiting).",
    )
    catch_up: CatchUpPolicy = Field(
        default=DEFAULT_CATCH_UP,
        description="Dues missed while no scheduler ran: none (skip them), latest (start the "
        "most recent), all (start each, at most 100).",
    )
    paused: StrictBool = Field(default=False, description="Create it paused.")
    priority: Priority = Field(
        default=Priority.NORMAL, description="The priority of every start it makes."
    )
    tenant: schemas.TenantId = DEFAULT_TENANT


class ScheduleModel(BaseModel):
    """A schedule: its definition, what the schedulers recorded and its next run times."""

    model_config = ConfigDict(populate_by_name=True)

    schedule_id: str
    tenant_id: str
    flow_id: str
    flow_version: str | None
    cron: str
    timezone: str
    input: dict[str, JSON]
    overlap: OverlapPolicy
    catch_up: CatchUpPolicy
    priority: Priority = Priority.NORMAL
    created_at_ms: int
    paused: bool
    cursor_ms: int = Field(description="Every due at or before this time was handled.")
    last_due_ms: int | None = Field(description="The newest due that started an execution.")
    last_execution_id: str | None
    last_status: ExecutionStatus | None = Field(
        default=None, description="Its status (on GET of one schedule)."
    )
    buffered_due_ms: int | None = Field(
        description="A due waiting for the last execution to end (buffer_one)."
    )
    fired: int
    skipped: int
    failed: int
    last_error: str | None
    next_run_ms: int | None
    next_runs_ms: list[int]


class ScheduleList(BaseModel):
    items: list[ScheduleModel]


class TriggeredModel(BaseModel):
    schedule_id: str
    dedup_key: str = Field(description="The run's own key: sched:{schedule_id}:manual:{id}.")
    execution_id: str
    flow_id: str
    version: str


class DeletedModel(BaseModel):
    schedule_id: str
    deleted: bool


def _model(view: ScheduleView) -> ScheduleModel:
    return ScheduleModel.model_validate(view.to_json())


@router.get("", response_model=ScheduleList, responses=responses(403, 422))
async def list_schedules(access: ViewerAccess, console: ConsoleDep) -> ScheduleList:
    """The tenant's schedules by id, each with its next run time."""
    with tenant_scope(access.tenant):
        views = await console.container.list_schedules()()
    return ScheduleList(items=[_model(view) for view in views])


@router.post(
    "", status_code=201, response_model=ScheduleModel, responses=responses(403, 404, 409, 422)
)
async def create_schedule(
    body: CreateScheduleRequest, token: Admin, console: ConsoleDep
) -> ScheduleModel:
    """Create a schedule of a flow the tenant can run (404 when it cannot, 409 when the id is
    taken); a value it cannot take is 422 naming the field (cron, timezone, input …)."""
    tenant = authorize_tenant(token, body.tenant)
    with tenant_scope(tenant), actor_scope(api_actor(token)):
        view = await console.container.create_schedule()(
            body.schedule_id,
            flow_id=body.flow_id,
            cron=body.cron,
            timezone=body.timezone,
            version=body.version,
            input=body.input,
            overlap=body.overlap,
            catch_up=body.catch_up,
            paused=body.paused,
            priority=body.priority,
        )
    return _model(view)


@router.get("/{schedule_id}", response_model=ScheduleModel, responses=responses(403, 404, 422))
async def show_schedule(
    schedule_id: ScheduleId,
    access: ViewerAccess,
    console: ConsoleDep,
    count: Annotated[
        int, Query(ge=0, le=MAX_NEXT_RUNS, description="How many next run times to list.")
    ] = DEFAULT_NEXT_RUNS,
) -> ScheduleModel:
    """One schedule, its next ``count`` run times and the status of its last execution."""
    with tenant_scope(access.tenant):
        view = await console.container.show_schedule()(schedule_id, count=count)
    return _model(view)


async def _pause(
    schedule_id: str,
    token: ConsoleToken,
    body: schemas.ActionRequest | None,
    console: Console,
    *,
    paused: bool,
) -> ScheduleModel:
    tenant = authorize_tenant(token, (body or schemas.ActionRequest()).tenant)
    with tenant_scope(tenant), actor_scope(api_actor(token)):
        view = await console.container.pause_schedule()(schedule_id, paused=paused)
    return _model(view)


@router.post(
    "/{schedule_id}/pause", response_model=ScheduleModel, responses=responses(403, 404, 422)
)
async def pause_schedule(
    schedule_id: ScheduleId,
    token: Admin,
    console: ConsoleDep,
    body: schemas.ActionRequest | None = None,
) -> ScheduleModel:
    """Pause: no due starts until it is resumed."""
    return await _pause(schedule_id, token, body, console, paused=True)


@router.post(
    "/{schedule_id}/resume", response_model=ScheduleModel, responses=responses(403, 404, 422)
)
async def resume_schedule(
    schedule_id: ScheduleId,
    token: Admin,
    console: ConsoleDep,
    body: schemas.ActionRequest | None = None,
) -> ScheduleModel:
    """Resume: dues from now on start; those that fell while it was paused do not."""
    return await _pause(schedule_id, token, body, console, paused=False)


@router.post(
    "/{schedule_id}/trigger",
    status_code=201,
    response_model=TriggeredModel,
    responses=responses(403, 404, 422),
)
async def trigger_schedule(
    schedule_id: ScheduleId,
    token: Operator,
    console: ConsoleDep,
    body: schemas.ActionRequest | None = None,
) -> TriggeredModel:
    """Start one execution now, paused or not, under a dedup key of its own: triggering
    twice starts twice, and never merges with a due."""
    tenant = authorize_tenant(token, (body or schemas.ActionRequest()).tenant)
    with tenant_scope(tenant), actor_scope(api_actor(token)):
        run = await console.container.trigger_schedule()(schedule_id)
    return TriggeredModel(
        schedule_id=run.schedule_id,
        dedup_key=run.dedup_key,
        execution_id=run.started.execution_id,
        flow_id=run.started.flow_id,
        version=run.started.version,
    )


@router.delete("/{schedule_id}", response_model=DeletedModel, responses=responses(403, 404, 422))
async def delete_schedule(
    schedule_id: ScheduleId, access: AdminAccess, console: ConsoleDep
) -> DeletedModel:
    """Delete the schedule; the executions it started are left as they are."""
    with tenant_scope(access.tenant), actor_scope(api_actor(access.token)):
        ref = await console.container.delete_schedule()(schedule_id)
    return DeletedModel(schedule_id=ref.schedule_id, deleted=True)
