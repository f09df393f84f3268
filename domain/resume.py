"""Resume policy: what a resume carrier may do to the execution it names (W7).

``decide_resume`` is total and never raises. The worker asks it once before the lease (the
short-circuits cost no lease, #33) and again under the lease with a freshly loaded view,
and performs the second answer: a racing wake-up, a cancel flag or a definition change written
in between is then seen under the same lease as the step (W7 definition drift).

First matching row wins; "live" = running or suspended; caps come from ``WakeUpCaps``.

 #  status + resume type, also                  -> kind, reason                      incident / id
 1  terminal, except error + retry              -> SHORT_CIRCUIT, terminal           #23
 2  error + retry, cancel intent set            -> REFUSE, cancel_requested          W23
 3  error + retry, g1 wake-ups >= cap (2)       -> REFUSE, g1_wakeups_exhausted      #73
 4  error + retry, nofail >= cap (12)           -> REFUSE, deterministic_failure_exhausted
 5  error + retry, breaking drift               -> REFUSE, definition_changed        W7
 6  error + retry                               -> WAKE_UP, wake_up                  #73
 7  live + cancel                               -> CANCEL, cancel                    W23
 8  live + anything else, cancel intent set     -> CANCEL, cancel_requested          W23
 9  suspended + continue/retry                  -> ALREADY_SUSPENDED, already_suspended  #33
 9a suspended + child its map counted already   -> ALREADY_SUSPENDED, child_counted  E14
10  suspended + event/timeout/child, not a wait -> PROTOCOL_ERROR, not_this_suspension  #33 #221
11  live, breaking drift                        -> DEFINITION_DRIFT, definition_changed  W7
12  suspended + event/timeout/child, its wait  -> PROCEED, resume
13  running + continue                          -> PROCEED, continue
14  running + event/timeout, a branch's wait   -> PROCEED, resume                        E12
15  running + retry                             -> PROCEED_AS_CONTINUE, retry_on_running  #53
16  running + event/timeout/child, no wait      -> PROCEED_AS_CONTINUE, stale_carrier     #258

Every row is W7; the last column names the incident (docs/incidents.md) or the other
requirement a row comes from. Rows 2 and 8: a set cancel intent wins over every other answer,
so a cancel whose own carrier was lost still takes effect. Rows 5, 6 and 11 are the flow
definition fingerprints: the check precedes a wake-up (fix the definition, then retry), and a
live execution whose graph ahead changed ends in an observable terminal error.

CANCEL, WAKE_UP, DEFINITION_DRIFT (a terminal error) and both PROCEEDs run under the lease and
the carrier is acked once that step returned; every other kind is acked at once, no lease taken
and the execution left as it is. A wait is "this wait" when the carrier names it (subscription
and/or node) and, for a timeout, a timer is pending; a child carrier's wait is a wait for
children (E13, E14), and which child it names is the step's to judge. The waits are the
suspension's and, while a ``parallel`` node's branches are open, each branch's (E12).
Drift: the fingerprint recorded at start differs from the deployed flow's; when the subgraph
from the current node is unchanged the run goes on with a WARNING, otherwise (or when no
subgraph fingerprint was recorded) it is breaking; a row recorded without a fingerprint
skips the check.
"""

from __future__ import annotations

import enum

import attrs

from plaita.domain.budgets import DETERMINISTIC_FAILURE_MAX as DETERMINISTIC_FAILURE_MAX
from plaita.domain.budgets import G1_MAX_WAKEUPS as G1_MAX_WAKEUPS
from plaita.domain.budgets import CounterChange, WakeupRefusal, decide_wakeup
from plaita.domain.budgets import WakeUpCaps as WakeUpCaps
from plaita.domain.children import MapProgress
from plaita.domain.envelope import ResumeType
from plaita.domain.errors import DefinitionDriftError, PlaitaError, ResumeProtocolError
from plaita.domain.execution import ExecutionState, ExecutionStatus, Suspension


class ResumeKind(enum.StrEnum):
    SHORT_CIRCUIT = "short_circuit"
    ALREADY_SUSPENDED = "already_suspended"
    REFUSE = "refuse"
    PROTOCOL_ERROR = "protocol_error"
    CANCEL = "cancel"
    WAKE_UP = "wake_up"
    DEFINITION_DRIFT = "definition_drift"
    PROCEED = "proceed"
    PROCEED_AS_CONTINUE = "proceed_as_continue"


class ResumeReason(enum.StrEnum):
    TERMINAL = "terminal"
    CANCEL_REQUESTED = "cancel_requested"
    G1_WAKEUPS_EXHAUSTED = WakeupRefusal.G1_WAKEUPS_EXHAUSTED.value
    DETERMINISTIC_FAILURE_EXHAUSTED = WakeupRefusal.DETERMINISTIC_FAILURE_EXHAUSTED.value
    DEFINITION_CHANGED = "definition_changed"
    WAKE_UP = "wake_up"
    CANCEL = "cancel"
    ALREADY_SUSPENDED = "already_suspended"
    CHILD_COUNTED = "child_counted"
    NOT_THIS_SUSPENSION = "not_this_suspension"
    RESUME = "resume"
    CONTINUE = "continue"
    RETRY_ON_RUNNING = "retry_on_running"
    STALE_CARRIER = "stale_carrier"


class DefinitionDrift(enum.StrEnum):
    UNCHECKED = "unchecked"
    NONE = "none"
    TOLERATED = "tolerated"
    BREAKING = "breaking"


_K = ResumeKind
_DEFAULT_CAPS = WakeUpCaps()
_UNDER_LEASE = frozenset(
    {_K.CANCEL, _K.WAKE_UP, _K.DEFINITION_DRIFT, _K.PROCEED, _K.PROCEED_AS_CONTINUE}
)


@attrs.frozen
class WaitView:
    node_id: str
    subscription_id: str | None = None
    timer_pending: bool = False
    #: A subflow's or map's wait for its children (E13, E14).
    children: bool = False
    #: A map's progress: which items it counted as ended already (E14).
    map: MapProgress | None = None


@attrs.frozen
class ExecutionView:
    """What the resume policy reads of an execution; ``node_id`` is where it runs or waits."""

    execution_id: str
    status: ExecutionStatus
    node_id: str | None = None
    wait: WaitView | None = None
    fingerprint: str | None = None
    subgraph_fingerprint: str | None = None
    g1_wakeups: int = 0
    consecutive_failures: int = 0
    cancel_requested: bool = False
    #: Where it stopped, once it ended (``ExecutionState.stopped_at``): a wake-up restarts a
    #: failed one there (W7).
    stopped_at: str | None = None
    #: The waits of its open branches (E12): a running execution's branch may wait too.
    branch_waits: tuple[WaitView, ...] = ()

    @classmethod
    def of(
        cls,
        state: ExecutionState,
        *,
        subgraph_fingerprint: str | None = None,
        g1_wakeups: int = 0,
        consecutive_failures: int = 0,
        cancel_requested: bool = False,
    ) -> ExecutionView:
        held = state.suspension
        wait = None if held is None else _wait_view(held)
        return cls(
            execution_id=state.execution_id,
            status=state.status,
            node_id=state.next_node_id if held is None else held.node_id,
            wait=wait,
            fingerprint=state.fingerprint or None,
            subgraph_fingerprint=subgraph_fingerprint,
            g1_wakeups=g1_wakeups,
            consecutive_failures=consecutive_failures,
            cancel_requested=cancel_requested,
            stopped_at=state.stopped_at if state.is_terminal else None,
            branch_waits=() if state.fork is None else tuple(map(_wait_view, state.fork.waits)),
        )


def _wait_view(held: Suspension) -> WaitView:
    return WaitView(
        held.node_id,
        held.subscription_id,
        held.wake_at_ms is not None,
        held.waits_for_children,
        held.map,
    )


@attrs.frozen
class ResumeRequest:
    resume_type: ResumeType
    subscription_id: str | None = None
    node_id: str | None = None
    event_id: str | None = None
    #: The item a map's child ended for (a ``child`` carrier's), if it names one.
    child_index: int | None = None


@attrs.frozen
class CurrentDefinition:
    """The deployed flow's fingerprint and the one of its graph from the execution's node;
    its start node, where a wake-up restarts an execution that failed before any node."""

    fingerprint: str
    subgraph_fingerprint: str | None = None
    start_node_id: str | None = None


@attrs.frozen
class ResumeDecision:
    """What to do with a resume carrier, and everything needed to do it.

    A wake-up names the counter changes it spends (``counter_changes``: one wake-up more, a
    fresh budget for every node) and the node it restarts at (``restart_node_id``).
    """

    kind: ResumeKind
    reason: ResumeReason
    detail: str
    log_warning: str | None = None
    error: PlaitaError | None = attrs.field(default=None, eq=False)
    counter_changes: tuple[CounterChange, ...] = ()
    restart_node_id: str | None = None

    @property
    def take_lease(self) -> bool:
        return self.kind in _UNDER_LEASE

    @property
    def ack(self) -> bool:
        """Ack at once, nothing to perform; otherwise ack only once the step returned (W1)."""
        return not self.take_lease

    @property
    def fresh_node_budget(self) -> bool:
        """Clear the node retry counters: a woken execution gets a whole budget (W7 wake-up)."""
        return self.kind is ResumeKind.WAKE_UP


def compare_definitions(execution: ExecutionView, current: CurrentDefinition) -> DefinitionDrift:
    if not execution.fingerprint:
        return DefinitionDrift.UNCHECKED
    if execution.fingerprint == current.fingerprint:
        return DefinitionDrift.NONE
    recorded = execution.subgraph_fingerprint
    if recorded and recorded == current.subgraph_fingerprint:
        return DefinitionDrift.TOLERATED
    return DefinitionDrift.BREAKING


def decide_resume(
    execution: ExecutionView,
    request: ResumeRequest,
    current: CurrentDefinition,
    caps: WakeUpCaps = _DEFAULT_CAPS,
) -> ResumeDecision:
    status, kind, xid = execution.status, request.resume_type, execution.execution_id
    drift = compare_definitions(execution, current)
    if status is ExecutionStatus.ERROR and kind is ResumeType.RETRY:
        return _wake_up(execution, drift, current, caps)
    if status.is_terminal:
        return ResumeDecision(ResumeKind.SHORT_CIRCUIT, ResumeReason.TERMINAL, f"{xid} is {status}")
    if kind is ResumeType.CANCEL:
        return ResumeDecision(ResumeKind.CANCEL, ResumeReason.CANCEL, f"cancel {xid}")
    if execution.cancel_requested:
        # Short-circuiting here would ack the carrier and leave a suspended run with its
        # cancel intent forever, should the cancel carrier be lost.
        return ResumeDecision(ResumeKind.CANCEL, ResumeReason.CANCEL_REQUESTED, f"cancel {xid}")
    if status is ExecutionStatus.SUSPENDED:
        if kind in (ResumeType.CONTINUE, ResumeType.RETRY):
            # A duplicate continue used to be turned into an error, ending a recoverable wait.
            detail = f"{xid} is suspended; only its event, timer or a cancel wakes it"
            return ResumeDecision(
                ResumeKind.ALREADY_SUSPENDED, ResumeReason.ALREADY_SUSPENDED, detail
            )
        if not _names_a_wait(request, execution):
            return _protocol_error(execution, request)
        if _counted_already(request, execution.wait):
            # A duplicate, or a copy of a notice the parent's own look found first.
            detail = f"{xid} counted item {request.child_index} already"
            return ResumeDecision(ResumeKind.ALREADY_SUSPENDED, ResumeReason.CHILD_COUNTED, detail)
    if drift is DefinitionDrift.BREAKING:
        return _drifted(ResumeKind.DEFINITION_DRIFT, execution, current)
    warning = _drift_warning(execution, current, drift)
    if status is ExecutionStatus.SUSPENDED:
        return ResumeDecision(ResumeKind.PROCEED, ResumeReason.RESUME, f"{kind} {xid}", warning)
    if kind is ResumeType.CONTINUE:
        return ResumeDecision(ResumeKind.PROCEED, ResumeReason.CONTINUE, f"continue {xid}", warning)
    if kind is not ResumeType.RETRY and _names_a_wait(request, execution):
        # A branch's wait while another branch runs (E12): it is this carrier's to resume.
        return ResumeDecision(ResumeKind.PROCEED, ResumeReason.RESUME, f"{kind} {xid}", warning)
    if kind is ResumeType.RETRY:
        # Refusing (or silently dropping) it made "retry" look accepted while nothing ran (#53).
        retry_warning = (
            f"event=resume.retry_on_running execution_id={xid}: the execution is running, so the "
            "retry continues from its checkpoint; if it stays stuck, cancel it and start anew"
        )
        return ResumeDecision(
            ResumeKind.PROCEED_AS_CONTINUE,
            ResumeReason.RETRY_ON_RUNNING,
            f"retry {xid} as continue",
            _join(retry_warning, warning),
        )
    # Redelivered after the step that consumed it was checkpointed: continue, never replay.
    return ResumeDecision(
        ResumeKind.PROCEED_AS_CONTINUE,
        ResumeReason.STALE_CARRIER,
        f"{kind} for running {xid} becomes continue",
        warning,
    )


def _wake_up(
    execution: ExecutionView, drift: DefinitionDrift, current: CurrentDefinition, caps: WakeUpCaps
) -> ResumeDecision:
    xid, refuse = execution.execution_id, ResumeKind.REFUSE
    if execution.cancel_requested:
        return ResumeDecision(refuse, ResumeReason.CANCEL_REQUESTED, f"{xid} is to be cancelled")
    # Without these caps, wake -> fresh budget -> fail -> wake burnt a sandbox 5 times a day (#73).
    wake = decide_wakeup(
        wakeups=execution.g1_wakeups, no_fail_streak=execution.consecutive_failures, caps=caps
    )
    if wake.refusal is not None:
        detail = _refusal_detail(execution, wake.refusal, caps)
        return ResumeDecision(refuse, ResumeReason(wake.refusal.value), detail)
    if drift is DefinitionDrift.BREAKING:
        # It stays in error, so a retry after the definition is restored still wakes it.
        return _drifted(refuse, execution, current)
    warning = _drift_warning(execution, current, drift)
    return ResumeDecision(
        ResumeKind.WAKE_UP,
        ResumeReason.WAKE_UP,
        f"wake {xid} up",
        warning,
        counter_changes=wake.counter_changes,
        # Where it stopped; a failure before any node (a start that never checkpointed) starts
        # again from the start node.
        restart_node_id=execution.stopped_at or current.start_node_id,
    )


def _refusal_detail(execution: ExecutionView, refusal: WakeupRefusal, caps: WakeUpCaps) -> str:
    xid = execution.execution_id
    if refusal is WakeupRefusal.G1_WAKEUPS_EXHAUSTED:
        return (
            f"{xid} was woken {execution.g1_wakeups} times (cap {caps.max_wakeups}); fix the "
            "cause, reset its g1wakeups counter, then retry"
        )
    return (
        f"{xid} failed {execution.consecutive_failures} times in a row (cap "
        f"{caps.max_consecutive_failures}); fix the cause, reset its nofail counter, then retry"
    )


def _counted_already(request: ResumeRequest, wait: WaitView | None) -> bool:
    """A ``child`` carrier for an item its map counted as ended already (E14)."""
    if request.resume_type is not ResumeType.CHILD or request.child_index is None:
        return False
    return wait is not None and wait.map is not None and wait.map.has_ended(request.child_index)


def _names_a_wait(request: ResumeRequest, execution: ExecutionView) -> bool:
    waits = (execution.wait, *execution.branch_waits)
    return any(_names_this_wait(request, wait) for wait in waits)


def _names_this_wait(request: ResumeRequest, wait: WaitView | None) -> bool:
    if wait is None:
        return False
    if request.resume_type is ResumeType.CHILD:
        return wait.children and request.node_id in (None, wait.node_id)
    if request.subscription_id is None and request.node_id is None:
        return False
    if request.node_id not in (None, wait.node_id):
        return False
    if request.resume_type is ResumeType.EVENT:
        return (
            request.subscription_id is not None and request.subscription_id == wait.subscription_id
        )
    return wait.timer_pending and request.subscription_id in (None, wait.subscription_id)


def _protocol_error(execution: ExecutionView, request: ResumeRequest) -> ResumeDecision:
    wait = execution.wait
    where = "nothing" if wait is None else f"node {wait.node_id!r} ({wait.subscription_id})"
    message = (
        f"execution {execution.execution_id} waits on {where}; a {request.resume_type} carrier "
        f"for subscription {request.subscription_id} node {request.node_id} event "
        f"{request.event_id} does not belong to it: acked, the execution is left as it is"
    )
    return ResumeDecision(
        ResumeKind.PROTOCOL_ERROR,
        ResumeReason.NOT_THIS_SUSPENSION,
        message,
        error=ResumeProtocolError(message),
    )


def _drifted(
    kind: ResumeKind, execution: ExecutionView, current: CurrentDefinition
) -> ResumeDecision:
    message = (
        f"execution {execution.execution_id}: the flow definition changed since start "
        f"(fingerprint {execution.fingerprint} -> {current.fingerprint}) and the graph from node "
        f"{execution.node_id!r} differs, so it cannot continue safely; restore the definition "
        "and retry, or start a new execution"
    )
    error = DefinitionDriftError(message)
    return ResumeDecision(kind, ResumeReason.DEFINITION_CHANGED, message, error=error)


def _drift_warning(
    execution: ExecutionView, current: CurrentDefinition, drift: DefinitionDrift
) -> str | None:
    if drift is not DefinitionDrift.TOLERATED:
        return None
    return (
        f"event=resume.definition_drift_tolerated execution_id={execution.execution_id} "
        f"recorded={execution.fingerprint} current={current.fingerprint}: the graph from node "
        f"{execution.node_id!r} is unchanged, so the run goes on under the new definition"
    )


def _join(first: str, second: str | None) -> str:
    return first if second is None else f"{first}; {second}"
