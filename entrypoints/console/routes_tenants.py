"""Tenants (W24): their status (suspend, resume) and quota.

A tenant's status and quota are the deployment's, not the tenant's own data: reading them
needs an operator token, and a token sees only the tenants it may act for; suspending,
resuming and setting a quota need an admin token of every tenant (``*``), so a tenant's own
admin can neither lift its suspension nor raise its quota. Every write is stamped with the
console's deployment epoch (``PLAITA_DEPLOYMENT_EPOCH``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import Field, StrictInt

from plaita.application.actor import actor_scope
from plaita.application.use_cases.tenants import TenantActionResult, TenantView
from plaita.domain.tenant_status import MAX_TENANT_QUOTA, TenantGateAction, TenantStatus
from plaita.entrypoints.console import schemas
from plaita.entrypoints.console.auth import (
    TENANT_PATTERN,
    Admin,
    Operator,
    api_actor,
    authorize_deployment,
    authorize_tenant,
)
from plaita.entrypoints.console.context import ConsoleDep, responses

router = APIRouter(prefix="/api/v1/tenants", tags=["tenants"])

TenantIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        pattern=TENANT_PATTERN,
        description="A tenant id (letters, digits, '_', '.', '-').",
    ),
]


class TenantDetail(schemas._Response):
    tenant_id: str
    status: TenantStatus
    recorded: bool = Field(description="False: the tenant has no status record (active).")
    max_running: int | None = Field(description="The tenant's quota; null: no limit.")
    epoch: int | None = Field(description="The deployment epoch that wrote the record.")
    updated_at_ms: int | None
    version: int
    parked: int = Field(description="Carriers parked while the tenant was suspended.")
    workers: TenantGateAction = Field(
        description="What a worker of the console's deployment epoch does with the tenant's "
        "carriers: run, park (suspended) or hold (a status of another epoch)."
    )
    workers_detail: str


class TenantList(schemas._Response):
    items: list[TenantDetail]


class TenantActionView(schemas._Response):
    tenant_id: str
    action: str
    outcome: str = Field(
        description="suspended, already_suspended, resumed, already_active, quota_set or "
        "quota_unchanged."
    )
    status: TenantStatus
    max_running: int | None
    epoch: int | None
    version: int
    requeued: int = Field(description="Parked carriers enqueued again (resume).")
    parked: int


class QuotaRequest(schemas._Request):
    max_running: StrictInt | None = Field(
        ge=1,
        le=MAX_TENANT_QUOTA,
        description=f"At most this many of the tenant's executions running at once "
        f"(1-{MAX_TENANT_QUOTA}); null clears the quota.",
    )


def _detail(view: TenantView) -> TenantDetail:
    return TenantDetail.model_validate(view.to_json())


def _action(result: TenantActionResult) -> TenantActionView:
    return TenantActionView.model_validate(result.to_json())


@router.get("", response_model=TenantList, responses=responses(403, 422))
async def tenant_list(token: Operator, console: ConsoleDep) -> TenantList:
    """The tenants with a status record that the token may act for, by tenant id (a tenant
    without one is active, with no quota)."""
    views = await console.container.list_tenants()()
    return TenantList(items=[_detail(v) for v in views if token.may_act_for(v.tenant_id)])


@router.get("/{tenant_id}", response_model=TenantDetail, responses=responses(403, 422))
async def tenant_show(
    tenant_id: TenantIdPath, token: Operator, console: ConsoleDep
) -> TenantDetail:
    """One tenant: its status, quota, the epoch that wrote them, its parked carriers, and what
    the deployment's workers do with its carriers now."""
    authorize_tenant(token, tenant_id)
    return _detail(await console.container.show_tenant()(tenant_id))


@router.post(
    "/{tenant_id}/suspend", response_model=TenantActionView, responses=responses(403, 409, 422)
)
async def tenant_suspend(
    tenant_id: TenantIdPath, token: Admin, console: ConsoleDep
) -> TenantActionView:
    """Park the tenant's carriers (no step runs, nothing is lost) until it is resumed; its
    starts are accepted and held; cancels still run. The default tenant is refused (409)."""
    authorize_deployment(token, f"suspending tenant {tenant_id!r}")
    with actor_scope(api_actor(token)):
        return _action(await console.container.suspend_tenant()(tenant_id))


@router.post(
    "/{tenant_id}/resume", response_model=TenantActionView, responses=responses(403, 409, 422)
)
async def tenant_resume(
    tenant_id: TenantIdPath, token: Admin, console: ConsoleDep
) -> TenantActionView:
    """Write the tenant active under the deployment's epoch, then enqueue its parked carriers
    again (also how a status is rewritten after a new deployment epoch)."""
    authorize_deployment(token, f"resuming tenant {tenant_id!r}")
    with actor_scope(api_actor(token)):
        return _action(await console.container.resume_tenant()(tenant_id))


@router.put(
    "/{tenant_id}/quota", response_model=TenantActionView, responses=responses(403, 409, 422)
)
async def tenant_quota(
    tenant_id: TenantIdPath, body: QuotaRequest, token: Admin, console: ConsoleDep
) -> TenantActionView:
    """Set the tenant's quota (``max_running``), or clear it (null)."""
    authorize_deployment(token, f"the quota of tenant {tenant_id!r}")
    with actor_scope(api_actor(token)):
        return _action(await console.container.set_tenant_quota()(tenant_id, body.max_running))
