"""Publishing and reading events (V1, V7). An event belongs to one tenant and is shown only
to requests acting for that tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query

from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import UnknownEventError
from plaita.domain.events import MAX_LISTING_LIMIT, Event, EventQuery
from plaita.domain.tracing import TraceContext
from plaita.entrypoints.console import schemas
from plaita.entrypoints.console.auth import Operator, ViewerAccess, authorize_tenant
from plaita.entrypoints.console.context import ConsoleDep, responses

router = APIRouter(prefix="/api/v1/events", tags=["events"])

#: Milliseconds since the epoch: 0 up to the year 10000.
EpochMs = Annotated[int, Query(ge=0, le=253_402_300_800_000)]
EventId = schemas.IdPath
#: A W3C Trace Context header (C6); read as it comes, an invalid one ignored.
TraceHeader = Annotated[
    str | None,
    Header(description="W3C Trace Context: the publish joins the caller's trace (optional)."),
]


def _view(event: Event) -> schemas.EventView:
    return schemas.EventView.model_validate(event.to_json())


@router.post("", status_code=201, response_model=schemas.EventView, responses=responses(403, 422))
async def publish_event(
    body: schemas.PublishEventRequest,
    token: Operator,
    console: ConsoleDep,
    traceparent: TraceHeader = None,
    tracestate: TraceHeader = None,
) -> schemas.EventView:
    """Publish an event; executions of the tenant waiting for it resume (V4, V6).

    A W3C ``traceparent`` header (with its ``tracestate``) makes the publish part of the
    caller's trace; the resumed steps link to it. A malformed one is ignored.
    """
    tenant = authorize_tenant(token, body.tenant)
    with tenant_scope(tenant):
        event = await console.container.publish_event()(
            body.event_type,
            data=body.data,
            correlation_id=body.correlation_id,
            source=body.source,
            tenant_id=tenant,
            trace_parent=TraceContext.parse(traceparent, tracestate),
        )
    return _view(event)


@router.get("", response_model=schemas.EventList, responses=responses(403, 422))
async def list_events(
    access: ViewerAccess,
    console: ConsoleDep,
    event_type: Annotated[str | None, Query(alias="type", min_length=1, max_length=256)] = None,
    since_ms: EpochMs | None = None,
    until_ms: EpochMs | None = None,
    correlation_id: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LISTING_LIMIT)] = 100,
) -> schemas.EventList:
    """The tenant's stored events matching every given filter, oldest first (kept 7 days).

    ``until_ms`` is exclusive and must not be before ``since_ms``.
    """
    query = EventQuery(
        event_type=event_type,
        correlation_id=correlation_id,
        tenant_id=access.tenant,
        since_ms=since_ms,
        until_ms=until_ms,
        limit=limit,
    )
    found = await console.container.events().list(query)
    return schemas.EventList(items=[_view(event) for event in found])


@router.get("/{event_id}", response_model=schemas.EventView, responses=responses(403, 404, 422))
async def show_event(
    event_id: EventId, access: ViewerAccess, console: ConsoleDep
) -> schemas.EventView:
    """One stored event of the tenant."""
    event = await console.container.events().get(event_id)
    if event is None or event.tenant_id != access.tenant:
        raise UnknownEventError(
            f"no stored event {event_id!r} of tenant {access.tenant!r}: it was never published "
            "for this tenant or its record expired after 7 days; GET /api/v1/events lists them"
        )
    return _view(event)
