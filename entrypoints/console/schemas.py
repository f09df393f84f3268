"""The console API's request and response documents (C1); they are its OpenAPI schema.

Requests forbid unknown fields, so a typo (``flowid``) is a 422 naming it rather than a
silently ignored value. Responses mirror the domain's ``to_json`` views.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from plaita.domain.execution import ExecutionStatus
from plaita.domain.execution_query import MAX_CONDITION_CHARS
from plaita.domain.flow import FlowDocument
from plaita.domain.flow_versions import LatestReason
from plaita.domain.ids import ID_PATTERN, MAX_ID_LENGTH
from plaita.domain.operator_controls import MAX_BULK_LIMIT, OperatorAction
from plaita.domain.priorities import Priority
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.console.auth import TENANT_PATTERN

JSON = Any

TenantId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=TENANT_PATTERN,
        description="The tenant the request acts for (letters, digits, '_', '.', '-').",
    ),
]
#: Names the API takes from a caller: non-empty, bounded, no control characters.
Name = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")]
_ID_RULE = (
    f"An id: letters, digits, '_', '.', ':' and '-', starting with a letter or digit, at most "
    f"{MAX_ID_LENGTH} characters."
)
#: Execution, event and flow ids, in a body, a path or a query: the id rule (an id with '/'
#: or a space could never be addressed again).
Id = Annotated[
    str, Field(min_length=1, max_length=MAX_ID_LENGTH, pattern=ID_PATTERN, description=_ID_RULE)
]
IdPath = Annotated[
    str, Path(min_length=1, max_length=MAX_ID_LENGTH, pattern=ID_PATTERN, description=_ID_RULE)
]
IdQuery = Annotated[
    str, Query(min_length=1, max_length=MAX_ID_LENGTH, pattern=ID_PATTERN, description=_ID_RULE)
]

#: The latest time the API takes (the year 9999), in ms since the epoch.
MAX_EPOCH_MS = 253_402_300_800_000
_CREATED_FROM = "Only executions created at or after this time (ms since the epoch)."
_CREATED_TO = "Only executions created at or before this time (ms since the epoch)."
_INPUT_CONDITION = (
    "Only executions whose input holds this field and value, written `path = value`: "
    "`customer.id = 42` (keys separated by dots; the value as JSON, or the text typed, which "
    'also finds a string field: 42 finds 42 and "42").'
)
CreatedFromQuery = Annotated[int | None, Query(ge=0, le=MAX_EPOCH_MS, description=_CREATED_FROM)]
CreatedToQuery = Annotated[int | None, Query(ge=0, le=MAX_EPOCH_MS, description=_CREATED_TO)]
InputConditionQuery = Annotated[
    str | None,
    Query(
        alias="input", min_length=1, max_length=MAX_CONDITION_CHARS, description=_INPUT_CONDITION
    ),
]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Response(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


# --- errors -------------------------------------------------------------------------------


class FieldError(_Response):
    loc: list[str | int] = Field(description="Where the problem is, e.g. ['body', 'flow_id'].")
    msg: str


class ErrorBody(_Response):
    error: str = Field(description="The error's name, e.g. UnknownExecutionError.")
    message: str = Field(description="What was wrong and what to do about it.")
    field_errors: list[FieldError] | None = Field(
        default=None, description="One entry per invalid field (422 only)."
    )


# --- health -------------------------------------------------------------------------------


class Health(_Response):
    status: Literal["ok"]


class Readiness(_Response):
    status: Literal["ready", "unavailable"]
    reason: str | None = None


# --- executions ---------------------------------------------------------------------------


class StartExecutionRequest(_Request):
    flow_id: Id
    version: Name | None = Field(default=None, description="Default: the latest registered.")
    input: dict[str, JSON] = Field(default_factory=dict)
    dedup_key: Name | None = Field(
        default=None, description="Starting twice with one key starts once (7 days, W6)."
    )
    execution_id: Id | None = Field(default=None, description="Default: a new uuid.")
    target_instance_id: Id | None = Field(
        default=None,
        description="Run it on this worker instance (its consumer name); other workers pass "
        "it on, and run it themselves when that one is not running (W25).",
    )
    priority: Priority = Field(
        default=Priority.NORMAL,
        description="Which carriers workers take first: high, normal or low; of every 10 "
        "taken while all three wait, 7 are high, 2 normal and 1 low.",
    )
    tenant: TenantId = DEFAULT_TENANT


class StartedExecutionView(_Response):
    execution_id: str
    flow_id: str
    version: str
    deduplicated: bool


class ExecutionErrorView(_Response):
    code: int
    message: str
    node_id: str | None
    kind: str


class ChildrenProgressView(_Response):
    """Where a map node waiting for its children stands (E14)."""

    total: int = Field(description="Its items: one child each.")
    started: int = Field(description="Children started so far, in item order.")
    succeeded: int
    failed: int


class WaitingFor(_Response):
    node_id: str
    subscription_id: str | None
    wake_at_ms: int | None = Field(
        description="When its timer fires; for a wait for children, the parent's own check on them."
    )
    child_id: str | None = Field(
        default=None, description="The child execution a subflow node waits for."
    )
    children: ChildrenProgressView | None = Field(
        default=None, description="How far the children a map node waits for are."
    )


class HeldBackView(_Response):
    """Why an execution waits for room to run: a limit kept its carrier (flow control)."""

    reason: Literal[
        "concurrency", "rate_limit", "tenant_quota", "tenant_suspended", "tenant_status_stale"
    ] = Field(
        description="concurrency: its flow's concurrency key is full; rate_limit: a node's rate "
        "limit has no token yet; tenant_quota: its tenant runs as many executions as allowed; "
        "tenant_suspended: its tenant is suspended; tenant_status_stale: its tenant's status "
        "was written under another deployment epoch."
    )
    detail: str = Field(description="What it waits for and what frees it, in one sentence.")
    since_ms: int = Field(description="When the limit kept it, in ms since the epoch.")
    key: str | None = Field(description="The concurrency key, rate-limit key or tenant.")
    holders: list[str] = Field(description="The executions holding the slots it waits for.")
    limit: int | None = Field(description="How many may run at once (or the burst).")
    due_ms: int | None = Field(description="When it runs again at the latest, if known.")


class ParentView(_Response):
    """The execution whose ``subflow`` or ``map`` node started this one (E13, E14)."""

    execution_id: str
    node_id: str = Field(description="The parent's node that started it.")
    index: int | None = Field(description="Its item in the parent's map; null for a subflow.")


class NodeFailureView(_Response):
    """The last failed attempt of a node that has not succeeded since."""

    node_id: str
    attempt: int = Field(description="The attempt that failed, counted across deliveries.")
    error_class: str
    message: str
    transient: bool = Field(description="Retried with a delay; a non-transient error is not.")
    at_ms: int
    retry_at_ms: int | None = Field(
        description="When the next attempt is due; null when none is scheduled."
    )


# An execution's summary wherever it appears (C8): its status (``pending`` from its
# acceptance), its last error, and the attempt, error and next retry time of a failing node.
class ExecutionSummary(_Response):
    execution_id: str
    flow_id: str
    flow_version: str
    tenant_id: str
    status: ExecutionStatus
    paused: bool = Field(description="An operator paused it: it takes no new step (W23).")
    cancel_requested: bool = Field(description="A cancel was asked; the worker performs it.")
    parked: int = Field(description="Carriers parked while it is paused.")
    next_node_id: str | None
    last_node_id: str | None
    created_at_ms: int
    updated_at_ms: int
    error: ExecutionErrorView | None
    last_failure: NodeFailureView | None = None
    parent_id: str | None = Field(
        default=None,
        description="The execution whose subflow or map node started it; null for any other.",
    )


NodeStatus = Literal["completed", "failed", "running", "waiting"]


class TimelineEntry(_Response):
    node_id: str
    started_at_ms: int | None = Field(
        description="Null when the checkpoint predates per-node timings."
    )
    ended_at_ms: int | None = Field(description="Null while the node runs or waits.")
    status: NodeStatus


class ActionAvailabilityView(_Response):
    available: bool = Field(description="Whether the action can work on the execution now.")
    reason: str = Field(description="Why it cannot, for an operator; empty when it can.")


class ExecutionDetail(ExecutionSummary):
    input: dict[str, JSON]
    variables: dict[str, JSON] = Field(
        description="The flow's variables as the last step left them."
    )
    result: JSON
    node_results: dict[str, JSON]
    steps: int
    waiting_for: WaitingFor | None
    held_back: HeldBackView | None = Field(
        default=None,
        description="Why it waits for room to run (a concurrency key, a rate limit, its "
        "tenant's quota or status); null when no limit holds it back.",
    )
    parent: ParentView | None = Field(
        description="The execution and node that started it as a child; null for any other."
    )
    timeline: list[TimelineEntry]
    actions: dict[str, ActionAvailabilityView] = Field(
        description="Each operator action (resume, retry, retry_from_node, cancel, pause, "
        "unpause, publish_event, delete) and whether it can work now; the action's endpoint "
        "refuses the unavailable ones with the same reason. Roles are not taken into account."
    )


class ExecutionPage(_Response):
    items: list[ExecutionSummary]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


class HistoryEntryView(_Response):
    seq: int = Field(description="Position in the execution's history, from 1.")
    at_ms: int = Field(description="When it happened, in ms since the epoch.")
    kind: str = Field(
        description="started, node_started, node_finished, node_failed, retry_scheduled, "
        "rate_limited, suspended, event_received, timer_fired, lease_lost, fenced, "
        "operator_action, ended."
    )
    node_id: str | None
    attempt: int | None
    worker: str | None = Field(description="The worker instance that wrote it, if a worker did.")
    detail: dict[str, Any] = Field(description="The facts of the kind (see docs/operations.md).")


class HistoryPageView(_Response):
    entries: list[HistoryEntryView]
    next_cursor: int | None = Field(
        description="Pass as ?after= for the next page; null once this page reached the newest."
    )
    dropped: int = Field(description="How many of the oldest entries the cap dropped.")


class ActionRequest(_Request):
    tenant: TenantId = DEFAULT_TENANT


class RetryRequest(ActionRequest):
    from_node: Name | None = Field(
        default=None, description="Run again from this node (W23); default: where it failed."
    )


class ActionResult(_Response):
    execution_id: str
    action: OperatorAction
    outcome: str = Field(
        description="What the action did: paused, already_paused, unpaused, not_paused, "
        "cancel_requested, continue_enqueued, wake_up_enqueued or restarted."
    )
    status: ExecutionStatus = Field(description="The status as the action left it.")
    paused: bool
    cancel_requested: bool
    parked: int
    detail: str
    requeued: int = Field(description="Parked carriers enqueued again (unpause).")
    node_id: str | None = Field(description="The node a retry restarts at.")


class BulkRequest(_Request):
    action: OperatorAction
    flow_id: Id | None = None
    status: ExecutionStatus | None = None
    created_from_ms: StrictInt | None = Field(
        default=None, ge=0, le=MAX_EPOCH_MS, description=_CREATED_FROM
    )
    created_to_ms: StrictInt | None = Field(
        default=None, ge=0, le=MAX_EPOCH_MS, description=_CREATED_TO
    )
    input_condition: str | None = Field(
        default=None,
        alias="input",
        min_length=1,
        max_length=MAX_CONDITION_CHARS,
        description=_INPUT_CONDITION,
    )
    tenant: TenantId = DEFAULT_TENANT
    dry_run: StrictBool = Field(default=False, description="Only count and list the matches.")
    limit: StrictInt = Field(default=100, ge=1, le=MAX_BULK_LIMIT)


class BulkFailure(_Response):
    execution_id: str
    error: str


class BulkResult(_Response):
    action: OperatorAction
    dry_run: bool
    matched: int
    done: int
    failed: list[BulkFailure]
    outcomes: dict[str, int] = Field(description="How many executions had each outcome.")
    execution_ids: list[str] = Field(description="The matching executions, newest first.")


class TombstoneView(_Response):
    tenant_id: str
    deleted_at_ms: int
    reason: str


class DeletedExecutionView(_Response):
    execution_id: str
    tombstone: TombstoneView
    deleted_now: bool
    revoked_holder: str | None
    removed_subscription: str | None
    tombstone_ttl_seconds: int | None
    released_dedup_key: str | None


# --- events -------------------------------------------------------------------------------


class PublishEventRequest(_Request):
    event_type: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^\S(.*\S)?$")]
    correlation_id: Name | None = Field(
        default=None, description="Usually the waiting execution's id."
    )
    data: dict[str, JSON] = Field(default_factory=dict)
    source: Name | None = "console"
    tenant: TenantId = DEFAULT_TENANT


class EventView(_Response):
    event_id: str
    event_type: str
    timestamp_ms: int
    data: dict[str, JSON]
    correlation_id: str | None
    source: str | None
    tenant_id: str


class EventList(_Response):
    items: list[EventView]


# --- queue, DLQ, workers, config ----------------------------------------------------------


class QueueView(_Response):
    stream_length: int
    pending: int
    dlq_length: int
    delayed: int
    lag_ms: int | None = Field(
        description="How long the oldest carrier no worker has read yet has waited (ms); "
        "0 when every carrier was read."
    )


class DeadLetterView(_Response):
    dlq_id: str
    message_id: str
    reason: str
    kind: str | None
    execution_id: str | None
    flow_id: str | None
    resume_type: str | None
    tenant_id: str | None
    schema_version: str | None
    replayed: dict[str, JSON] | None
    raw: dict[str, str]
    raw_base64: list[list[str]] | None = Field(
        default=None,
        description="The carrier's exact bytes when they were not UTF-8 (raw shows them "
        "\\x-escaped): its (field name, value) pairs, each base64-encoded.",
    )


class DeadLetterList(_Response):
    items: list[DeadLetterView]


class ReplayResultView(_Response):
    dlq_id: str
    outcome: Literal[
        "replayed",
        "already_replayed",
        "schema_too_new",
        "execution_deleted",
        "execution_ended",
        "tenant_mismatch",
    ]
    execution_id: str | None
    message_id: str | None
    detail: str


class ReplayRefusal(ErrorBody):
    """409 of a replay: the error body plus the replay's outcome (W10)."""

    outcome: str
    dlq_id: str
    execution_id: str | None


class WorkerView(_Response):
    instance_id: str
    status: str
    heartbeat_age_ms: int
    started_ms: int
    config_family: str
    config_generation: str
    budget_generation: str


class WorkerList(_Response):
    items: list[WorkerView]


# --- flows --------------------------------------------------------------------------------


class FlowOwnerFields(_Response):
    tenant_id: str | None = Field(
        description="The tenant whose own definition this is; null for a deployment-wide one."
    )
    shared: bool = Field(
        description="A deployment-wide definition: every tenant without its own copy runs it."
    )


class FlowSummary(FlowOwnerFields):
    flow_id: str
    version: str
    fingerprint: str
    node_count: int


class FlowList(_Response):
    items: list[FlowSummary]


class GraphNode(_Response):
    id: str
    type: str
    label: str


class GraphEdge(_Response):
    from_: str = Field(alias="from", serialization_alias="from")
    to: str
    label: str


class FlowGraph(_Response):
    nodes: list[GraphNode]
    edges: list[GraphEdge]


class FlowVersionList(FlowOwnerFields):
    flow_id: str
    latest_version: str = Field(description="The version an execution runs when none is named.")
    versions: list[str] = Field(description="Every registered version, highest first.")


class FlowDetail(FlowOwnerFields):
    flow_id: str
    version: str
    fingerprint: str
    document: dict[str, JSON]
    graph: FlowGraph


class RegisterFlowRequest(FlowDocument):
    """A flow definition document (E1), plus whose it is: the tenant the request acts for,
    or ``shared`` for a deployment-wide definition (an admin of every tenant only)."""

    tenant: TenantId = DEFAULT_TENANT
    shared: StrictBool = Field(
        default=False,
        description="Register deployment-wide: every tenant without its own copy runs it. "
        "Needs an admin token of every tenant ('*'); give no tenant with it.",
    )
    latest: StrictBool = Field(
        default=False,
        description="Make this version the catalogue's latest even when a higher version is "
        "registered (a rollback; also for a version already registered). Without it the "
        "version becomes the latest only when it is higher in the version order.",
    )

    @model_validator(mode="after")
    def _one_owner(self) -> RegisterFlowRequest:
        if self.shared and "tenant" in self.model_fields_set:
            raise ValueError(
                "give either tenant (that tenant's own definition) or shared (deployment-wide)"
            )
        return self


class RegisteredFlow(FlowOwnerFields):
    flow_id: str
    version: str
    fingerprint: str
    created: bool = Field(
        description="False when this very document was already registered (200): the "
        "document was not stored again."
    )
    latest_version: str = Field(description="The catalogue's latest version after this request.")
    is_latest: bool = Field(description="This version is the catalogue's latest now.")
    latest_reason: LatestReason = Field(
        description="Why the latest is what it is: first (no version was the latest), already "
        "(this version was), higher (higher than the latest, so it moved), lower (the latest is "
        "higher and stays: send latest=true to choose this one), chosen (latest=true)."
    )


class FlowVersionConflict(ErrorBody):
    """409: another document is registered under this version; nothing was written."""

    flow_id: str
    version: str
    registered_fingerprint: str
    given_fingerprint: str


class Identity(_Response):
    """Who a token is: GET /api/v1/whoami."""

    name: str
    role: str
    tenants: list[str]
