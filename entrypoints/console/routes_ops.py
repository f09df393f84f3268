"""Operating the deployment: health, metrics, queue, dead letters, workers, config, flows.

Each request names the tenant it acts for and the token must be allowed to. The queue,
workers and configuration are the deployment's; dead letters are shown for the tenant only,
and flows as the tenant's executions see them: its own definitions, else the deployment-wide
ones (ADR 0011).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from plaita.application.ports import ClusterSnapshot
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.dlq import DeadLetterView, UnknownDeadLetterError
from plaita.domain.dead_letter import ReplayOutcome
from plaita.domain.errors import FlowVersionConflictError
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED, FlowOwner
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.console import schemas, views
from plaita.entrypoints.console.auth import (
    Admin,
    AdminAccess,
    ConsoleToken,
    ViewerAccess,
    authorize_shared,
    authorize_tenant,
)
from plaita.entrypoints.console.context import Console, ConsoleDep, responses
from plaita.entrypoints.console.errors import error_body
from plaita.entrypoints.console.settings_view import effective_settings

audit = logging.getLogger("plaita.audit")

#: How long /readyz waits for the stores before it answers "unavailable".
READY_TIMEOUT_SECONDS = 2.0
#: The most dead letters one listing returns (the newest first).
MAX_DLQ_COUNT = 1000

health = APIRouter(tags=["health"])
ops = APIRouter(tags=["operations"])
flows = APIRouter(prefix="/api/v1/flows", tags=["flows"])

DlqId = Annotated[
    str,
    Path(
        min_length=3,
        max_length=41,
        pattern=r"^[0-9]{1,20}-[0-9]{1,20}$",
        description="A dead letter's id (a stream id such as 1760000000000-0).",
    ),
]
FlowId = schemas.IdPath


# --- health and metrics -------------------------------------------------------------------


@health.get("/healthz", response_model=schemas.Health)
async def healthz() -> schemas.Health:
    """The console process answers (no store is asked)."""
    return schemas.Health(status="ok")


@health.get(
    "/readyz",
    response_model=schemas.Readiness,
    response_model_exclude_none=True,
    responses={503: {"model": schemas.Readiness, "description": "A store did not answer."}},
)
async def readyz(console: ConsoleDep) -> Any:
    """Ready when the queue and the flow store answer within two seconds."""
    try:
        async with asyncio.timeout(READY_TIMEOUT_SECONDS):
            await console.container.queue().stats()
            await console.container.flow_repository().list_ids(owner=SHARED)
    except Exception as exc:  # any failure means "not ready"; the reason says which
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return JSONResponse({"status": "unavailable", "reason": reason}, status_code=503)
    return schemas.Readiness(status="ready")


@ops.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}},
        **responses(403, 422),
    },
)
async def metrics(access: ViewerAccess, console: ConsoleDep) -> Response:
    """Prometheus text: queue, dead letters, delayed carriers, workers, console requests."""
    console.metrics.observe(await cluster_snapshot(console))
    return Response(console.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def cluster_snapshot(console: Console) -> ClusterSnapshot:
    container = console.container
    stats = await container.queue().stats()
    now_ms = container.clock().now_ms()
    oldest = stats.oldest_unread_ms
    return ClusterSnapshot(
        stream_length=stats.length,
        pending=stats.pending,
        dlq_length=await container.queue().dead_letter_length(),
        delayed=await container.delay_queue().pending(),
        workers=await container.registry().list(),
        now_ms=now_ms,
        lag_ms=0 if oldest is None else max(0, now_ms - oldest),
    )


# --- queue, workers, config ---------------------------------------------------------------


@ops.get("/api/v1/queue", response_model=schemas.QueueView, responses=responses(403, 422))
async def queue_stats(access: ViewerAccess, console: ConsoleDep) -> schemas.QueueView:
    """The task stream, its pending carriers, the DLQ and the delay queue, now."""
    snapshot = await cluster_snapshot(console)
    return schemas.QueueView(
        stream_length=snapshot.stream_length,
        pending=snapshot.pending,
        dlq_length=snapshot.dlq_length,
        delayed=snapshot.delayed,
        # How long the oldest carrier no worker has read yet has waited (0: none waits).
        lag_ms=snapshot.lag_ms,
    )


@ops.get("/api/v1/workers", response_model=schemas.WorkerList, responses=responses(403, 422))
async def workers(access: ViewerAccess, console: ConsoleDep) -> schemas.WorkerList:
    """Registered worker instances with their status and heartbeat age (W16)."""
    now_ms = console.container.clock().now_ms()
    return schemas.WorkerList(
        items=[
            schemas.WorkerView(
                instance_id=w.instance_id,
                status=w.status,
                heartbeat_age_ms=max(0, now_ms - w.heartbeat_ms),
                started_ms=w.started_ms,
                config_family=w.config_family,
                config_generation=w.config_generation,
                budget_generation=w.budget_generation,
            )
            for w in await console.container.registry().list()
        ]
    )


@ops.get("/api/v1/whoami", response_model=schemas.Identity, responses=responses(403, 422))
async def whoami(access: ViewerAccess) -> schemas.Identity:
    """The token's name, role and tenants (never its secret): the page adapts its controls."""
    described = access.token.describe()
    return schemas.Identity(
        name=described["name"], role=described["role"], tenants=list(described["tenants"])
    )


@ops.get("/api/v1/config", response_model=dict[str, Any], responses=responses(403, 422))
async def config(access: ViewerAccess, console: ConsoleDep) -> dict[str, Any]:
    """The effective settings, secrets masked (passwords in URLs, tokens)."""
    return effective_settings(console)


# --- dead letters (admin) -----------------------------------------------------------------


def _tenant_of(view: DeadLetterView) -> str:
    return view.tenant_id or DEFAULT_TENANT


def _dead_letter(view: DeadLetterView) -> schemas.DeadLetterView:
    return schemas.DeadLetterView.model_validate(view.to_json())


@ops.get("/api/v1/dlq", response_model=schemas.DeadLetterList, responses=responses(403, 422))
async def dlq_list(
    access: AdminAccess,
    console: ConsoleDep,
    count: Annotated[int, Query(ge=1, le=MAX_DLQ_COUNT)] = 50,
) -> schemas.DeadLetterList:
    """The tenant's dead letters among the newest ``count`` entries, newest first (W10)."""
    found = await console.container.list_dead_letters()(count=count)
    return schemas.DeadLetterList(
        items=[_dead_letter(view) for view in found if _tenant_of(view) == access.tenant]
    )


@ops.get(
    "/api/v1/dlq/{dlq_id}",
    response_model=schemas.DeadLetterView,
    responses=responses(403, 404, 422),
)
async def dlq_show(
    dlq_id: DlqId, access: AdminAccess, console: ConsoleDep
) -> schemas.DeadLetterView:
    """One dead letter: why it was dead-lettered, its carrier and its replay marker."""
    view = await console.container.show_dead_letter()(dlq_id)
    if _tenant_of(view) != access.tenant:
        raise UnknownDeadLetterError(
            f"no dead letter {dlq_id!r} of tenant {access.tenant!r}; list them with "
            "GET /api/v1/dlq?tenant=..."
        )
    return _dead_letter(view)


@ops.post(
    "/api/v1/dlq/{dlq_id}/replay",
    response_model=schemas.ReplayResultView,
    responses={
        **responses(403, 404, 409, 422),
        409: {
            "model": schemas.ReplayRefusal,
            "description": "The replay was refused: already_replayed, schema_too_new, "
            "execution_deleted, execution_ended (it has ended; the carrier would do nothing) "
            "or tenant_mismatch; the entry is kept.",
        },
    },
)
async def dlq_replay(
    dlq_id: DlqId,
    token: Admin,
    console: ConsoleDep,
    body: schemas.ActionRequest | None = None,
) -> Any:
    """Put a dead letter's carrier back on the task stream, once; the entry is kept (W10)."""
    tenant = authorize_tenant(token, (body or schemas.ActionRequest()).tenant)
    result = await console.container.replay_dead_letter()(dlq_id, tenant_id=tenant)
    if result.outcome is ReplayOutcome.REPLAYED:
        return schemas.ReplayResultView.model_validate(result.to_json())
    refusal = error_body(
        "ReplayRefusedError",
        f"dead letter {dlq_id} was not replayed ({result.outcome.value}): {result.detail}",
    )
    return JSONResponse(
        {
            **refusal,
            "outcome": result.outcome.value,
            "dlq_id": dlq_id,
            "execution_id": result.execution_id,
        },
        status_code=409,
    )


# --- flows --------------------------------------------------------------------------------


SharedQuery = Annotated[
    bool,
    Query(description="Only the deployment-wide catalogue, not the tenant's own definitions."),
]


@flows.get("", response_model=schemas.FlowList, responses=responses(403, 422))
async def flow_list(
    access: ViewerAccess, console: ConsoleDep, shared: SharedQuery = False
) -> schemas.FlowList:
    """The flows the tenant's executions can run, each at its latest version: the tenant's
    own definitions and the deployment-wide ones it has no copy of (``shared`` says which)."""
    with tenant_scope(access.tenant):
        entries = await console.container.flows().listing(shared_only=shared)
    return schemas.FlowList(items=[views.flow_summary(e.flow, e.owner) for e in entries])


@flows.get(
    "/{flow_id}/versions",
    response_model=schemas.FlowVersionList,
    responses=responses(403, 404, 422),
)
async def flow_versions(
    flow_id: FlowId, access: ViewerAccess, console: ConsoleDep, shared: SharedQuery = False
) -> schemas.FlowVersionList:
    """Every registered version of a flow in the catalogue the tenant's executions run it
    from (its own, else the deployment-wide one), highest first, and which is the latest."""
    with tenant_scope(access.tenant):
        found = await console.container.flows().versions(flow_id, shared_only=shared)
    return schemas.FlowVersionList(
        flow_id=found.flow_id,
        tenant_id=found.owner.tenant_id,
        shared=found.owner.shared,
        latest_version=found.latest,
        versions=list(found.versions),
    )


@flows.get("/{flow_id}", response_model=schemas.FlowDetail, responses=responses(403, 404, 422))
async def flow_show(
    flow_id: FlowId,
    access: ViewerAccess,
    console: ConsoleDep,
    version: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    shared: SharedQuery = False,
) -> schemas.FlowDetail:
    """The definition the tenant's executions of a flow run (its own, else the deployment-wide
    one): its document and its graph, nodes and edges labelled by their role."""
    with tenant_scope(access.tenant):
        entry = await console.container.flows().lookup(flow_id, version, shared_only=shared)
    return views.flow_detail(entry.flow, entry.owner)


@flows.post(
    "",
    status_code=201,
    response_model=schemas.RegisteredFlow,
    responses={
        200: {"model": schemas.RegisteredFlow, "description": "Already registered: unchanged."},
        **responses(403, 409, 422),
        409: {
            "model": schemas.FlowVersionConflict,
            "description": "Another document is registered under this version; nothing was "
            "written. Register the new document under a new version.",
        },
    },
)
async def flow_register(
    body: schemas.RegisterFlowRequest, token: Admin, console: ConsoleDep, response: Response
) -> Any:
    """Validate and register a flow definition for the request's tenant, or deployment-wide
    with ``shared``. A registered version never changes: the same document again answers
    200, another one 409. The version becomes that catalogue's latest when it is higher than
    the latest in the version order ("2" < "10", "1.9" < "1.10", "v2" < "v3"), or with
    ``latest`` (a rollback); ``latest_reason`` says which."""
    if body.shared:
        authorize_shared(token)
        owner = SHARED
    else:
        owner = FlowOwner.tenant(authorize_tenant(token, body.tenant))
    document = body.model_dump(mode="json", by_alias=True, exclude={"tenant", "shared", "latest"})
    flow = Flow.from_document(document)
    try:
        registered = await console.container.flows().register(flow, owner=owner, latest=body.latest)
    except FlowVersionConflictError as conflict:
        _audit_registration(token, owner, flow, "conflict")
        return JSONResponse(
            {
                **error_body(type(conflict).__name__, str(conflict)),
                "flow_id": conflict.flow_id,
                "version": conflict.version,
                "registered_fingerprint": conflict.registered_fingerprint,
                "given_fingerprint": conflict.given_fingerprint,
            },
            status_code=409,
        )
    _audit_registration(
        token, owner, flow, registered.outcome.value, latest=registered.latest.latest
    )
    if not registered.created:
        response.status_code = 200
    return schemas.RegisteredFlow(
        flow_id=flow.flow_id,
        version=flow.version,
        fingerprint=flow.fingerprint,
        tenant_id=owner.tenant_id,
        shared=owner.shared,
        created=registered.created,
        latest_version=registered.latest.latest,
        is_latest=registered.is_latest,
        latest_reason=registered.latest.reason,
    )


def _audit_registration(
    token: ConsoleToken, owner: FlowOwner, flow: Flow, outcome: str, *, latest: str = "-"
) -> None:
    audit.log(
        logging.WARNING if outcome == "conflict" else logging.INFO,
        "event=console.flow_register by=%s owner=%s flow_id=%s version=%s fingerprint=%s "
        "outcome=%s latest=%s",
        token.name,
        owner.tenant_id or "*",
        flow.flow_id,
        flow.version,
        flow.fingerprint,
        outcome,
        latest,
    )
