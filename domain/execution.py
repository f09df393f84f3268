"""Execution state and its state machine.

An execution is ``pending`` from its acceptance until a worker picks it up (ADR 0022),
``running`` while a worker may advance it, ``suspended`` while it waits for an event or a
timer, and ends ``completed``, ``error`` or ``cancelled``. ``pending`` moves wherever
``running`` moves, and every decision treats it as ``running``. ``error`` absorbs every change
except the explicit wake-up of a retry (W7).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.domain.errors import IllegalTransitionError
from plaita.domain.tokens import OpenFork
from plaita.domain.tracing import ExecutionTrace
from plaita.domain.waits import Suspension as Suspension

JSON = Any


class ExecutionStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    ERROR = "error"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES

    @property
    def advances_on_continue(self) -> bool:
        """A continue carrier moves it on from its checkpoint: ``running`` or ``pending``
        (its checkpoint names the start node). Without one it never moves (W19)."""
        return self in ADVANCING_STATUSES


TERMINAL_STATUSES = frozenset(
    {ExecutionStatus.COMPLETED, ExecutionStatus.ERROR, ExecutionStatus.CANCELLED}
)
ADVANCING_STATUSES = frozenset({ExecutionStatus.PENDING, ExecutionStatus.RUNNING})

_S = ExecutionStatus
_FROM_RUNNING = frozenset({_S.RUNNING, _S.SUSPENDED, _S.COMPLETED, _S.ERROR, _S.CANCELLED})
LEGAL_TRANSITIONS: Mapping[ExecutionStatus, frozenset[ExecutionStatus]] = {
    _S.PENDING: _FROM_RUNNING,
    _S.RUNNING: _FROM_RUNNING,
    # suspended -> suspended: a wait for children counts each child's end and waits on (E14).
    _S.SUSPENDED: frozenset({_S.RUNNING, _S.SUSPENDED, _S.ERROR, _S.CANCELLED}),
    _S.ERROR: frozenset({_S.RUNNING}),
    _S.COMPLETED: frozenset(),
    _S.CANCELLED: frozenset(),
}


def check_transition(current: ExecutionStatus, target: ExecutionStatus) -> None:
    if target not in LEGAL_TRANSITIONS[current]:
        raise IllegalTransitionError(
            f"an execution that is {current.value} cannot become {target.value}"
        )


@attrs.frozen
class ExecutionError:
    """Why an execution ended in ``error``: a code, a message and the node that failed."""

    code: int
    message: str
    node_id: str | None = None
    kind: str = "FlowErrorException"

    def to_json(self) -> dict[str, JSON]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> ExecutionError:
        return cls(
            code=int(raw["code"]),
            message=str(raw["message"]),
            node_id=raw.get("node_id"),
            kind=str(raw.get("kind", "FlowErrorException")),
        )


@attrs.frozen
class ParentLink:
    """The execution (and node) that started a child execution (E13, E14): told when the
    child ends. ``index`` is the child's item in a map; None for a subflow's child."""

    execution_id: str
    flow_id: str
    node_id: str
    index: int | None = None

    def to_json(self) -> dict[str, JSON]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, raw: JSON) -> ParentLink | None:
        if not raw:
            return None
        index = raw.get("index")
        return cls(
            execution_id=str(raw["execution_id"]),
            flow_id=str(raw["flow_id"]),
            node_id=str(raw["node_id"]),
            index=None if index is None else int(index),
        )


#: A failure's message in the state summary is cut to this many characters (the history
#: keeps it too, with the traceback).
MAX_FAILURE_MESSAGE_CHARS = 1_000


@attrs.frozen
class NodeFailure:
    """The last failed attempt of a node that has not succeeded since (ADR 0022).

    ``attempt`` is the attempt that failed, counted across deliveries (E15); ``retry_at_ms`` is
    when the next one is due, None when no retry was scheduled (the execution ended in
    ``error``, or it waits for an operator).
    """

    node_id: str
    attempt: int
    error_class: str
    message: str
    transient: bool
    at_ms: int
    retry_at_ms: int | None = None

    @classmethod
    def of(
        cls,
        *,
        node_id: str,
        attempt: int,
        error_class: str,
        message: str,
        transient: bool,
        at_ms: int,
        retry_at_ms: int | None = None,
    ) -> NodeFailure:
        if len(message) > MAX_FAILURE_MESSAGE_CHARS:
            message = message[: MAX_FAILURE_MESSAGE_CHARS - 1] + "…"
        return cls(node_id, attempt, error_class, message, transient, at_ms, retry_at_ms)

    def to_json(self) -> dict[str, JSON]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> NodeFailure:
        retry_at = raw.get("retry_at_ms")
        return cls(
            node_id=str(raw["node_id"]),
            attempt=int(raw["attempt"]),
            error_class=str(raw["error_class"]),
            message=str(raw["message"]),
            transient=bool(raw["transient"]),
            at_ms=int(raw["at_ms"]),
            retry_at_ms=None if retry_at is None else int(retry_at),
        )


@attrs.frozen
class NodeTiming:
    """When a node's latest run started and ended (ms since the epoch); None = still open.

    A suspended wait keeps its start and has no end until it resumes; a node run again (a
    loop, a retry) keeps only its latest run. The console draws its timeline from these.
    """

    started_at_ms: int
    ended_at_ms: int | None = None

    def to_json(self) -> list[int | None]:
        return [self.started_at_ms, self.ended_at_ms]

    @classmethod
    def from_json(cls, raw: JSON) -> NodeTiming:
        started, ended = raw
        return cls(int(started), None if ended is None else int(ended))


def node_timing(
    previous: NodeTiming | None,
    *,
    started_ms: int,
    now_ms: int,
    resumed: bool,
    suspended: bool,
) -> NodeTiming:
    """The timing a step records for the node it ran.

    A wait that resumes keeps the start of its wait (``resumed``: the execution was suspended
    on it); a node that suspends is still open; any other run is the node's latest run.
    """
    if resumed and previous is not None and previous.ended_at_ms is None:
        started_ms = previous.started_at_ms
    return NodeTiming(started_ms, None if suspended else now_ms)


@attrs.frozen
class ExecutionState:
    """The checkpoint of one execution; every field is JSON-serialisable."""

    execution_id: str
    flow_id: str
    flow_version: str
    fingerprint: str
    status: ExecutionStatus
    created_at_ms: int
    updated_at_ms: int
    tenant_id: str = "default"
    input: Mapping[str, JSON] = attrs.field(factory=dict)
    variables: Mapping[str, JSON] = attrs.field(factory=dict)
    node_results: Mapping[str, JSON] = attrs.field(factory=dict)
    next_node_id: str | None = None
    last_node_id: str | None = None
    last_branch: str | None = None
    suspension: Suspension | None = None
    result: JSON = None
    error: ExecutionError | None = None
    steps: int = 0
    #: sha256 of the graph reachable from the current node when this checkpoint was written:
    #: a later definition change elsewhere in the flow does not strand the run (W7).
    subgraph_fingerprint: str | None = None
    #: The start's dedup key (W6), so a delete can release it (W13); None = started without.
    dedup_key: str | None = None
    #: Node id → its latest run's timing (C2 timeline); stored beside the node's result.
    node_timings: Mapping[str, NodeTiming] = attrs.field(factory=dict)
    #: The last failed attempt of a node not succeeded since, its retry's due time (ADR 0022).
    last_failure: NodeFailure | None = None
    #: Its trace (C6): the root span's context and the span that suspended it last; None =
    #: started with tracing off (or before traces were stored).
    trace: ExecutionTrace | None = None
    #: The execution that started this one as its child (E13, E14); None for any other.
    parent: ParentLink | None = None
    #: The branches of its open ``parallel`` node (E12); None while no fork is open.
    fork: OpenFork | None = None

    @classmethod
    def new(
        cls,
        *,
        execution_id: str,
        flow_id: str,
        flow_version: str,
        fingerprint: str,
        start_node_id: str,
        input: Mapping[str, JSON],
        now_ms: int,
        tenant_id: str = "default",
        status: ExecutionStatus = ExecutionStatus.RUNNING,
    ) -> ExecutionState:
        """A new execution at its start node: ``running`` (a worker's), or ``pending`` (an
        accepted start no worker has picked up yet)."""
        if status not in ADVANCING_STATUSES:
            raise ValueError(f"a new execution is pending or running, not {status}")
        return cls(
            execution_id=execution_id,
            flow_id=flow_id,
            flow_version=flow_version,
            fingerprint=fingerprint,
            status=status,
            created_at_ms=now_ms,
            updated_at_ms=now_ms,
            tenant_id=tenant_id,
            input=dict(input),
            next_node_id=start_node_id,
        )

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    @property
    def waits(self) -> tuple[Suspension, ...]:
        """Every wait it has registered: its suspension, and those of its open branches."""
        found = () if self.fork is None else self.fork.waits
        if self.suspension is not None and self.suspension not in found:
            found = (self.suspension, *found)
        return found

    def wait_of(self, subscription_id: str | None) -> Suspension | None:
        """The wait (of any branch) registered under ``subscription_id``; None if none is."""
        if subscription_id is None:
            return None
        return next((w for w in self.waits if w.subscription_id == subscription_id), None)

    @property
    def stopped_at(self) -> str | None:
        """Where a failed or cancelled execution stopped: its error's node, else its next
        node — where a wake-up (W7) or an operator retry (W23) runs it again."""
        return self.error.node_id if self.error and self.error.node_id else self.next_node_id

    def transition(self, target: ExecutionStatus, *, now_ms: int, **changes: Any) -> ExecutionState:
        """Return the state moved to ``target``; ``IllegalTransitionError`` if not allowed."""
        check_transition(self.status, target)
        if target is not ExecutionStatus.SUSPENDED:
            changes.setdefault("suspension", None)
        return attrs.evolve(self, status=target, updated_at_ms=now_ms, **changes)

    def to_json(self) -> dict[str, JSON]:
        return {
            **self.header_json(),
            "variables": dict(self.variables),
            "node_results": dict(self.node_results),
            "node_timings": {node: t.to_json() for node, t in self.node_timings.items()},
        }

    def header_json(self) -> dict[str, JSON]:
        """``to_json`` without the three maps that grow with the run (the variables, node
        results and node timings): what a checkpoint stores as its header (S3). Each key is
        the name of the attribute it encodes."""
        return {
            "execution_id": self.execution_id,
            "flow_id": self.flow_id,
            "flow_version": self.flow_version,
            "fingerprint": self.fingerprint,
            "status": self.status.value,
            "created_at_ms": self.created_at_ms,
            "updated_at_ms": self.updated_at_ms,
            "tenant_id": self.tenant_id,
            "input": dict(self.input),
            "next_node_id": self.next_node_id,
            "last_node_id": self.last_node_id,
            "last_branch": self.last_branch,
            "suspension": None if self.suspension is None else self.suspension.to_json(),
            "result": self.result,
            "error": None if self.error is None else self.error.to_json(),
            "steps": self.steps,
            "subgraph_fingerprint": self.subgraph_fingerprint,
            "dedup_key": self.dedup_key,
            "last_failure": None if self.last_failure is None else self.last_failure.to_json(),
            "trace": None if self.trace is None else self.trace.to_json(),
            "parent": None if self.parent is None else self.parent.to_json(),
            "fork": None if self.fork is None else self.fork.to_json(),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> ExecutionState:
        suspension = raw.get("suspension")
        error = raw.get("error")
        last_failure = raw.get("last_failure")
        return cls(
            execution_id=raw["execution_id"],
            flow_id=raw["flow_id"],
            flow_version=raw["flow_version"],
            fingerprint=raw.get("fingerprint", ""),
            status=ExecutionStatus(raw["status"]),
            created_at_ms=int(raw["created_at_ms"]),
            updated_at_ms=int(raw["updated_at_ms"]),
            tenant_id=raw.get("tenant_id", "default"),
            input=raw.get("input") or {},
            variables=raw.get("variables") or {},
            node_results=raw.get("node_results") or {},
            next_node_id=raw.get("next_node_id"),
            last_node_id=raw.get("last_node_id"),
            last_branch=raw.get("last_branch"),
            suspension=None if suspension is None else Suspension.from_json(suspension),
            result=raw.get("result"),
            error=None if error is None else ExecutionError.from_json(error),
            steps=int(raw.get("steps", 0)),
            subgraph_fingerprint=raw.get("subgraph_fingerprint"),
            dedup_key=raw.get("dedup_key"),
            node_timings={
                node: NodeTiming.from_json(timing)
                for node, timing in (raw.get("node_timings") or {}).items()
            },
            last_failure=None if last_failure is None else NodeFailure.from_json(last_failure),
            trace=ExecutionTrace.from_json(raw.get("trace")),
            parent=ParentLink.from_json(raw.get("parent")),
            fork=OpenFork.from_json(raw.get("fork")),
        )
