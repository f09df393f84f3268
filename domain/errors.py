"""Named errors of the plaita domain.

Every error says what was wrong and, where it helps, what to do about it. Callers catch the
family (``FlowDefinitionError``, ``ExecutionStateError`` …) or the exact name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plaita.domain.execution import ExecutionError


class PlaitaError(Exception):
    """Root of every error plaita raises on purpose."""


# --- flow definitions (E1) -------------------------------------------------------------


class FlowDefinitionError(PlaitaError):
    """A flow definition is not valid; nothing was registered or run."""


class InvalidFlowDocumentError(FlowDefinitionError):
    """The document is not a flow definition (bad JSON, wrong field types, unknown type)."""


class InvalidForkError(FlowDefinitionError):
    """A fork's branches or join are not usable: fewer than two branches, one named twice,
    a node that does not exist, a branch that is the join or the fork itself (E12)."""


class BranchDoesNotReachJoinError(FlowDefinitionError):
    """A branch of a fork has no path to its join (E12)."""


class BranchLeavesWithoutJoinError(FlowDefinitionError):
    """A branch of a fork can end, or return to its fork, before it reaches the join (E12)."""


class BranchesCrossError(FlowDefinitionError):
    """A branch of a fork runs into the start of another branch (E12)."""


class NodeInTwoBranchesError(FlowDefinitionError):
    """A node is reachable from two branches of one fork before their join (E12)."""


class TokenStateError(PlaitaError):
    """A branch token was asked to do what its state does not allow (advance a waiting or
    arrived token, run a join that is not due): a bug of the caller, never of the flow."""


class InvalidChildNodeError(FlowDefinitionError):
    """A subflow or map node cannot start its children: the child flow id is not an id, a
    map's concurrency is out of bounds, or its ``items`` is not an expression (E13, E14)."""


class InvalidConcurrencyError(FlowDefinitionError):
    """A flow's ``concurrency`` cannot be used: its limit is not an integer from 1 to
    10,000, or its key is not an expression (E1a)."""


class ConcurrencyKeyError(PlaitaError):
    """A flow's concurrency key expression failed on an execution's input: the execution
    cannot be given a slot, so it fails instead of running unlimited (E1a)."""


class InvalidHttpNodeError(FlowDefinitionError):
    """An http node's method, static url, header names or ``expect`` cannot be used."""


class InvalidRateLimitError(FlowDefinitionError):
    """A task or http node's ``rate_limit`` cannot be used: ``per_second`` is not a number
    above 0 and at most the maximum, ``burst`` is not a whole number of at least 1, or
    ``key`` is not a non-empty expression (W23)."""


class RateLimitsUnavailableError(FlowDefinitionError):
    """A node has a ``rate_limit`` but the run was built without rate buckets (an embedding
    that passed none): it fails rather than run unlimited (W23)."""


class RateLimitKeyError(FlowDefinitionError):
    """A node's ``rate_limit.key`` expression failed when rendered at run time (an unknown
    name, a type error): the node fails, as with any bad expression (W23)."""


class DuplicateNodeIdError(FlowDefinitionError):
    """Two nodes share one id."""


class MissingStartNodeError(FlowDefinitionError):
    """``start`` names no node of the flow."""


class UnknownNodeTargetError(FlowDefinitionError):
    """A node points (``next``, ``then``, ``cases`` …) at a node that does not exist."""


class EmptyEventTypeError(FlowDefinitionError):
    """An ``event`` node has an empty ``event_type``."""


class InvalidTimeoutError(FlowDefinitionError):
    """A timeout or duration is negative, non-finite, too large or not parseable."""


class InvalidHandlerReferenceError(FlowDefinitionError):
    """A task handler is not written as ``module:function``."""


class HandlerNotAllowedError(FlowDefinitionError):
    """A task names a handler module outside the worker's ``--handler-modules`` allowlist."""


class InvalidExpressionError(FlowDefinitionError):
    """A condition or parameter expression does not parse."""


# --- executions ---------------------------------------------------------------------


class ExecutionStateError(PlaitaError):
    """An execution cannot do what was asked in the state it is in."""


class IllegalTransitionError(ExecutionStateError):
    """The execution state machine forbids this status change."""


class ExecutionIdConflictError(ExecutionStateError):
    """The execution id already belongs to an execution of another flow (W6)."""


class ResumeProtocolError(ExecutionStateError):
    """A resume carrier does not belong to the checkpoint it met (W7)."""


class ExecutionLeaseError(PlaitaError):
    """A write was fenced off: this holder's lease generation is no longer current (W4)."""


class LeaseLostError(ExecutionLeaseError):
    """The holder could not renew its lease in time and fenced itself off (W3)."""


class LeaseConflictError(ExecutionLeaseError):
    """Another holder owns the execution's lease right now (W3)."""


class UnknownFlowError(PlaitaError):
    """No flow definition is registered under this id (and version)."""


class FlowVersionConflictError(PlaitaError):
    """Another document is already registered under this (flow_id, version) for this owner;
    a registered version is immutable, so nothing was written (S2)."""

    def __init__(
        self,
        message: str,
        *,
        flow_id: str,
        version: str,
        registered_fingerprint: str,
        given_fingerprint: str,
    ) -> None:
        super().__init__(message)
        self.flow_id = flow_id
        self.version = version
        self.registered_fingerprint = registered_fingerprint
        self.given_fingerprint = given_fingerprint


class FlowLatestContendedError(PlaitaError):
    """The latest pointer of a flow kept moving under a registration's compare-and-set; the
    version is stored, and registering it again applies the latest rule again (S2)."""


class UnknownExecutionError(PlaitaError):
    """No execution is stored under this id."""


class SchemaVersionError(PlaitaError):
    """A task envelope carries a schema version this build does not understand (W11)."""


class InvalidEnvelopeError(PlaitaError):
    """A task envelope is malformed; it is dead-lettered with its raw fields (R4)."""


class InvalidEventError(PlaitaError):
    """An event or subscription is not valid (V1)."""


class UnknownHandlerError(FlowDefinitionError):
    """A task's handler cannot be imported or is not a callable of its module."""


class UnboundedWaitError(FlowDefinitionError):
    """A run that nothing can publish to meets an event node without a timeout."""


class SuspensionRegistrationError(PlaitaError):
    """A wait could not register its way to wake up; the step fails instead of suspending (E6)."""


class DefinitionDriftError(ExecutionStateError):
    """The flow changed since start and the graph reachable from the current node differs (W7)."""


class InvalidDedupKeyError(PlaitaError):
    """A start dedup key or its tenant is empty; an empty key would dedup unrelated starts (W6)."""


class ScheduleDedupError(PlaitaError):
    """A scheduled start's dedup key cannot be built: empty id, bad due or request id (W22)."""


# --- bad input at every boundary: ids and JSON limits ------------------------------------


class InvalidIdError(PlaitaError):
    """An id (execution, event, flow, schedule) is empty, too long or holds a character
    outside the id alphabet. Such an id could not be addressed later (a ``/`` in a URL path,
    a brace in a Redis hash tag), so it is refused wherever it enters."""


class InvalidExecutionIdError(InvalidIdError):
    """An execution id breaks the id rule."""


class InvalidEventIdError(InvalidIdError, InvalidEventError):
    """An event id breaks the id rule."""


class InvalidFlowIdError(InvalidIdError, FlowDefinitionError):
    """A flow id breaks the id rule; the flow was not registered."""


class InvalidScheduleIdError(InvalidIdError, ScheduleDedupError):
    """A schedule id breaks the id rule; no dedup key was built for it."""


class InvalidTargetInstanceError(InvalidIdError):
    """A carrier's ``target_instance_id`` (the worker a start asks for, W25) breaks the id
    rule; nothing was started."""


class InvalidPriorityError(PlaitaError):
    """A start's ``priority`` is not one of ``high``, ``normal``, ``low``; nothing was
    started."""


class InvalidHandoverCountError(PlaitaError):
    """A carrier's hand-over count (how often workers passed it on towards its target, W25)
    is not a whole number of at least 0."""


class PayloadLimitError(PlaitaError):
    """A JSON document (execution input, event data, node result, task envelope) is nested
    deeper or is larger than plaita accepts, or is not Unicode text; the message names the
    field and the limit."""


class PayloadTooDeepError(PayloadLimitError):
    """A JSON document nests objects and arrays deeper than its depth limit."""


class PayloadTooLargeError(PayloadLimitError):
    """A JSON document is larger, as compact UTF-8 JSON, than its size limit."""


class PayloadNotUnicodeError(PayloadLimitError):
    """A string of a JSON document holds a lone surrogate (half of a UTF-16 pair, as a
    broken decoder or a ``\\ud800`` escape leaves it): no store can keep it as UTF-8."""


class InvalidConfigurationError(PlaitaError):
    """Start-up settings are invalid; the message lists every problem at once (W21)."""


class InvalidRedisUrlError(InvalidConfigurationError):
    """A Redis URL (``--redis-url``, ``PLAITA_REDIS_URL``) whose scheme is not one a Redis
    client opens: ``redis://``, ``rediss://`` (TLS) or ``unix://`` (a socket)."""


class InvalidTenantIdError(PlaitaError):
    """A tenant id is empty, too long or holds a character a Redis key namespace cannot (W24)."""


class TenantContextMissingError(PlaitaError):
    """Execution data was touched outside a tenant scope; plaita fails closed (W24)."""


class TenantMismatchError(PlaitaError):
    """A record of one tenant was written or acted on in another tenant's scope (W24)."""


class InvalidRetryPolicyError(PlaitaError):
    """An event handler's RetryPolicy has a negative or non-finite setting (V3)."""


class InvalidEventQueryError(PlaitaError):
    """An event or subscription listing was asked with an impossible filter or limit (V7)."""


# --- the event bus (V3, V9) -------------------------------------------------------------


class EventBusError(PlaitaError):
    """The event bus refused an operation or failed to carry it out (V3, V9)."""


class InvalidHandlerError(EventBusError):
    """An event handler registration is unusable: empty pattern, not callable, or no id."""


class DuplicateHandlerError(EventBusError):
    """A handler id is already registered on this bus; ids name handlers in logs and marks."""


class EventBusClosedError(EventBusError):
    """The bus was closed (or is closing): it takes no new publishes, waits or handlers (V9)."""


class EventBusCloseError(EventBusError):
    """A teardown step of ``close()`` failed; call ``close()`` again to retry what is left (V9)."""


class CloseFromHandlerError(EventBusError):
    """``close()`` was called from inside one of the bus's own handlers (V9).

    The close would wait for the very dispatch that calls it; close the bus from the code
    that owns it instead.
    """


class PublishSyncInLoopError(EventBusError):
    """``publish_sync`` was called on a thread whose event loop is running; await ``publish``."""


class PublishSyncTimeoutError(EventBusError):
    """The bus's loop did not finish a ``publish_sync`` in time; the event may still land."""


class UnknownEventError(PlaitaError):
    """No stored event has this id: it never existed or its record expired (7 days, V7)."""


class SubscriptionWriteConflictError(PlaitaError):
    """A subscription kept changing under an add or remove; nothing was written (V7)."""


# --- inbound webhooks (V10) ------------------------------------------------------------


class HookError(PlaitaError):
    """Root of the inbound webhook errors (V10)."""


class HookDefinitionError(HookError):
    """A webhook definition is not valid (a field, the hooks file); nothing was stored."""


class HooksFileError(HookDefinitionError):
    """The hooks file (``PLAITA_HOOKS_FILE``) cannot be read or holds a definition that is not
    valid; the message names every problem, and the console does not start."""


class UnknownHookError(HookError):
    """No webhook is defined under this name (for this tenant)."""


class HookConflictError(HookError):
    """A webhook of this name exists already, or is defined by the hooks file (which the
    API cannot change); nothing was stored or deleted."""


class HookSignatureError(HookError):
    """A webhook request is not authenticated (401): nothing was published."""


class MissingHookSignatureError(HookSignatureError):
    """The request lacks the hook's signature or timestamp header."""


class InvalidHookSignatureError(HookSignatureError):
    """The signature is not the HMAC-SHA256 of this timestamp and body under the hook's
    secret: another secret, another body, or not a signature at all."""


class StaleHookTimestampError(HookSignatureError):
    """The signed timestamp is older than the hook's replay window."""


class FutureHookTimestampError(HookSignatureError):
    """The signed timestamp is further ahead of this clock than the allowed skew."""


class HookReplayError(HookSignatureError):
    """This timestamp and signature were accepted before, within the replay window."""


class HookPayloadError(HookError):
    """A signed request's body cannot be read by the hook's mapping (400): not JSON, or the
    correlation id or data is missing or of the wrong kind."""


class HookPointerMissingError(HookPayloadError):
    """The body has nothing at one of the hook's JSON pointers."""


class HookBodyTooLargeError(HookError):
    """A webhook request's body is over the hooks' size cap (413)."""


class HookSecretUnavailableError(HookError):
    """The hook's secret reference does not resolve here (an unset variable, an unreadable
    or too short file): no request can be verified until the operator fixes it (503)."""


# --- operator controls (W23) and execution listing (C1) -----------------------------------


class OperatorActionRefusedError(ExecutionStateError):
    """An operator action (pause, cancel, retry …) is not allowed in the execution's state (W23)."""


class ExecutionRunningError(OperatorActionRefusedError):
    """A retry was asked of a running execution: it is being advanced; cancel it first (W23)."""


class UnknownNodeError(PlaitaError):
    """A retry names a node that its execution's flow does not have (W23)."""


class InvalidOperatorRequestError(PlaitaError):
    """A bulk action or a listing was asked with an unknown action, bad limit or cursor (W23)."""


class InvalidChildCursorError(InvalidOperatorRequestError):
    """A listing of a parent's children was given a cursor that is not one of its pages'
    ``next_cursor`` (``<node_id>:<index>`` of a subflow or map node, E13, E14)."""


# --- SQL storage (S4) ---------------------------------------------------------------------


class InvalidDatabaseUrlError(InvalidConfigurationError):
    """A database URL names no database plaita's SQL storage can use (S4)."""


class DatabaseSchemaError(PlaitaError):
    """The database's schema is missing or not at a revision plaita knows; run
    ``plaita db upgrade`` (S4)."""


# --- the Python API (import plaita) -----------------------------------------------------


class HandlerNotImportableError(FlowDefinitionError):
    """A callable given as a task handler cannot be imported back by its name (a lambda, a
    nested function, a method, a function defined in ``__main__``): a worker could not find
    it, so the flow is refused while it is being built."""


class ExecutionFailedError(PlaitaError):
    """``result()`` of an execution that ended in error: ``error`` is the recorded error
    (code, message, the node that failed, its kind)."""

    def __init__(self, message: str, *, execution_id: str, error: ExecutionError | None) -> None:
        super().__init__(message)
        self.execution_id = execution_id
        self.error = error


class ResultTimeoutError(PlaitaError):
    """``result(timeout=…)`` waited that long and the execution had not ended; it goes on."""

    def __init__(self, message: str, *, execution_id: str, status: str | None) -> None:
        super().__init__(message)
        self.execution_id = execution_id
        self.status = status


class SyncClientInEventLoopError(PlaitaError):
    """A ``SyncClient`` method was called from inside a running event loop, which it would
    block; use ``Client`` (async) there."""


class ClientClosedError(PlaitaError):
    """A ``Client`` was used outside ``async with`` (not opened yet, or already closed)."""


class StoreUnreachableError(PlaitaError):
    """A ``Client`` could not reach its Redis (or its database) when it opened."""


class WorkerAttachError(PlaitaError):
    """A ``Worker`` cannot run on this ``Client``: another worker already runs on it, or
    the client is not open."""


# --- plaita dev (C4) --------------------------------------------------------------------


class DevTokenRequiredError(InvalidConfigurationError):
    """``plaita dev`` was asked to listen beyond this machine (a ``--host`` that is not a
    loopback address) without a token: its console would let anyone on the network act as an
    admin of every tenant."""


class DevServerError(PlaitaError):
    """The CLI cannot use the ``plaita dev`` it was sent to (``--dev``, the control socket of
    the current directory): nothing answers there, or it runs another plaita version."""


class DevServerUnreachableError(DevServerError):
    """No ``plaita dev`` answers on the control socket (not started, or stopped and its
    socket left behind)."""


class DevServerMismatchError(DevServerError):
    """The ``plaita dev`` on the control socket runs another plaita version or protocol than
    this CLI, so the two cannot exchange values."""


class DevServerRunningError(DevServerError):
    """Another ``plaita dev`` already serves the control socket of this directory."""


class InvalidExecutionQueryError(InvalidOperatorRequestError):
    """An execution search was asked with a filter that cannot be read: an empty time range,
    an input condition that is not ``path = value`` (C1). ``parameter`` names the filter."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter


# --- cron schedules (W22) ------------------------------------------------------------------


class InvalidScheduleError(PlaitaError):
    """A schedule cannot be created as given. ``setting`` names the value that is wrong (the
    cron expression, the time zone, a policy, the input), the message what to give instead."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        #: The request field it came from, as the console names it in ``field_errors``.
        self.parameter = setting


class InvalidCronExpressionError(InvalidScheduleError):
    """The cron expression cannot be read, is random (``R``), or names no time that comes."""


class UnknownTimeZoneError(InvalidScheduleError):
    """The time zone is not an IANA zone name this machine's time zone database knows."""


class InvalidSchedulePolicyError(InvalidScheduleError):
    """The overlap or catch-up policy is not one plaita knows."""


class InvalidScheduleInputError(InvalidScheduleError):
    """The input of the executions a schedule starts is not a JSON object (or not JSON)."""


class UnknownScheduleError(PlaitaError):
    """No schedule of that id exists for the tenant."""


class ScheduleExistsError(PlaitaError):
    """A schedule of that id exists already for the tenant; nothing was changed."""


# --- tenant lifecycle and quota (W24, flow control) ------------------------------------------


class InvalidTenantQuotaError(PlaitaError):
    """A tenant's ``max_running`` is not an integer from 1 to 1,000,000 (or none)."""


class TenantActionRefusedError(PlaitaError):
    """A tenant action the rules refuse (suspending the default tenant); nothing changed."""


class TenantWriteConflictError(PlaitaError):
    """A tenant's status record kept changing under a write's compare-and-set; nothing was
    written: run the command again."""
