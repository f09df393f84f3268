"""R1: a stateful model of one execution, its carriers and its workers, driven by domain/ alone.

The model keeps a small world of its own: the stored checkpoint, the fence generation counter,
the lease (holder, generation, expiry on a model clock), the carriers on the stream (pending or
not, with delivery counts) and in the delay queue, the subscriptions, the node retry and crash
counters with the open attempt a dispatch records under its lease (W2),
the tombstone, the dead-letter queue and three workers that crash, pause (SIGSTOP), lose their
link to Redis, drain and restart. Every decision a worker takes is asked of the pure domain —
``gate``, ``decide_start``, ``decide_dedup_claim``, ``decide_resume``, ``decide_conflict``,
``judge_write``, ``decide_renewal``, ``decide_crashed_attempts``, ``decide_node_failure``,
``on_node_success``,
``decide_wakeup``, ``guard_dead_letter``, ``decide_replay``, ``record_delete``,
``check_carrier_age`` — and performed in the order the requirements give. Each rule first
predicts the answer from the requirements' words (docs/requirements.md) and the model's own
facts (which suspension a carrier was made for, which nodes a definition edit touched), so a
decision table that drifts from the requirements fails here, shrunk to the interleaving that
shows it.

The flow loops, so stale carriers can meet a later visit of the same wait:

    a (task) -> wait (event, timeout 60 s -> nap) -> b (task) -> done (end)
    nap (sleep 5 s) -> a             side (end, unreachable; edited to drift harmlessly)
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from plaita.domain.budgets import (
    NODE_RETRY_TOTAL_MAX,
    Counter,
    CounterChange,
    CounterOp,
    FailureAction,
    FailureKind,
    TerminalReason,
    attempt_number,
    classify_step_failure,
    crash_budget_spent,
    decide_crashed_attempts,
    decide_node_failure,
    decide_wakeup,
    failed_node_of,
    on_node_success,
)
from plaita.domain.dead_letter import (
    DlqEntry,
    ExecutionLookup,
    GuardAction,
    LeaseLookup,
    ReplayOutcome,
    decide_replay,
    guard_dead_letter,
    replay_timestamp_ms,
)
from plaita.domain.dedup import (
    DedupHolder,
    HolderCarrier,
    StartKind,
    StartRequest,
    StoredExecution,
    decide_dedup_claim,
    decide_start,
)
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope, copy_envelope
from plaita.domain.errors import (
    DefinitionDriftError,
    ExecutionLeaseError,
    ResumeProtocolError,
    SuspensionRegistrationError,
)
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus, Suspension
from plaita.domain.failures import (
    CODE_CANCELLED,
    DeterministicNodeError,
    ExecutionDeadlineError,
    FlowErrorException,
    NodeExecutionError,
    NodeTimeoutError,
    ResourceExhaustedNodeError,
    TransientNodeError,
)
from plaita.domain.flow import Flow
from plaita.domain.lease import (
    RenewalAction,
    RenewalOutcome,
    WriteVerdict,
    check_fenced_write,
    decide_renewal,
    judge_write,
    next_generation,
)
from plaita.domain.lease_conflict import (
    ConflictCarrier,
    HolderStatus,
    conflict_carrier,
    decide_conflict,
    holder_status,
)
from plaita.domain.resume import (
    DETERMINISTIC_FAILURE_MAX,
    G1_MAX_WAKEUPS,
    CurrentDefinition,
    DefinitionDrift,
    ExecutionView,
    ResumeDecision,
    ResumeKind,
    ResumeRequest,
    compare_definitions,
    decide_resume,
)
from plaita.domain.tombstone import (
    DispatchPath,
    GateAction,
    Tombstone,
    check_carrier_age,
    gate,
    record_delete,
)

S = ExecutionStatus
XID = "x-1"
FLOW_ID = "approval"
TENANT = "acme"
DEDUP_KEY = "order-42"
DLQ_KEY = "plaita:dlq"

TTL_MS = 120_000  # --lease-ttl-seconds 120 (W3)
CLAIM_MIN_IDLE_MS = 60_000  # --claim-min-idle-ms (W2)
#: --max-deliveries of a run: low values make spent budgets, the dead-letter guard and
#: replays reachable within 30 steps; 5 (the default) lets the backoff grow.
MAX_DELIVERIES = st.sampled_from([1, 2, 3, 5])
#: The model's tasks set no retryTimes: they take the deployment default (E15), drawn here.
RETRY_TIMES = st.sampled_from([0, 1, 2, 5])
#: A registry record outlives its last heartbeat by a few heartbeats; ``stopped`` one by 5 s.
REGISTRY_KEY_TTL_MS = 30_000
STOPPED_KEY_TTL_MS = 5_000
WAIT_TIMEOUT_MS = 60_000
SLEEP_MS = 5_000
#: Every model time is a whole second, so the watchdog's float arithmetic stays exact.
SECOND = 1_000

WORKERS = ("w1", "w2", "w3")
TASKS = {"a": "wait", "b": "done"}  # task -> next
NODE_TYPE = {"a": "task", "wait": "event", "nap": "sleep", "b": "task", "done": "end"}
#: Where a resume leaves a wait: (node, resume type) -> next node.
RESUMED_TO = {("wait", ResumeType.EVENT): "b", ("wait", ResumeType.TIMEOUT): "nap"}
RESUMED_TO[("nap", ResumeType.TIMEOUT)] = "a"
_LOOP = frozenset({"a", "wait", "nap", "b", "done"})
#: Written by hand from the graph above: the oracle for the subgraph fingerprint (W7).
REACHABLE = {"a": _LOOP, "wait": _LOOP, "nap": _LOOP, "b": frozenset({"b", "done"})}
REACHABLE["done"] = frozenset({"done"})
#: Definition variants deployed in place (same version): which nodes each one edited.
EDITS: tuple[frozenset[str], ...] = (
    frozenset(),
    frozenset({"side"}),
    frozenset({"b"}),
    frozenset({"side", "b"}),
)


def _definition(edits: frozenset[str]) -> Flow:
    b_params = {"express": True} if "b" in edits else {}
    side_output = "'edited'" if "side" in edits else None
    return Flow.from_document(
        {
            "flow_id": FLOW_ID,
            "version": "1",
            "start": "a",
            "nodes": [
                {"id": "a", "type": "task", "handler": "shop.handlers:prepare", "next": "wait"},
                {
                    "id": "wait",
                    "type": "event",
                    "event_type": "approval_decision",
                    "timeout": WAIT_TIMEOUT_MS,
                    "timeout_next": "nap",
                    "next": "b",
                },
                {"id": "nap", "type": "sleep", "duration": SLEEP_MS, "next": "a"},
                {
                    "id": "b",
                    "type": "task",
                    "handler": "shop.handlers:ship",
                    "params": b_params,
                    "next": "done",
                },
                {"id": "done", "type": "end"},
                {"id": "side", "type": "end", "output": side_output},
            ],
        }
    )


FLOWS = tuple(_definition(edits) for edits in EDITS)
SUBGRAPH = {(v, node): FLOWS[v].subgraph_fingerprint(node) for v in range(4) for node in NODE_TYPE}

RETRY_ACTIONS = (
    FailureAction.PERSIST,
    FailureAction.RELEASE_LEASE,
    FailureAction.SCHEDULE_COPY,
    FailureAction.ACK_ORIGINAL,
)
EXHAUSTED_ACTIONS = (
    FailureAction.TERMINALISE,
    FailureAction.RELEASE_LEASE,
    FailureAction.DEAD_LETTER,
)
FAILED_ACTIONS = (
    FailureAction.TERMINALISE,
    FailureAction.RELEASE_LEASE,
    FailureAction.ACK_ORIGINAL,
)
#: What an operator does, weighted so most runs live long enough to be interesting.
OPERATOR_ACTIONS = st.sampled_from([*["continue"] * 4, *["retry"] * 4, "cancel", "delete"])
#: Redeployed definition variants: half keep the run's path (none or an unrelated edit).
REDEPLOYS = st.sampled_from([0, 1, 0, 1, 2, 3])
#: A supervisor restarts a dead or drained worker this long after it went down.
RESTART_AFTER_MS = 10_000
#: Where a worker crashes in a multi-write step: None = it does not; i = before action i.
CRASH_POINTS = st.one_of(st.none(), st.none(), st.integers(0, 3))
FAILURES = {
    "transient": FailureKind.TRANSIENT,
    "resource_exhausted": FailureKind.TRANSIENT,
    "deterministic": FailureKind.DETERMINISTIC,
    "value_error": FailureKind.DETERMINISTIC,
    "node_timeout": FailureKind.TERMINAL,
    "deadline": FailureKind.TERMINAL,
}

#: A planned node outcome; success is listed thrice so runs get past the first nodes.
OUTCOMES = st.sampled_from(["success", "success", "success", *sorted(FAILURES), "registration"])


def _step_error(failure: str, node: str) -> BaseException:
    """What a distributed step raises: FlowErrorException over the node's own error (E8)."""
    inner: BaseException
    if failure == "node_timeout":
        inner = NodeTimeoutError(f"node {node!r} timed out", node_id=node)
    elif failure == "deadline":
        inner = ExecutionDeadlineError("the execution deadline passed", node_id=node)
    elif failure == "registration":
        inner = SuspensionRegistrationError(f"node {node!r}: the subscription store is down")
    else:
        cause: BaseException = {
            "transient": TransientNodeError("the shop API answered 503"),
            "resource_exhausted": ResourceExhaustedNodeError("rate limited"),
            "deterministic": DeterministicNodeError("no such order"),
            "value_error": ValueError("amount is negative"),
        }[failure]
        inner = NodeExecutionError(f"node {node!r} failed", node_id=node)
        inner.__cause__ = cause
    outer = FlowErrorException(str(inner), node_id=node)
    outer.__cause__ = inner
    return outer


@attrs.define
class Carrier:
    cid: int
    envelope: TaskEnvelope
    #: When it entered the stream: its stream id's time (W14).
    stream_ms: int
    #: The suspension (model serial) an event or timer carrier was made for.
    made_for: int | None = None
    #: Due time while in the delay queue; None once on the stream.
    due_ms: int | None = None
    #: The consumer it is pending on; None while nobody has read it.
    consumer: str | None = None
    deliveries: int = 0
    idle_since_ms: int = 0
    #: For a copy: the timestamp of the carrier it was copied from (W14: copies keep age).
    source_timestamp_ms: int | None = None

    @property
    def resume_type(self) -> ResumeType | None:
        return self.envelope.resume_type


@attrs.define
class Dispatch:
    """A worker's dispatch under the lease: what it holds and believes."""

    carrier_id: int
    generation: int
    #: The checkpoint as this worker last loaded or wrote it.
    state: ExecutionState | None
    #: The definition variant this dispatch loaded; its checkpoints record its subgraph.
    variant: int
    last_renewed_ms: int
    next_attempt_ms: int
    released: bool = False


@attrs.define
class Worker:
    slot: str
    incarnation: int = 1
    alive: bool = True
    paused: bool = False
    partitioned: bool = False
    draining: bool = False
    dispatch: Dispatch | None = None
    down_since_ms: int = 0

    @property
    def holder_id(self) -> str:
        return f"{self.slot}.{self.incarnation}"


@attrs.define
class LeaseRecord:
    holder_id: str
    generation: int
    expires_ms: int


@attrs.define
class DeadLetter:
    dlq_id: str
    carrier: Carrier
    at_ms: int
    replayed: bool = False


class ExecutionModel(RuleBasedStateMachine):
    """R1: random interleavings of deliveries, duplicates, crashes, pauses, lease expiries,
    node outcomes, events, timers, cancels, retries, deletes, replays and definition drift.

    Hypothesis draws each step's rule from a list sorted by (targets, arity, name) and
    favours the two ends of it; the rule that advances the execution sorts first and the
    one that hands carriers to workers last, so runs get past the first node instead of
    stalling in chaos.
    """

    fences = Bundle("fences")

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.row: ExecutionState | None = None
        #: The suspension serial of the stored checkpoint (model-side identity of a wait).
        self.row_serial: int | None = None
        self.fencegen: int | None = None
        self.recorded_fence: int | None = None
        self.lease: LeaseRecord | None = None
        self.stream: dict[int, Carrier] = {}
        self.delay: dict[int, Carrier] = {}
        self.next_cid = 0
        self.subscriptions: set[str] = set()
        self.past_subscriptions: dict[str, int] = {}
        self.next_serial = 0
        self.node_retries: dict[str, int] = {}
        self.node_crashes: dict[str, int] = {}
        #: The lease generation of the dispatch that began and has not ended (W2).
        self.open_attempt: int | None = None
        self.total_retries = 0
        self.wakeups = 0
        self.no_fail = 0
        self.cancel_requested = False
        self.tombstone: Tombstone | None = None
        self.dlq: list[DeadLetter] = []
        self.dedup_claims: dict[str, tuple[str, int]] = {}
        self.workers = {slot: Worker(slot) for slot in WORKERS}
        self.registry: dict[str, tuple[str, int, int]] = {
            w.holder_id: ("running", 0, REGISTRY_KEY_TTL_MS) for w in self.workers.values()
        }
        self.deployed = 0
        self.started_variant = 0
        #: The variant whose subgraph fingerprint the stored checkpoint recorded.
        self.row_variant = 0
        self.legacy_row = False
        self.registry_enabled = True
        self.max_deliveries = 5
        self.retry_times = 5
        self.dedup_key: str | None = None
        # What the invariants compare against.
        self.seen_fencegen: int | None = None
        self.seen_row: ExecutionState | None = None
        self.seen_wakeups = 0
        self.landed_generations: list[int] = []
        self.after_delete: list[str] = []
        self.dropped: list[str] = []

    # --- set-up -------------------------------------------------------------------------

    @initialize(
        target=fences,
        registry_enabled=st.booleans(),
        with_dedup_key=st.booleans(),
        legacy_row=st.integers(0, 4).map(lambda n: n == 0),
        read_at_once=st.integers(0, 3).map(lambda n: n > 0),
        max_deliveries=MAX_DELIVERIES,
        retry_times=RETRY_TIMES,
    )
    def client_starts_the_execution(
        self,
        registry_enabled: bool,
        with_dedup_key: bool,
        legacy_row: bool,
        read_at_once: bool,
        max_deliveries: int,
        retry_times: int,
    ) -> MultipleResults[int]:
        """W6: StartExecution enqueues one start carrier, with its dedup key if any; usually a
        worker reads it at once (swarm testing turns the read rule off in half the runs)."""
        self.registry_enabled = registry_enabled
        self.max_deliveries = max_deliveries
        self.retry_times = retry_times
        self.legacy_row = legacy_row
        self.dedup_key = DEDUP_KEY if with_dedup_key else None
        start = TaskEnvelope.start(
            execution_id=XID,
            flow_id=FLOW_ID,
            version="1",
            params={"order": 42},
            now_ms=self.now,
            tenant_id=TENANT,
            dedup_key=self.dedup_key,
            generations=LEGACY_GENERATIONS,
        )
        carrier = self._enqueue(start)
        if not read_at_once:
            return multiple()
        return self._deliver(self.workers[WORKERS[0]], carrier, reclaimed=False)

    # --- the world's plumbing -----------------------------------------------------------

    def _enqueue(
        self,
        envelope: TaskEnvelope,
        *,
        made_for: int | None = None,
        due_ms: int | None = None,
        source: Carrier | None = None,
    ) -> Carrier:
        self.next_cid += 1
        carrier = Carrier(
            self.next_cid,
            envelope,
            stream_ms=self.now if due_ms is None else due_ms,
            made_for=made_for,
            due_ms=due_ms,
            source_timestamp_ms=None if source is None else source.envelope.timestamp_ms,
        )
        (self.stream if due_ms is None else self.delay)[carrier.cid] = carrier
        return carrier

    def _copy(self, source: Carrier, *, due_ms: int | None = None) -> Carrier:
        """A carrier the worker writes in place of ``source`` (W8 retry, W9 clone, W10 replay)."""
        if self.tombstone is not None:
            self.after_delete.append(f"copy of carrier {source.cid} made")
        return self._enqueue(
            copy_envelope(source.envelope),
            made_for=source.made_for,
            due_ms=due_ms,
            source=source,
        )

    def _ack(self, cid: int) -> None:
        self.stream.pop(cid, None)

    def _ack_unperformed(self, carrier: Carrier) -> None:
        """Ack a carrier nothing was done for; note it if it still meant something."""
        kind, row = carrier.resume_type, self.row
        live = row is not None and not row.is_terminal and self.tombstone is None
        wakes_this_wait = (
            kind in (ResumeType.EVENT, ResumeType.TIMEOUT)
            and live
            and carrier.made_for is not None
            and carrier.made_for == self.row_serial
        )
        if wakes_this_wait or (kind is ResumeType.CANCEL and live):
            self.dropped.append(f"{kind} carrier {carrier.cid} acked unperformed")
        self._ack(carrier.cid)

    def _lease_valid(self) -> bool:
        return self.lease is not None and self.now < self.lease.expires_ms

    def _lease_is(self, worker: Worker, at_ms: int) -> bool:
        d = worker.dispatch
        lease = self.lease
        return (
            d is not None
            and lease is not None
            and lease.holder_id == worker.holder_id
            and lease.generation == d.generation
            and at_ms < lease.expires_ms
        )

    def _registry_status(self, holder_id: str) -> str | None:
        entry = self.registry.get(holder_id)
        if entry is None or self.now - entry[1] >= entry[2]:
            return None
        return entry[0]

    def _heartbeat_age_ms(self, holder_id: str) -> int | None:
        if self._registry_status(holder_id) is None:
            return None
        return self.now - self.registry[holder_id][1]

    def _ready_workers(self) -> list[str]:
        return [
            w.slot
            for w in self.workers.values()
            if w.alive and not (w.paused or w.partitioned or w.draining) and w.dispatch is None
        ]

    def _takeable(self) -> list[int]:
        """Carriers nobody has read yet, and pending ones idle past claim_min_idle."""
        return sorted(
            cid
            for cid, c in self.stream.items()
            if c.consumer is None or self.now - c.idle_since_ms >= CLAIM_MIN_IDLE_MS
        )

    def _believers(self) -> list[Worker]:
        """Workers that think they hold the lease: in a dispatch they have not released."""
        return [
            w
            for w in self.workers.values()
            if w.alive and w.dispatch is not None and not w.dispatch.released
        ]

    def _advancer(self) -> Worker | None:
        """The lease holder that can run the next node now: running, not stalled."""
        for w in self._believers():
            state = w.dispatch.state if w.dispatch else None
            if w.paused or w.partitioned or state is None or state.status is not S.RUNNING:
                continue
            return w
        return None

    def _carrier_of(self, worker: Worker) -> Carrier | None:
        assert worker.dispatch is not None
        return self.stream.get(worker.dispatch.carrier_id)

    def _stop_if_drained(self, worker: Worker) -> None:
        if worker.draining and worker.dispatch is None:
            worker.alive = False
            worker.down_since_ms = self.now
            self.registry[worker.holder_id] = ("stopped", self.now, STOPPED_KEY_TTL_MS)

    def _release(self, worker: Worker) -> None:
        """The dispatch returned: it ends its attempt if the record is still its own, then the
        release script deletes the lease only if it still holds this holder's value (W2, W3).
        A holder cut off from Redis does neither: its attempt stays open and counts."""
        d = worker.dispatch
        if not worker.partitioned:
            if d is not None and self.open_attempt == d.generation:
                self.open_attempt = None
            if self._lease_is(worker, self.now):
                self.lease = None
        if d is not None:
            d.released = True

    def _end(self, worker: Worker) -> None:
        """The dispatch returned: release the lease, then the worker acks (W1)."""
        assert worker.dispatch is not None
        cid = worker.dispatch.carrier_id
        self._release(worker)
        self._ack(cid)
        worker.dispatch = None
        self._stop_if_drained(worker)

    def _abandon(self, worker: Worker) -> None:
        """Fenced off or self-fenced: stop writing, leave the carrier pending (W3, W4)."""
        self._release(worker)
        worker.dispatch = None
        self._stop_if_drained(worker)

    def _crash(self, worker: Worker) -> None:
        """kill -9: the lease stays until it expires, the carrier stays pending (W2, W3)."""
        worker.alive = False
        worker.paused = False
        worker.dispatch = None
        worker.down_since_ms = self.now

    def _restart(self, worker: Worker) -> None:
        """A new incarnation under a new consumer name; the old one's entries stay pending."""
        worker.incarnation += 1
        worker.alive, worker.paused, worker.partitioned, worker.draining = True, False, False, False
        self.registry[worker.holder_id] = ("running", self.now, REGISTRY_KEY_TTL_MS)

    # --- time and the lease watchdog (W3) -----------------------------------------------

    def _advance(self, to_ms: int) -> None:
        assert to_ms >= self.now
        for worker in self._believers():
            if not worker.paused:
                self._watchdog(worker, until_ms=to_ms)
        for cid, carrier in sorted(self.delay.items()):
            if carrier.due_ms is not None and carrier.due_ms <= to_ms:
                del self.delay[cid]
                carrier.due_ms = None
                self.stream[cid] = carrier
        self.now = to_ms
        for worker in self.workers.values():
            if not worker.alive and to_ms - worker.down_since_ms >= RESTART_AFTER_MS:
                self._restart(worker)
            if worker.alive and not (worker.paused or worker.partitioned):
                status = "draining" if worker.draining else "running"
                self.registry[worker.holder_id] = (status, to_ms, REGISTRY_KEY_TTL_MS)

    def _watchdog(self, worker: Worker, *, until_ms: int) -> None:
        d = worker.dispatch
        for _ in range(1_000):
            if d is None or worker.dispatch is not d or d.next_attempt_ms > until_ms:
                return
            self._renewal_attempt(worker, at_ms=d.next_attempt_ms)
        raise AssertionError("the watchdog never reached a decision")

    def _renewal_attempt(self, worker: Worker, *, at_ms: int) -> None:
        d = worker.dispatch
        assert d is not None
        if worker.partitioned:
            outcome = RenewalOutcome.FAILED
        elif self._lease_is(worker, at_ms):
            outcome = RenewalOutcome.RENEWED
            assert self.lease is not None
            self.lease.expires_ms = at_ms + TTL_MS
        else:
            outcome = RenewalOutcome.LOST
        decision = decide_renewal(
            ttl_seconds=TTL_MS / SECOND,
            last_renewed_at=d.last_renewed_ms / SECOND,
            sent_at=at_ms / SECOND,
            now=at_ms / SECOND,
            outcome=outcome,
        )
        margin_ms = TTL_MS // 10
        fenced = outcome is RenewalOutcome.LOST or (
            outcome is RenewalOutcome.FAILED and at_ms >= d.last_renewed_ms + TTL_MS - margin_ms
        )
        expected = {
            RenewalOutcome.RENEWED: RenewalAction.KEEP_GOING,
            RenewalOutcome.FAILED: RenewalAction.RETRY_SOON,
        }.get(outcome, RenewalAction.SELF_FENCE)
        assert decision.action is (RenewalAction.SELF_FENCE if fenced else expected), decision
        if decision.action is RenewalAction.SELF_FENCE:
            self._abandon(worker)
            return
        d.last_renewed_ms = round(decision.last_renewed_at * SECOND)
        d.next_attempt_ms = at_ms + round(decision.next_attempt_in * SECOND)
        assert d.next_attempt_ms > at_ms
        carrier = self._carrier_of(worker)
        if decision.refresh_liveness and carrier is not None:
            # W5: XCLAIM JUSTID at every renewal, so a live holder's carrier never looks idle.
            carrier.idle_since_ms = at_ms

    # --- fenced writes (W4) -------------------------------------------------------------

    def _expected_verdict(self, mine: int) -> WriteVerdict:
        if self.fencegen is None:
            return WriteVerdict.NO_GENERATION
        if mine < self.fencegen:
            return WriteVerdict.SUPERSEDED
        if mine > self.fencegen:
            return WriteVerdict.COUNTER_REWOUND
        if self.recorded_fence is None:
            return WriteVerdict.REVOKED
        return WriteVerdict.ALLOWED

    def _fenced(self, mine: int) -> bool:
        verdict = judge_write(mine, self.fencegen, self.recorded_fence)
        assert verdict is self._expected_verdict(mine), (mine, verdict)
        if verdict is not WriteVerdict.ALLOWED:
            with pytest.raises(ExecutionLeaseError):
                check_fenced_write(XID, mine, self.fencegen, self.recorded_fence)
        return verdict is WriteVerdict.ALLOWED

    def _land(self, state: ExecutionState, generation: int, serial: int | None) -> None:
        if self.tombstone is not None:
            self.after_delete.append(f"write under generation {generation} landed")
        self.row = state
        self.row_serial = serial if state.status is S.SUSPENDED else None
        self.landed_generations.append(generation)

    def _write(
        self,
        worker: Worker,
        state: ExecutionState,
        *,
        serial: int | None = None,
        changes: Iterable[CounterChange] = (),
        step: bool = False,
    ) -> bool:
        """A checkpoint (and counter) write under the worker's fence; refused → abandon (W4).
        A step's checkpoint records the subgraph fingerprint from its node under the
        definition this dispatch runs (W7)."""
        d = worker.dispatch
        assert d is not None
        if step:
            node = self._node_of(state)
            assert node is not None
            state = attrs.evolve(state, subgraph_fingerprint=SUBGRAPH[(d.variant, node)])
        if not self._fenced(d.generation):
            self._abandon(worker)
            return False
        # The fence lets through only the last acquirer, so its view is the stored checkpoint.
        assert d.state == self.row, "a writer the fence lets through worked on a stale view"
        self._land(state, d.generation, serial)
        if step:
            self.row_variant = d.variant
        self._apply_counters(changes)
        d.state = state
        return True

    def _apply_counters(self, changes: Iterable[CounterChange]) -> None:
        for change in changes:
            reset = change.op is CounterOp.RESET
            if change.counter is Counter.NODE_RETRIES:
                node = change.node_id or "*"
                self.node_retries[node] = 0 if reset else self.node_retries.get(node, 0) + 1
            elif change.counter is Counter.NODE_CRASHES:
                node = change.node_id or "*"
                self.node_crashes[node] = 0 if reset else self.node_crashes.get(node, 0) + 1
            elif change.counter is Counter.ALL_NODE_RETRIES:
                assert reset
                self.node_retries.clear()
            elif change.counter is Counter.ALL_NODE_CRASHES:
                assert reset
                self.node_crashes.clear()
            elif change.counter is Counter.TOTAL_RETRIES:
                assert not reset, "the per-execution total is never cleared (W8)"
                self.total_retries += 1
            elif change.counter is Counter.WAKEUPS:
                assert not reset
                self.wakeups += 1
            else:
                self.no_fail = 0 if reset else self.no_fail + 1

    # --- what the execution looks like to the resume policy (W7) ------------------------

    def _node_of(self, state: ExecutionState) -> str | None:
        return state.suspension.node_id if state.suspension else state.next_node_id

    def _expected_drift(self, node: str | None) -> DefinitionDrift:
        """Drift from the fingerprint recorded at start; tolerated when no node the checkpoint's
        definition and the deployed one disagree on is reachable from here (W7)."""
        if self.legacy_row:
            return DefinitionDrift.UNCHECKED
        if self.started_variant == self.deployed:
            return DefinitionDrift.NONE
        changed = EDITS[self.row_variant] ^ EDITS[self.deployed]
        if node is None or changed & REACHABLE[node]:
            return DefinitionDrift.BREAKING
        return DefinitionDrift.TOLERATED

    def _view(self) -> tuple[ExecutionView, CurrentDefinition, DefinitionDrift]:
        row = self.row
        assert row is not None
        node = self._node_of(row)
        view = ExecutionView.of(
            row,
            subgraph_fingerprint=row.subgraph_fingerprint,
            g1_wakeups=self.wakeups,
            consecutive_failures=self.no_fail,
            cancel_requested=self.cancel_requested,
        )
        current = CurrentDefinition(
            FLOWS[self.deployed].fingerprint,
            None if node is None else SUBGRAPH[(self.deployed, node)],
        )
        drift = compare_definitions(view, current)
        assert drift is self._expected_drift(node), (drift, node)
        return view, current, drift

    def _belongs(self, carrier: Carrier, kind: ResumeType) -> bool:
        """The carrier was made for the suspension the checkpoint is in now (V6, W7)."""
        row = self.row
        assert row is not None and row.suspension is not None
        if carrier.made_for is None or carrier.made_for != self.row_serial:
            return False
        return kind is ResumeType.EVENT or row.suspension.wake_at_ms is not None

    def _expected_resume(
        self, carrier: Carrier, kind: ResumeType, drift: DefinitionDrift
    ) -> ResumeKind:
        """The W7 table in the requirements' words, with the model's own idea of "this wait"."""
        row = self.row
        assert row is not None
        status, breaking = row.status, drift is DefinitionDrift.BREAKING
        if status is S.ERROR and kind is ResumeType.RETRY:
            refused = (
                self.cancel_requested
                or self.wakeups >= G1_MAX_WAKEUPS
                or self.no_fail >= DETERMINISTIC_FAILURE_MAX
                or breaking
            )
            return ResumeKind.REFUSE if refused else ResumeKind.WAKE_UP
        if status.is_terminal:
            return ResumeKind.SHORT_CIRCUIT
        if kind is ResumeType.CANCEL or self.cancel_requested:
            return ResumeKind.CANCEL
        if status is S.SUSPENDED:
            if kind in (ResumeType.CONTINUE, ResumeType.RETRY):
                return ResumeKind.ALREADY_SUSPENDED
            if not self._belongs(carrier, kind):
                return ResumeKind.PROTOCOL_ERROR
        if breaking:
            return ResumeKind.DEFINITION_DRIFT
        if status is S.SUSPENDED or kind is ResumeType.CONTINUE:
            return ResumeKind.PROCEED
        return ResumeKind.PROCEED_AS_CONTINUE

    def _decide_resume(self, carrier: Carrier, kind: ResumeType) -> ResumeDecision:
        view, current, drift = self._view()
        # As the worker asks: the carrier names its wait by subscription or timer id only.
        request = ResumeRequest(kind, subscription_id=carrier.envelope.subscription_id)
        decision = decide_resume(view, request, current)
        expected = self._expected_resume(carrier, kind, drift)
        assert decision.kind is expected, (
            f"{kind} carrier {carrier.cid} made for suspension {carrier.made_for} met "
            f"{view.status} (suspension {self.row_serial}): domain says {decision.kind}, "
            f"W7 says {expected}"
        )
        if expected is ResumeKind.PROTOCOL_ERROR:
            assert isinstance(decision.error, ResumeProtocolError)
        if decision.reason.value == "definition_changed":
            assert isinstance(decision.error, DefinitionDriftError)
        proceeds = (ResumeKind.PROCEED, ResumeKind.PROCEED_AS_CONTINUE, ResumeKind.WAKE_UP)
        if drift is DefinitionDrift.TOLERATED and decision.kind in proceeds:
            assert decision.log_warning and "definition_drift_tolerated" in decision.log_warning
        if expected in (ResumeKind.WAKE_UP, ResumeKind.REFUSE) and not (
            self.cancel_requested or drift is DefinitionDrift.BREAKING
        ):
            # budgets.decide_wakeup and the resume table must agree on the caps (W7, #73).
            wake = decide_wakeup(wakeups=self.wakeups, no_fail_streak=self.no_fail)
            assert wake.allowed is (expected is ResumeKind.WAKE_UP)
        return decision

    # --- one delivery, start to finish --------------------------------------------------

    def _deliver(
        self, worker: Worker, carrier: Carrier, *, reclaimed: bool
    ) -> MultipleResults[int]:
        carrier.consumer = worker.holder_id
        carrier.deliveries += 1
        carrier.idle_since_ms = self.now
        age = check_carrier_age(
            now_ms=self.now,
            payload_timestamp_ms=carrier.envelope.timestamp_ms,
            stream_id=f"{carrier.stream_ms}-{carrier.cid}",
        )
        assert age.accepted, "the model's clock stays far below the 30-day carrier max age (W14)"
        is_start = carrier.resume_type is None
        path = DispatchPath.START if is_start else DispatchPath.RESUME
        verdict = gate(path, tombstone=self.tombstone, carrier_tenant=carrier.envelope.tenant_id)
        if self.tombstone is not None:
            # W13: every dispatch gate checks the tombstone before it can (re)create work.
            assert verdict.action is GateAction.DROP_CARRIER
            assert verdict.release_dedup is is_start
            if verdict.release_dedup and self.dedup_claims.get(DEDUP_KEY, ("",))[0] == XID:
                del self.dedup_claims[DEDUP_KEY]
            self._ack_unperformed(carrier)
            return multiple()
        assert verdict.action is GateAction.DISPATCH
        decision = None
        if not is_start:
            assert carrier.resume_type is not None and self.row is not None
            decision = self._decide_resume(carrier, carrier.resume_type)
            if not decision.take_lease:
                # Short-circuits, refusals and protocol errors cost no lease (#33).
                self._ack_unperformed(carrier)
                return multiple()
        if self._lease_valid():
            self._lease_conflict(carrier, reclaimed=reclaimed)
            return multiple()
        generation = self._acquire(worker, carrier)
        if self._attempt_budget_spent(worker):
            # W2: the earlier attempts crashed their workers; this carrier is given up.
            self._release(worker)
            worker.dispatch = None
            self._stop_if_drained(worker)
            return multiple(generation, *self._dead_letter_guard(carrier, start=is_start))
        if is_start:
            self._start_under_lease(worker, carrier)
        else:
            assert carrier.resume_type is not None
            again = self._decide_resume(carrier, carrier.resume_type)
            assert again == decision, "nothing changed between the two asks"
            self._perform_resume(worker, carrier, again)
        return multiple(generation)

    def _acquire(self, worker: Worker, carrier: Carrier) -> int:
        before = self.fencegen
        generation = next_generation(before)
        assert generation == (before or 0) + 1
        self.fencegen = self.recorded_fence = generation
        self.lease = LeaseRecord(worker.holder_id, generation, self.now + TTL_MS)
        if self.tombstone is not None:
            self.after_delete.append(f"lease acquired under generation {generation}")
        worker.dispatch = Dispatch(
            carrier.cid,
            generation,
            state=self.row,
            variant=self.deployed,
            last_renewed_ms=self.now,
            next_attempt_ms=self.now + TTL_MS // 3,
        )
        return generation

    def _attempt_budget_spent(self, worker: Worker) -> bool:
        """W2: record this dispatch's attempt; count the one before it if it never ended."""
        d = worker.dispatch
        assert d is not None
        previous, self.open_attempt = self.open_attempt, d.generation
        node = None if self.row is None else self.row.next_node_id
        before = self.node_crashes.get(node or "*", 0)
        crash = decide_crashed_attempts(
            node_id=node,
            node_crashes=before,
            previous_unfinished=previous is not None,
            max_deliveries=self.max_deliveries,
        )
        crashes = before + (previous is not None)
        assert crash.crashes == crashes
        assert crash.budget_spent is (crashes >= self.max_deliveries)
        self._apply_counters(crash.counter_changes)
        return crash.budget_spent and (self.row is None or not self.row.is_terminal)

    def _lease_conflict(self, carrier: Carrier, *, reclaimed: bool) -> None:
        """W5, I0: ack only a first-delivery start/continue/retry of a provably live holder."""
        assert self.lease is not None
        holder_id = self.lease.holder_id
        status = self._registry_status(holder_id) if self.registry_enabled else None
        age_ms = self._heartbeat_age_ms(holder_id) if self.registry_enabled else None
        kind = conflict_carrier(carrier.envelope)
        decision = decide_conflict(
            carrier=kind,
            reclaimed=reclaimed,
            holder=holder_status(status) if self.registry_enabled else HolderStatus.UNKNOWN,
            heartbeat_age_seconds=None if age_ms is None else age_ms / SECOND,
            lease_ttl_seconds=TTL_MS / SECOND,
            registry_enabled=self.registry_enabled,
            holder_liveness_disabled=False,
        )
        provably_alive = status == "running" and age_ms is not None and 0 <= age_ms < TTL_MS
        quiet_kinds = (ConflictCarrier.START, ConflictCarrier.CONTINUE, ConflictCarrier.RETRY)
        expected_ack = (
            not reclaimed and kind in quiet_kinds and self.registry_enabled and provably_alive
        )
        assert decision.ack is expected_ack, (decision, status, age_ms, reclaimed)
        if decision.ack:
            assert decision.warn_no_effect is (kind is not ConflictCarrier.START)
            self._ack_unperformed(carrier)

    def _start_under_lease(self, worker: Worker, carrier: Carrier) -> None:
        """W6: claim the dedup key before any row; a redelivered start continues (S4)."""
        request = StartRequest(XID, FLOW_ID, carrier.envelope.dedup_key)
        stored = None if self.row is None else StoredExecution(self.row.flow_id, self.row.status)
        decision = decide_start(request, stored)
        if self.row is not None:
            assert decision.kind is StartKind.RESUME_CONTINUE
            continued = self._decide_resume(carrier, ResumeType.CONTINUE)
            self._perform_resume(worker, carrier, continued, kind=ResumeType.CONTINUE)
            return
        if request.dedup_key is None:
            assert decision.kind is StartKind.NEW_START
        else:
            assert decision.kind is StartKind.CLAIM_DEDUP_KEY
            held = self.dedup_claims.setdefault(request.dedup_key, (XID, self.now))
            holder = None if held == (XID, self.now) else DedupHolder(held[0], None)
            decision = decide_dedup_claim(request, holder)
            assert decision.kind is StartKind.NEW_START, "D1/D2: our own claim starts us"
        variant = self.deployed
        state = ExecutionState.new(
            execution_id=XID,
            flow_id=FLOW_ID,
            flow_version="1",
            fingerprint="" if self.legacy_row else FLOWS[variant].fingerprint,
            start_node_id="a",
            input=carrier.envelope.params,
            now_ms=self.now,
            tenant_id=TENANT,
        )
        if self._write(worker, state, step=True):
            self.started_variant = variant

    def _perform_resume(
        self,
        worker: Worker,
        carrier: Carrier,
        decision: ResumeDecision,
        *,
        kind: ResumeType | None = None,
    ) -> None:
        d = worker.dispatch
        assert d is not None and d.state is not None
        kind = kind or carrier.resume_type
        state, node = d.state, self._node_of(d.state)
        if not decision.take_lease:
            self._end(worker)
        elif decision.kind is ResumeKind.CANCEL:
            cancelled = state.transition(
                S.CANCELLED,
                now_ms=self.now,
                error=ExecutionError(CODE_CANCELLED, "cancelled by request", node),
            )
            if self._write(worker, cancelled):
                self._drop_subscription(state)
                self._end(worker)
        elif decision.kind is ResumeKind.DEFINITION_DRIFT:
            failed = state.transition(
                S.ERROR, now_ms=self.now, error=ExecutionError(-500, decision.detail, node)
            )
            if self._write(worker, failed):
                self._drop_subscription(state)
                self._end(worker)
        elif decision.kind is ResumeKind.WAKE_UP:
            assert decision.fresh_node_budget
            wake = decide_wakeup(wakeups=self.wakeups, no_fail_streak=self.no_fail)
            assert wake.allowed
            woken = state.transition(S.RUNNING, now_ms=self.now, error=None)
            self._write(worker, woken, changes=wake.counter_changes)
        elif decision.kind is ResumeKind.PROCEED and state.status is S.SUSPENDED:
            assert kind is not None and node is not None
            resumed = state.transition(
                S.RUNNING,
                now_ms=self.now,
                next_node_id=RESUMED_TO[(node, kind)],
                node_results={**state.node_results, node: kind.value},
                last_node_id=node,
            )
            if self._write(worker, resumed, step=True):
                self._drop_subscription(state)
        # PROCEED on a running checkpoint and PROCEED_AS_CONTINUE: go on from the checkpoint.

    def _drop_subscription(self, state: ExecutionState) -> None:
        if state.suspension is not None and state.suspension.subscription_id is not None:
            self.subscriptions.discard(state.suspension.subscription_id)

    # --- the dead-letter guard (W9) -----------------------------------------------------

    def _lookup(self) -> ExecutionLookup:
        if self.row is None:
            return ExecutionLookup.MISSING
        return ExecutionLookup.TERMINAL if self.row.is_terminal else ExecutionLookup.NON_TERMINAL

    def _dead_letter(self, carrier: Carrier) -> None:
        self._ack(carrier.cid)
        self.dlq.append(DeadLetter(f"{self.now}-{len(self.dlq)}", carrier, self.now))

    def _dead_letter_guard(self, carrier: Carrier, *, start: bool) -> MultipleResults[int]:
        lookup, held = self._lookup(), self._lease_valid()
        node = None if self.row is None else self.row.next_node_id
        exhausted = crash_budget_spent(self.node_crashes.get(node or "*", 0), self.max_deliveries)
        decision = guard_dead_letter(
            execution=lookup,
            lease=LeaseLookup.HELD if held else LeaseLookup.FREE,
            node_budget_exhausted=exhausted,
            schema_rejected=False,
            start_carrier=start,
        )
        if lookup is ExecutionLookup.TERMINAL:
            expected = GuardAction.RELEASE
        elif held:
            expected = GuardAction.KEEP_PENDING
        elif lookup is ExecutionLookup.MISSING and start:
            expected = GuardAction.TERMINALISE_THEN_RELEASE
        elif lookup is ExecutionLookup.MISSING:
            expected = GuardAction.RELEASE
        elif exhausted:
            expected = GuardAction.TERMINALISE_THEN_RELEASE
        else:
            expected = GuardAction.ENQUEUE_COPY_THEN_RELEASE
        assert decision.action is expected, (decision, lookup, held, exhausted)
        if decision.action is GuardAction.KEEP_PENDING:
            return multiple()
        generation = None
        if decision.action is GuardAction.TERMINALISE_THEN_RELEASE:
            # The guard terminalises under a lease of its own, then releases it; a start that
            # never reached a checkpoint becomes a row in error (no fingerprint: unchecked).
            generation = next_generation(self.fencegen)
            self.fencegen = self.recorded_fence = generation
            self.lease = None  # acquired, written under, released again
            assert self._fenced(generation)
            row = self.row
            if row is None:
                self.legacy_row = True
                row = ExecutionState.new(
                    execution_id=XID,
                    flow_id=FLOW_ID,
                    flow_version="1",
                    fingerprint="",
                    start_node_id="a",
                    input=carrier.envelope.params,
                    now_ms=self.now,
                    tenant_id=TENANT,
                )
            failed = row.transition(
                S.ERROR,
                now_ms=self.now,
                error=ExecutionError(1002, "attempts crashed their workers", node),
            )
            self._land(failed, generation, None)
        if decision.action is GuardAction.ENQUEUE_COPY_THEN_RELEASE:
            clone = gate(DispatchPath.GUARD_CLONE, tombstone=self.tombstone, carrier_tenant=TENANT)
            assert clone.action is GateAction.DISPATCH  # no row without a tombstone here
            self._copy(carrier)
        self._dead_letter(carrier)
        return multiple() if generation is None else multiple(generation)

    # --- node outcomes (W8) -------------------------------------------------------------

    def _fail(self, worker: Worker, error: BaseException, crash_after: int | None) -> None:
        d = worker.dispatch
        assert d is not None and d.state is not None
        node = d.state.next_node_id
        assert node is not None and failed_node_of(error) == node
        kind = classify_step_failure(error)
        retries, total = self.node_retries.get(node, 0), self.total_retries
        attempt = attempt_number(node_retries=retries, node_crashes=self.node_crashes.get(node, 0))
        decision = decide_node_failure(
            kind,
            failed_node=node,
            attempt=attempt,
            retry_times=self.retry_times,
            node_retries=retries,
            total_retries=total,
        )
        if kind is not FailureKind.TRANSIENT:
            assert decision.actions == FAILED_ACTIONS
            assert decision.terminal_reason in (
                TerminalReason.DETERMINISTIC,
                TerminalReason.TERMINAL,
            )
        elif attempt > self.retry_times or total >= NODE_RETRY_TOTAL_MAX:
            # E15: retryTimes retries, crashed attempts included in the attempt number.
            assert decision.actions == EXHAUSTED_ACTIONS
        else:
            assert decision.actions == RETRY_ACTIONS
            # min(30 s, 2^(n-1) s) for attempt n
            assert decision.delay_ms == min(30_000, SECOND * 2 ** (attempt - 1))
        carrier = self._carrier_of(worker)
        for index, action in enumerate(decision.actions):
            if crash_after == index:
                self._crash(worker)
                return
            if action is FailureAction.PERSIST:
                if not self._write(worker, d.state, changes=decision.counter_changes):
                    return
            elif action is FailureAction.TERMINALISE:
                failed = d.state.transition(
                    S.ERROR,
                    now_ms=self.now,
                    error=ExecutionError(-500, str(error), node),
                )
                if not self._write(worker, failed, changes=decision.counter_changes):
                    return
            elif action is FailureAction.RELEASE_LEASE:
                self._release(worker)
            elif action is FailureAction.SCHEDULE_COPY:
                copy = gate(
                    DispatchPath.RETRY_COPY, tombstone=self.tombstone, carrier_tenant=TENANT
                )
                skip = self.tombstone is not None
                assert copy.action is (GateAction.SKIP_COPY if skip else GateAction.DISPATCH)
                if carrier is not None and not skip:
                    assert decision.delay_ms is not None
                    self._copy(carrier, due_ms=self.now + decision.delay_ms)
            elif action is FailureAction.ACK_ORIGINAL:
                self._ack(d.carrier_id)
            else:
                guard = guard_dead_letter(
                    execution=self._lookup(),
                    lease=LeaseLookup.HELD if self._lease_valid() else LeaseLookup.FREE,
                    node_budget_exhausted=True,
                    schema_rejected=False,
                )
                assert guard.action is GuardAction.RELEASE, "terminalised first, so released"
                if carrier is not None:
                    self._dead_letter(carrier)
        worker.dispatch = None
        self._stop_if_drained(worker)

    @precondition(lambda self: self._advancer() is not None)
    @rule(plan=st.lists(st.tuples(OUTCOMES, CRASH_POINTS), min_size=1, max_size=4))
    def advancer_runs_its_next_nodes(self, plan: list[tuple[str, int | None]]) -> None:
        """E3, E5, E6, W8: the lease holder runs one to four nodes, one checkpoint each; each
        planned outcome applies to whatever node is next — a task succeeds or fails (how is
        the outcome), a wait suspends (a failed registration is ``registration``), an end
        completes — and the worker may crash before any of the step's writes."""
        for outcome, crash_after in plan:
            worker = self._advancer()
            if worker is None:
                return
            assert worker.dispatch is not None and worker.dispatch.state is not None
            node_type = NODE_TYPE[worker.dispatch.state.next_node_id or ""]
            if node_type == "end":
                self._end_node_completes(worker, crash_after)
            elif node_type != "task":
                self._wait_node_suspends(worker, outcome != "registration", crash_after)
            elif outcome in FAILURES:
                self._task_node_fails(worker, outcome, crash_after)
            else:
                self._task_node_succeeds(worker)

    def _task_node_succeeds(self, worker: Worker) -> None:
        """W8: success clears that node's counter and the no-fail streak, never the total."""
        assert worker.dispatch is not None
        state = worker.dispatch.state
        assert state is not None and state.next_node_id is not None
        node = state.next_node_id
        changes = on_node_success(node)
        assert changes == (
            CounterChange(Counter.NODE_RETRIES, CounterOp.RESET, node),
            CounterChange(Counter.NODE_CRASHES, CounterOp.RESET, node),
            CounterChange(Counter.NO_FAIL, CounterOp.RESET),
        )
        done = state.transition(
            S.RUNNING,
            now_ms=self.now,
            next_node_id=TASKS[node],
            node_results={**state.node_results, node: "ok"},
            last_node_id=node,
        )
        self._write(worker, done, changes=changes, step=True)

    def _task_node_fails(self, worker: Worker, failure: str, crash_after: int | None) -> None:
        """E3, E5, W8: transient → delayed copy within budget; spent → terminal + DLQ;
        deterministic, timeout and deadline → terminal at once, never retried."""
        assert worker.dispatch is not None
        state = worker.dispatch.state
        assert state is not None and state.next_node_id is not None
        error = _step_error(failure, state.next_node_id)
        assert classify_step_failure(error) is FAILURES[failure]
        self._fail(worker, error, crash_after)

    def _wait_node_suspends(
        self, worker: Worker, registered: bool, crash_after: int | None
    ) -> None:
        """E6, I0: the subscription and timer exist before the checkpoint says suspended;
        a failed registration fails the step (transient) instead of suspending."""
        assert worker.dispatch is not None
        d = worker.dispatch
        assert d.state is not None and d.state.next_node_id is not None
        node = d.state.next_node_id
        if not registered:
            error = _step_error("registration", node)
            assert classify_step_failure(error) is FailureKind.TRANSIENT
            self._fail(worker, error, None)
            return
        for index, step in enumerate(("register", "write", "release", "ack")):
            if crash_after == index:
                self._crash(worker)
                return
            if step == "register":
                self.next_serial += 1
                serial = self.next_serial
                # A sleep is named by a timer id of its own, as the worker names it.
                subscription, wait_ms = f"timer-{serial}", SLEEP_MS
                if NODE_TYPE[node] == "event":
                    subscription, wait_ms = f"sub-{serial}", WAIT_TIMEOUT_MS
                    self.subscriptions.add(subscription)
                    self.past_subscriptions[subscription] = serial
                timer = TaskEnvelope.resume(
                    execution_id=XID,
                    flow_id=FLOW_ID,
                    resume_type=ResumeType.TIMEOUT,
                    now_ms=self.now,
                    subscription_id=subscription,
                    tenant_id=TENANT,
                    generations=LEGACY_GENERATIONS,
                )
                due = self.now + wait_ms
                self._enqueue(timer, made_for=serial, due_ms=due)
            elif step == "write":
                suspended = d.state.transition(
                    S.SUSPENDED,
                    now_ms=self.now,
                    suspension=Suspension(node, subscription, wake_at_ms=due),
                    next_node_id=node,
                )
                if not self._write(worker, suspended, serial=serial, step=True):
                    return
            elif step == "release":
                self._release(worker)
            else:
                self._ack(d.carrier_id)
        worker.dispatch = None
        self._stop_if_drained(worker)

    def _end_node_completes(self, worker: Worker, crash_after: int | None) -> None:
        """The end node completes the execution: checkpoint, release, ack (W1)."""
        assert worker.dispatch is not None
        d = worker.dispatch
        assert d.state is not None
        for index, step in enumerate(("write", "release", "ack")):
            if crash_after == index:
                self._crash(worker)
                return
            if step == "write":
                completed = d.state.transition(
                    S.COMPLETED, now_ms=self.now, result={"shipped": True}, next_node_id=None
                )
                if not self._write(worker, completed):
                    return
            elif step == "release":
                self._release(worker)
            else:
                self._ack(d.carrier_id)
        worker.dispatch = None
        self._stop_if_drained(worker)

    # --- deliveries (W1, W2) ------------------------------------------------------------

    @precondition(lambda self: bool(self._takeable() and self._ready_workers()))
    @rule(target=fences, data=st.data())
    def worker_takes_a_carrier(self, data: st.DataObject) -> MultipleResults[int]:
        """W1, W2: a running worker reads a never-delivered carrier (XREADGROUP), or claims
        one pending on a consumer for longer than claim_min_idle (XAUTOCLAIM): a redelivery,
        which costs nothing unless the attempt before it crashed."""
        worker = self.workers[data.draw(st.sampled_from(self._ready_workers()), label="worker")]
        carrier = self.stream[data.draw(st.sampled_from(self._takeable()), label="carrier")]
        return self._deliver(worker, carrier, reclaimed=carrier.consumer is not None)

    # --- workers: crash, pause, partition, drain (W3, W16, W17) -------------------------

    def _faults(self) -> dict[str, list[str]]:
        """Which workers each fault can hit now (a fault needs someone to hit)."""
        workers = sorted(self.workers.values(), key=lambda w: w.slot)
        believers = self._believers()
        return {
            "crash": [w.slot for w in workers if w.alive],
            "drain": [w.slot for w in workers if w.alive and not w.draining],
            "pause": [w.slot for w in believers if not w.paused],
            "wake": [w.slot for w in workers if w.alive and w.paused],
            "cut_link": [w.slot for w in believers if not w.partitioned],
            "heal_link": [w.slot for w in workers if w.partitioned],
        }

    @precondition(lambda self: any(self._faults().values()))
    @rule(data=st.data())
    def worker_fails(self, data: st.DataObject) -> None:
        """kill -9 (its lease stays until expiry, its carrier stays pending); SIGTERM (W16,
        W17: draining at once, no new reads, the in-flight step finishes, then it stops);
        SIGSTOP or a long GC (no renewals, heartbeats or writes) and SIGCONT, after which its
        watchdog judges the lease before the step goes on; or the holder's link to Redis
        drops (renewals fail, so it must fence itself before the server lets the lease go)
        and heals (W3). A supervisor restarts dead workers as time passes."""
        faults = {kind: slots for kind, slots in self._faults().items() if slots}
        kind = data.draw(st.sampled_from(sorted(faults)), label="fault")
        worker = self.workers[data.draw(st.sampled_from(faults[kind]), label="worker")]
        if kind == "crash":
            self._crash(worker)
        elif kind == "drain":
            worker.draining = True
            self.registry[worker.holder_id] = ("draining", self.now, REGISTRY_KEY_TTL_MS)
            self._stop_if_drained(worker)
        elif kind == "pause":
            worker.paused = True
        elif kind == "cut_link":
            worker.partitioned = True
        elif kind == "heal_link":
            worker.partitioned = False
        else:
            worker.paused = False
            if worker.dispatch is not None and not worker.dispatch.released:
                self._renewal_attempt(worker, at_ms=self.now)

    @precondition(lambda self: self._advancer() is not None and len(self._ready_workers()) > 0)
    @rule(target=fences, data=st.data())
    def holder_is_killed_and_a_successor_reclaims(
        self, data: st.DataObject
    ) -> MultipleResults[int]:
        """W2, R3: kill -9 of the holder mid-step; after the lease and claim_min_idle pass,
        another worker reclaims its carrier, and the attempt that never returned counts."""
        holder = self._advancer()
        assert holder is not None and holder.dispatch is not None
        cid = holder.dispatch.carrier_id
        self._crash(holder)
        self._advance(self.now + max(TTL_MS, CLAIM_MIN_IDLE_MS) + SECOND)
        ready = self._ready_workers()
        carrier = self.stream.get(cid)
        if carrier is None or not ready:
            return multiple()
        worker = self.workers[data.draw(st.sampled_from(ready), label="successor")]
        return self._deliver(worker, carrier, reclaimed=True)

    # --- time ---------------------------------------------------------------------------

    @rule(step=st.sampled_from(["1s", "5s", "20s", "39s", "lease_ttl", "next_timer"]))
    def time_passes(self, step: str) -> None:
        """The model clock moves: a few seconds, past one lease TTL (only a holder whose
        watchdog renews keeps its lease, W3), or to the next due entry of the delay queue,
        which moves onto the stream (V8: timers and W8 retry copies)."""
        if step == "lease_ttl":
            to_ms = self.now + TTL_MS + SECOND
        elif step == "next_timer":
            dues = [c.due_ms for c in self.delay.values() if c.due_ms is not None]
            to_ms = max(self.now, min(dues, default=self.now + SECOND))
        else:
            to_ms = self.now + int(step.removesuffix("s")) * SECOND
        self._advance(to_ms)

    # --- events (V4, V5, V6, R3) --------------------------------------------------------

    @precondition(lambda self: bool(self.subscriptions))
    @rule(data=st.data())
    def event_arrives(self, data: st.DataObject) -> None:
        """V4: the event filter enqueues an event carrier naming the live subscription, or
        unregisters the subscription of a terminal execution instead."""
        subscription = data.draw(st.sampled_from(sorted(self.subscriptions)), label="sub")
        if self.row is not None and self.row.is_terminal:
            self.subscriptions.discard(subscription)
            return
        self._event_carrier(subscription)

    @precondition(lambda self: bool(self.stream or self.delay or self.past_subscriptions))
    @rule(data=st.data())
    def carrier_arrives_twice(self, data: st.DataObject) -> None:
        """R3, V5: at-least-once everywhere — a queued carrier exists twice, or a reconciler
        replay re-sends the event of a subscription that was already consumed."""
        queued = {**self.stream, **self.delay}
        if not queued or (self.past_subscriptions and data.draw(st.booleans(), label="event")):
            subscriptions = sorted(self.past_subscriptions)
            self._event_carrier(data.draw(st.sampled_from(subscriptions), label="sub"))
            return
        source = queued[data.draw(st.sampled_from(sorted(queued)), label="carrier")]
        self._enqueue(
            source.envelope,
            made_for=source.made_for,
            due_ms=source.due_ms,
            source=source,
        )

    def _event_carrier(self, subscription: str) -> None:
        event = TaskEnvelope.resume(
            execution_id=XID,
            flow_id=FLOW_ID,
            resume_type=ResumeType.EVENT,
            now_ms=self.now,
            event={"event_type": "approval_decision", "data": {"approved": True}},
            subscription_id=subscription,
            tenant_id=TENANT,
            generations=LEGACY_GENERATIONS,
        )
        self._enqueue(event, made_for=self.past_subscriptions[subscription])

    # --- operators (W7, W10, W13, W23) --------------------------------------------------

    @rule(action=OPERATOR_ACTIONS)
    def operator_acts(self, action: str) -> None:
        """W23 cancel: the intent flag first, then a carrier that terminalises under the lease;
        W7 retry: on error a capped wake-up with a fresh node budget, on running a continue;
        W13 delete: revoke state, fence, lease and counters and write a tombstone — the
        generation counter stays. Nothing is enqueued for a missing execution (it is
        UnknownExecutionError at the API); a delete needs no row."""
        if action == "delete":
            self._delete()
            return
        if self.row is None:
            return
        kind = ResumeType(action)
        if kind is ResumeType.CANCEL:
            self.cancel_requested = True
        self._enqueue(
            TaskEnvelope.resume(
                execution_id=XID,
                flow_id=FLOW_ID,
                resume_type=kind,
                now_ms=self.now,
                tenant_id=TENANT,
                generations=LEGACY_GENERATIONS,
            )
        )

    def _delete(self) -> None:
        before = self.tombstone
        tombstone = record_delete(before, tenant_id=TENANT, now_ms=self.now, reason="gdpr")
        if before is not None:
            assert tombstone is before, "a second delete keeps the first deleted_at"
        else:
            assert (tombstone.deleted_at_ms, tombstone.tenant_id) == (self.now, TENANT)
        self.tombstone = tombstone
        self.row = None
        self.row_serial = None
        self.recorded_fence = None
        self.lease = None
        self.node_retries.clear()
        self.node_crashes.clear()
        self.open_attempt = None
        self.total_retries = self.wakeups = self.no_fail = 0
        self.cancel_requested = False

    @precondition(lambda self: bool(self.dlq))
    @rule(data=st.data(), requested=st.sampled_from([None, TENANT, "other-tenant"]))
    def operator_replays_a_dead_letter(self, data: st.DataObject, requested: str | None) -> None:
        """W10: once per entry, never into a deleted execution or another tenant."""
        entry = self.dlq[data.draw(st.integers(0, len(self.dlq) - 1), label="dlq entry")]
        envelope = entry.carrier.envelope
        decision = decide_replay(
            DlqEntry(
                dlq_key=DLQ_KEY,
                dlq_id=entry.dlq_id,
                kind=envelope.kind,
                execution_id=XID,
                schema_version=envelope.schema_version,
                tenant_id=envelope.tenant_id,
                dedup_key=envelope.dedup_key,
            ),
            marker_set=entry.replayed,
            tombstone=self.tombstone,
            requested_tenant=requested,
        )
        if entry.replayed:
            expected = ReplayOutcome.ALREADY_REPLAYED
        elif requested not in (None, TENANT):
            expected = ReplayOutcome.TENANT_MISMATCH
        elif self.tombstone is not None:
            expected = ReplayOutcome.EXECUTION_DELETED
        else:
            expected = ReplayOutcome.REPLAYED
        assert decision.outcome is expected, decision
        if expected is ReplayOutcome.REPLAYED:
            stamp = replay_timestamp_ms(
                payload_timestamp_ms=envelope.timestamp_ms,
                dead_lettered_at_ms=entry.at_ms,
                dlq_id=entry.dlq_id,
            )
            assert stamp == envelope.timestamp_ms, "a replay keeps the carrier's age (W14)"
            entry.replayed = True
            self._copy(entry.carrier)

    @rule(variant=REDEPLOYS)
    def definition_is_redeployed(self, variant: int) -> None:
        """W7: the same flow id and version, edited in place — in or out of the run's path."""
        self.deployed = variant

    @precondition(lambda self: self.dedup_claims.get(DEDUP_KEY, ("",))[0] == XID)
    @rule(new_id=st.sampled_from(["x-2", "x-3"]))
    def client_retries_the_start_under_a_new_id(self, new_id: str) -> None:
        """W6: a second start with the same dedup key never starts a second execution."""
        hit = gate(DispatchPath.DEDUP_HIT, tombstone=self.tombstone, carrier_tenant=TENANT)
        if self.tombstone is not None:
            assert hit.action is GateAction.DROP_CARRIER and hit.release_dedup
            del self.dedup_claims[DEDUP_KEY]
            return
        assert hit.action is GateAction.DISPATCH and self.row is not None
        starts = [c for c in self.stream.values() if c.resume_type is None]
        carrier = HolderCarrier.PRESENT if starts else HolderCarrier.ABSENT
        claimed_at = self.dedup_claims[DEDUP_KEY][1]
        holder = DedupHolder(
            XID,
            StoredExecution(FLOW_ID, self.row.status),
            carrier,
            self.now - claimed_at,
        )
        decision = decide_dedup_claim(StartRequest(new_id, FLOW_ID, DEDUP_KEY), holder)
        if self.row.is_terminal:
            assert decision.kind is StartKind.ALREADY
        elif self.row.status is S.RUNNING:
            assert decision.kind is StartKind.ENQUEUE_CONTINUE
            self._enqueue(
                TaskEnvelope.resume(
                    execution_id=XID,
                    flow_id=FLOW_ID,
                    resume_type=ResumeType.CONTINUE,
                    now_ms=self.now,
                    tenant_id=TENANT,
                    generations=LEGACY_GENERATIONS,
                )
            )
        else:
            assert decision.kind is StartKind.CURRENT_STATE
        assert decision.execution_id == XID and decision.ack

    # --- a stale holder's write (W4) ----------------------------------------------------

    @rule(generation=fences)
    def stale_holder_writes(self, generation: int) -> None:
        """W4: a write under any generation but the last one handed out is refused, and the
        stored checkpoint does not change; after a delete even the last one is refused."""
        before = self.row
        if self._fenced(generation):
            assert generation == self.fencegen and self.recorded_fence == generation
        else:
            assert generation < (self.fencegen or 0) or self.recorded_fence is None
        assert self.row is before

    # --- invariants ---------------------------------------------------------------------

    @invariant()
    def one_advancer_per_execution(self) -> None:
        """W3, W4, R1: a single lease slot, always the last acquisition's; at most one
        holder whose write the fence would let through."""
        generations = [w.dispatch.generation for w in self._believers() if w.dispatch]
        assert len(generations) == len(set(generations))
        allowed = [g for g in generations if g == self.fencegen and self.recorded_fence == g]
        assert len(allowed) <= 1
        if self.lease is not None:
            assert self.lease.generation == self.fencegen

    @invariant()
    def a_running_holder_never_outlives_its_lease(self) -> None:
        """W3 self-fencing: a holder that is not paused and still believes it holds the lease
        does, on the server's clock — unless a delete revoked it (its writes are refused)."""
        for worker in self._believers():
            if worker.paused:
                continue  # a paused holder's writes are what fencing is for (W4)
            assert self.recorded_fence is None or self._lease_is(worker, self.now), (
                f"{worker.holder_id} still believes in a lease the server let go"
            )

    @invariant()
    def fence_generations_only_increase(self) -> None:
        """W4: the counter is never reset (not even by a delete); writes land in order."""
        if self.seen_fencegen is not None:
            assert self.fencegen is not None and self.fencegen >= self.seen_fencegen
        self.seen_fencegen = self.fencegen
        assert self.landed_generations == sorted(self.landed_generations)

    @invariant()
    def terminal_states_absorb(self) -> None:
        """R1, W7: completed and cancelled never change; error only by a permitted wake-up."""
        before, after = self.seen_row, self.row
        if before is not None and before.is_terminal and after is not before:
            deleted = after is None and self.tombstone is not None
            woken = (
                before.status is S.ERROR
                and after is not None
                and after.status is S.RUNNING
                and self.wakeups == self.seen_wakeups + 1
            )
            assert deleted or woken, f"{before.status} became {after and after.status}"
        self.seen_row, self.seen_wakeups = after, self.wakeups

    @invariant()
    def a_deleted_execution_never_comes_back(self) -> None:
        """W13, R1: after the tombstone no row, no lease, no copy, no landed write."""
        if self.tombstone is not None:
            assert self.row is None
            assert not self.after_delete, self.after_delete

    @invariant()
    def every_live_execution_keeps_a_way_to_wake(self) -> None:
        """I0 (W5, W8, W9, R1): a running execution has a carrier, pending or delayed; a
        suspended one its live subscription or a timer made for this suspension."""
        row = self.row
        if row is None or row.is_terminal or self.tombstone is not None:
            return
        queued = [*self.stream.values(), *self.delay.values()]
        if row.status is S.RUNNING:
            assert queued, "a running execution with no carrier anywhere"
            return
        assert row.suspension is not None
        subscription = row.suspension.subscription_id
        timers = [
            c
            for c in queued
            if c.resume_type is ResumeType.TIMEOUT and c.made_for == self.row_serial
        ]
        assert subscription in self.subscriptions or timers, "a suspension nothing can wake"

    @invariant()
    def a_start_is_never_lost_silently(self) -> None:
        """W6, W9: before its row exists, an execution is its start carrier — queued, or
        visible in the DLQ for replay."""
        if self.row is not None or self.tombstone is not None:
            return
        queued = [*self.stream.values(), *self.delay.values()]
        dead = [entry.carrier for entry in self.dlq]
        assert any(c.resume_type is None for c in [*queued, *dead])

    @invariant()
    def decisions_are_never_dropped(self) -> None:
        """W5, V6 (A46-04, A47-F2, #33): an event or timer made for the live suspension and
        a cancel of a live execution are never acked without being performed — in the
        suspend window such a carrier is the execution's only way on, not a duplicate."""
        assert not self.dropped, self.dropped

    @invariant()
    def retry_budgets_hold(self) -> None:
        """E15, W2, W7, W8: node retries ≤ retryTimes, crashed attempts ≤ max deliveries,
        total ≤ 100, wake-ups ≤ 2."""
        assert all(n <= self.retry_times for n in self.node_retries.values()), self.node_retries
        assert all(n <= self.max_deliveries for n in self.node_crashes.values()), self.node_crashes
        assert self.total_retries <= NODE_RETRY_TOTAL_MAX
        assert self.wakeups <= G1_MAX_WAKEUPS

    @invariant()
    def copies_keep_their_source_age(self) -> None:
        """W14: retry copies, guard clones and replays carry their source's timestamp."""
        for carrier in [*self.stream.values(), *self.delay.values()]:
            if carrier.source_timestamp_ms is not None:
                assert carrier.envelope.timestamp_ms == carrier.source_timestamp_ms


ExecutionModel.TestCase.settings = settings(max_examples=400, stateful_step_count=30, deadline=None)
TestExecutionModel = ExecutionModel.TestCase
