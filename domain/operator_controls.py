"""Operator controls: which action each execution state allows, and where a retry restarts (W23).

Pure decisions, performed by ``application/use_cases/operator_controls.py`` and, for the pause
gate, by the worker step. The control flags live apart from the checkpoint (ADR 0008), so an
operator sets them without the lease; the worker reads them once per dispatch.

 action    running        suspended            error                 completed  cancelled
 pause     pause          pause                refused               refused    refused
 unpause   unpause (also drains parked carriers of any status; no-op when nothing is paused)
 resume    continue       refused: its event   refused: retry it     refused    refused
                          or timer moves it
 cancel    flag + carrier flag + carrier        refused               refused    refused
 retry     conflict       needs --from-node     W7 wake-up, or node   refused    restart at node

What is refused, and why, is ``plaita.domain.operator_actions``'s table (the console offers
its buttons from the same table); "refused" and "conflict" name their reason there, and the
use cases turn them into named errors.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import json
from collections.abc import Collection, Mapping

import attrs

from plaita.domain.budgets import Counter, CounterChange, CounterOp
from plaita.domain.envelope import ResumeType, TaskEnvelope
from plaita.domain.errors import InvalidOperatorRequestError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.operator_actions import ExecutionAction, action_availability

#: Upper bound of one bulk action; larger sweeps run in several calls (the CLI pages).
MAX_BULK_LIMIT = 10_000
#: The largest page of an execution listing (C1: ``limit`` 1..500).
MAX_PAGE_LIMIT = 500


class OperatorAction(enum.StrEnum):
    RESUME = "resume"
    RETRY = "retry"
    CANCEL = "cancel"
    PAUSE = "pause"
    UNPAUSE = "unpause"


class Verdict(enum.StrEnum):
    PROCEED = "proceed"
    #: Nothing to do: already in the asked-for state (idempotent, not an error).
    NO_OP = "no_op"
    REFUSE = "refuse"
    #: A retry of a running execution (HTTP 409): it is being advanced right now.
    CONFLICT = "conflict"


@attrs.frozen
class ControlFlags:
    """An execution's operator flags and how many of its carriers wait parked (W23)."""

    paused: bool = False
    cancel_requested: bool = False
    parked: int = 0

    def to_json(self) -> dict[str, bool | int]:
        return attrs.asdict(self)


@attrs.frozen
class ActionDecision:
    verdict: Verdict
    reason: str
    detail: str

    @property
    def proceeds(self) -> bool:
        return self.verdict is Verdict.PROCEED


class RetryKind(enum.StrEnum):
    #: Error, no node named: enqueue a W7 retry carrier; the worker wakes it up under its caps.
    WAKE_UP = "wake_up"
    #: Under the lease, set it running at ``node_id`` with a fresh budget for that node.
    RESTART = "restart"


@attrs.frozen
class RetryDecision:
    verdict: Verdict
    reason: str
    detail: str
    kind: RetryKind | None = None
    node_id: str | None = None


def _decided(
    action: ExecutionAction, execution_id: str, status: ExecutionStatus, flags: ControlFlags
) -> ActionDecision | None:
    """The table's refusal (or no-op) of ``action``, worded for the caller; None: it can work."""
    rule = action_availability(action, status, flags)
    if rule.available:
        return None
    verdict = Verdict.NO_OP if rule.no_op else Verdict.REFUSE
    if rule.no_op:
        return ActionDecision(verdict, rule.code, f"{execution_id}: {rule.reason}")
    name = action.value.replace("_", " ")
    return ActionDecision(
        verdict,
        rule.code,
        f"cannot {name} execution {execution_id!r}: it is {status.value}. {rule.reason}",
    )


def decide_pause(execution_id: str, status: ExecutionStatus, flags: ControlFlags) -> ActionDecision:
    refused = _decided(ExecutionAction.PAUSE, execution_id, status, flags)
    return refused or ActionDecision(Verdict.PROCEED, "paused", f"pause {execution_id}")


def decide_unpause(
    execution_id: str, status: ExecutionStatus, flags: ControlFlags
) -> ActionDecision:
    """Any status: parked carriers left behind (an unpause that crashed) are drained too."""
    refused = _decided(ExecutionAction.UNPAUSE, execution_id, status, flags)
    return refused or ActionDecision(Verdict.PROCEED, "unpaused", f"unpause {execution_id}")


def decide_cancel(
    execution_id: str, status: ExecutionStatus, flags: ControlFlags
) -> ActionDecision:
    """A repeated cancel proceeds: its carrier replaces one that may have been lost."""
    refused = _decided(ExecutionAction.CANCEL, execution_id, status, flags)
    return refused or ActionDecision(Verdict.PROCEED, "cancel_requested", f"cancel {execution_id}")


def decide_resume_request(
    execution_id: str, status: ExecutionStatus, flags: ControlFlags
) -> ActionDecision:
    """The operator's "resume": a continue carrier for a running execution whose worker went
    away (W19). A suspended one is refused: its event or timer is what moves it."""
    refused = _decided(ExecutionAction.RESUME, execution_id, status, flags)
    return refused or ActionDecision(
        Verdict.PROCEED, "continue_enqueued", f"continue {execution_id}"
    )


def decide_retry(
    state: ExecutionState, *, from_node: str | None, flow_nodes: Collection[str]
) -> RetryDecision:
    """Where a retry restarts; ``flow_nodes`` are the node ids of the execution's flow.

    Without ``from_node``: an execution in error gets the W7 wake-up (its caps apply,
    #73); a cancelled one restarts where it was cancelled; a suspended one must be told where
    to go (its own event or timer is what normally moves it).
    """
    xid, status = state.execution_id, state.status
    action = ExecutionAction.RETRY if from_node is None else ExecutionAction.RETRY_FROM_NODE
    rule = action_availability(action, status, ControlFlags())
    if not rule.available:
        verdict = Verdict.CONFLICT if rule.code == "execution_running" else Verdict.REFUSE
        where = ""
        if status is ExecutionStatus.SUSPENDED:
            waiting = state.suspension.node_id if state.suspension else state.next_node_id
            where = f" at node {waiting!r}"
        hint = " (name the node with --from-node)" if rule.code == "suspended_needs_node" else ""
        return RetryDecision(
            verdict,
            rule.code,
            f"cannot retry execution {xid!r}: it is {status.value}{where}. {rule.reason}{hint}",
        )
    if from_node is None and status is ExecutionStatus.ERROR:
        return RetryDecision(Verdict.PROCEED, "wake_up", f"wake {xid} up", RetryKind.WAKE_UP)
    node = from_node if from_node is not None else state.stopped_at
    if node is None or node not in flow_nodes:
        where = "" if from_node is not None else " (where it was cancelled)"
        known = ", ".join(sorted(flow_nodes))
        return RetryDecision(
            Verdict.REFUSE,
            "unknown_node",
            f"node {node!r}{where} is not in flow {state.flow_id!r} version "
            f"{state.flow_version!r}; name one of its nodes with --from-node: {known}",
        )
    return RetryDecision(
        Verdict.PROCEED, "restart", f"restart {xid} at {node}", RetryKind.RESTART, node
    )


def restart_at(
    state: ExecutionState,
    *,
    node_id: str,
    now_ms: int,
    fingerprint: str,
    subgraph_fingerprint: str,
) -> ExecutionState:
    """``state`` running again at ``node_id``, same id, earlier node results kept (W23).

    The operator's explicit override of terminal absorption: a cancelled or failed execution
    runs again, under the deployed definition (its fingerprint is adopted, so a definition
    fixed after the failure does not count as drift).
    """
    return attrs.evolve(
        state,
        status=ExecutionStatus.RUNNING,
        updated_at_ms=now_ms,
        next_node_id=node_id,
        suspension=None,
        error=None,
        result=None,
        fingerprint=fingerprint,
        subgraph_fingerprint=subgraph_fingerprint,
    )


def restart_counter_changes(node_id: str) -> tuple[CounterChange, ...]:
    """A fresh budget for the restarted node only, retries and crashed attempts alike (W2, W8:
    siblings keep theirs)."""
    return (
        CounterChange(Counter.NODE_RETRIES, CounterOp.RESET, node_id),
        CounterChange(Counter.NODE_CRASHES, CounterOp.RESET, node_id),
    )


def carrier_parkable(envelope: TaskEnvelope) -> bool:
    """A cancel carrier is never parked: cancelling a paused execution must still work."""
    return envelope.resume_type is not ResumeType.CANCEL


def should_park(flags: ControlFlags, *, parkable: bool) -> bool:
    """Park a carrier of a paused execution, unless a cancel was asked for (W23).

    The Redis adapter's ``controls_admit.lua`` applies this same rule atomically with the park.
    """
    return flags.paused and not flags.cancel_requested and parkable


def parked_carrier_id(fields: Mapping[str, str]) -> str:
    """The identity of a parked carrier: the same carrier parked twice is kept once."""
    canonical = json.dumps(dict(fields), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def check_bulk_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_BULK_LIMIT:
        raise InvalidOperatorRequestError(
            f"a bulk limit must be an integer from 1 to {MAX_BULK_LIMIT}, got {limit!r}; "
            "run the action again for the rest"
        )
    return limit


def check_page_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_LIMIT:
        raise InvalidOperatorRequestError(
            f"a page limit must be an integer from 1 to {MAX_PAGE_LIMIT}, got {limit!r}; "
            "follow next_cursor for more"
        )
    return limit


def parse_status(value: str) -> ExecutionStatus:
    try:
        return ExecutionStatus(value)
    except ValueError:
        known = ", ".join(status.value for status in ExecutionStatus)
        raise InvalidOperatorRequestError(
            f"unknown execution status {value!r}; use one of: {known}"
        ) from None


def parse_action(value: str) -> OperatorAction:
    try:
        return OperatorAction(value)
    except ValueError:
        known = ", ".join(action.value for action in OperatorAction)
        raise InvalidOperatorRequestError(
            f"unknown operator action {value!r}; use one of: {known}"
        ) from None


@attrs.frozen
class PageCursor:
    """Where a listing of executions stopped: the last index entry it looked at (C1).

    Newest first by the executions index score (``updated_at_ms``), then id descending; the
    next page starts strictly after this entry, so executions written meanwhile (a higher
    score) never shift it. Opaque to callers: base64 of ``[score, execution_id]``.
    """

    score: int
    execution_id: str

    def encode(self) -> str:
        raw = json.dumps([self.score, self.execution_id], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> PageCursor:
        try:
            padded = text + "=" * (-len(text) % 4)
            score, execution_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
            if isinstance(score, bool) or not isinstance(score, int):
                raise ValueError(score)
            if not isinstance(execution_id, str) or not execution_id:
                raise ValueError(execution_id)
        except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
            raise InvalidOperatorRequestError(
                f"cursor {text!r} is not one this listing returned; pass the next_cursor of "
                "the previous page unchanged, or omit it to start from the newest"
            ) from None
        return cls(score, execution_id)

    def precedes(self, score: int, execution_id: str) -> bool:
        """Whether the entry (``score``, ``execution_id``) comes after this cursor."""
        return (score, execution_id) < (self.score, self.execution_id)
