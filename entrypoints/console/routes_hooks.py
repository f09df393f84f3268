"""Inbound webhooks (V10): ``POST /hooks/{name}`` for senders, ``/api/v1/hooks`` for admins.

``/hooks/{name}`` takes no console token: the request's HMAC signature under the hook's
secret is what authenticates it (``plaita.domain.hook_requests`` states the scheme). It
publishes the event and answers 202 at once — a worker resumes the waiting execution later.
A refused request publishes nothing: 404 unknown hook, 401 missing, wrong, stale or replayed
signature, 400 a body the hook's mapping cannot read, 413 a body over the hooks' cap, 503 a
secret that does not resolve on this console.

``/api/v1/hooks`` lists, shows, creates and deletes the hooks of a tenant (admin tokens);
a hook's secret is never shown, only where it is kept (``secret_source``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from plaita.application.actor import actor_scope
from plaita.application.use_cases.hooks import ListedHook
from plaita.domain.errors import HookError
from plaita.domain.hook_requests import MAX_HOOK_BODY_BYTES
from plaita.domain.hooks import (
    DEFAULT_REPLAY_WINDOW_SECONDS,
    DEFAULT_SIGNATURE_HEADER,
    DEFAULT_TIMESTAMP_HEADER,
    parse_hook,
)
from plaita.domain.ids import ID_PATTERN, MAX_ID_LENGTH
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.console import schemas
from plaita.entrypoints.console.auth import Admin, AdminAccess, api_actor, authorize_tenant
from plaita.entrypoints.console.context import ConsoleDep, responses
from plaita.entrypoints.console.errors import error_response, status_of

receiver = APIRouter(tags=["hooks"])
admin = APIRouter(prefix="/api/v1/hooks", tags=["hooks"])

HookName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_ID_LENGTH,
        pattern=ID_PATTERN,
        description="The hook's name (the id rule).",
    ),
]


class HookAccepted(BaseModel):
    event_id: str
    hook: str
    event_type: str
    correlation_id: str | None
    tenant_id: str


class HookView(BaseModel):
    name: str
    event_type: str
    tenant: str
    correlation_id_pointer: str
    data_pointer: str
    secret_source: str = Field(
        description="'stored' (kept with the hook), 'env:NAME' or 'file:PATH'; never the secret."
    )
    signature_header: str
    timestamp_header: str
    replay_window_seconds: int
    source: str = Field(description="'file' (the hooks file, read-only) or 'api'.")


class HookList(BaseModel):
    items: list[HookView]


class CreateHookRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: StrictStr = Field(description="The hook's name: POST /hooks/{name} (the id rule).")
    event_type: StrictStr = Field(description="The type of the event each request publishes.")
    tenant: StrictStr = DEFAULT_TENANT
    correlation_id_pointer: StrictStr = Field(
        description="JSON pointer (RFC 6901) to the correlation id in the body, e.g. '/order/id'."
    )
    data_pointer: StrictStr = Field(
        default="", description="JSON pointer to the event's data (an object); '' = the body."
    )
    secret: StrictStr | None = Field(
        default=None, description="The secret itself (at least 16 characters); never shown."
    )
    secret_ref: StrictStr | None = Field(
        default=None, description="Where the console finds the secret: 'env:NAME' or 'file:PATH'."
    )
    signature_header: StrictStr = DEFAULT_SIGNATURE_HEADER
    timestamp_header: StrictStr = DEFAULT_TIMESTAMP_HEADER
    replay_window_seconds: StrictInt = DEFAULT_REPLAY_WINDOW_SECONDS


_RECEIVER_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": schemas.ErrorBody, "description": description}
    for status, description in {
        400: "The body is not JSON, or lacks what the hook's mapping reads (named).",
        401: "Missing, wrong, stale or replayed signature; nothing was published.",
        404: "No hook of this name.",
        413: f"The body is over {MAX_HOOK_BODY_BYTES} bytes (or the console's limit).",
        503: "The hook's secret does not resolve on this console, or a store did not answer.",
    }.items()
}


@receiver.post(
    "/hooks/{name}",
    status_code=202,
    response_model=HookAccepted,
    responses=_RECEIVER_RESPONSES,
)
async def receive_hook(name: HookName, request: Request, console: ConsoleDep) -> Any:
    """Publish the event a signed request maps to (no console token: the signature is the
    authentication). Answers 202 with the event id once the event is stored."""
    body = await request.body()
    try:
        event = await console.container.receive_hook()(name, request.headers, body)
    except HookError as refused:
        return error_response(status_of(refused), type(refused).__name__, str(refused))
    return JSONResponse(
        HookAccepted(
            event_id=event.event_id,
            hook=name,
            event_type=event.event_type,
            correlation_id=event.correlation_id,
            tenant_id=event.tenant_id,
        ).model_dump(),
        status_code=202,
    )


def _view(listed: ListedHook) -> HookView:
    return HookView.model_validate({**listed.hook.describe(), "source": listed.source.value})


@admin.get("", response_model=HookList, responses=responses(403, 422))
async def list_hooks(access: AdminAccess, console: ConsoleDep) -> HookList:
    """The tenant's hooks, by name: the hooks file's and those created here."""
    found = await console.container.hook_catalog().list(access.tenant)
    return HookList(items=[_view(listed) for listed in found])


@admin.post("", status_code=201, response_model=HookView, responses=responses(403, 409, 422))
async def create_hook(body: CreateHookRequest, token: Admin, console: ConsoleDep) -> HookView:
    """Create a hook; its secret is stored (``secret``) or referenced (``secret_ref``)."""
    authorize_tenant(token, body.tenant)
    hook = parse_hook(body.model_dump(exclude_none=True), label=f"hook {body.name!r}")
    with actor_scope(api_actor(token)):
        created = await console.container.hook_catalog().create(hook)
    return _view(created)


@admin.get("/{name}", response_model=HookView, responses=responses(403, 404, 422))
async def show_hook(name: HookName, access: AdminAccess, console: ConsoleDep) -> HookView:
    """One hook of the tenant, without its secret."""
    return _view(await console.container.hook_catalog().show(name, access.tenant))


@admin.delete("/{name}", response_model=HookView, responses=responses(403, 404, 409, 422))
async def delete_hook(name: HookName, access: AdminAccess, console: ConsoleDep) -> HookView:
    """Delete a hook created through the API (a hook of the hooks file is refused, 409)."""
    with actor_scope(api_actor(access.token)):
        deleted = await console.container.hook_catalog().delete(name, access.tenant)
    return _view(deleted)
