"""A worker's life: its registry status (W16) and its drain on SIGTERM/SIGINT (W17).

The registry status is the only dispatch allowlist (S18-02A): other workers hand carriers to
an instance, and take a lease conflict as a live holder's, only while it says ``running``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from plaita.domain.outages import Backoff

# --- registry (W16) --------------------------------------------------------------------


class WorkerStatus(enum.StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPING = "stopping"
    STOPPED = "stopped"
    #: The registry gate is shut (A46-03): heartbeats, capacity reports and registration
    #: retries write nothing more, so nothing can write the key back after it was removed.
    CLOSED = "closed"


FINAL_STATUSES = frozenset({WorkerStatus.STOPPED, WorkerStatus.CLOSED})

_W = WorkerStatus
LEGAL_STATUS_CHANGES: Mapping[WorkerStatus, frozenset[WorkerStatus]] = {
    # A signal may arrive before registration finished (S18-02A): draining is kept, not
    # overwritten.
    _W.STARTING: frozenset({_W.RUNNING, _W.DRAINING, _W.STOPPING}),
    _W.RUNNING: frozenset({_W.DRAINING, _W.STOPPING}),
    _W.DRAINING: frozenset({_W.STOPPING}),
    # The stopped tombstone is written before the key is deleted (A46-01); closed may also
    # follow stopping directly when that write failed.
    _W.STOPPING: frozenset({_W.STOPPED, _W.CLOSED}),
    _W.STOPPED: frozenset({_W.CLOSED}),
    _W.CLOSED: frozenset(),
}

#: Background registration retry after a failed start-up registration: 1 s → 30 s (A2R19-03).
REGISTRATION_BACKOFF = Backoff(base_ms=1_000, cap_ms=30_000)
#: Short retries of the immediate drain/stop write before it is reported as failed (A45-03).
STATUS_FLUSH_RETRIES = 2
#: Lifetime of the ``stopped`` tombstone written before the registry key is deleted (A46-01).
STOPPED_TOMBSTONE_TTL_SECONDS = 5


def is_dispatchable(status: str | None) -> bool:
    """Only ``running`` takes work; starting, draining, stopping, stopped, closed, a missing
    key and any value this build does not know are refused, whatever capacity they report."""
    return status == WorkerStatus.RUNNING


def registry_writes_allowed(status: WorkerStatus) -> bool:
    return status is not WorkerStatus.CLOSED


class ChangeOutcome(enum.Enum):
    APPLIED = "applied"
    #: Already there (a second SIGTERM): nothing to write.
    UNCHANGED = "unchanged"
    #: Backwards or out of a final status: a stopped worker is never resurrected.
    REFUSED = "refused"


@attrs.frozen
class StatusChange:
    outcome: ChangeOutcome
    status: WorkerStatus
    #: Write the registry key now instead of at the next heartbeat (A45-03): a draining
    #: worker must stop receiving hand-overs at once, not 10 s later.
    write_now: bool


def change_status(current: WorkerStatus, requested: WorkerStatus) -> StatusChange:
    if requested is current:
        return StatusChange(ChangeOutcome.UNCHANGED, current, write_now=False)
    if requested in LEGAL_STATUS_CHANGES[current]:
        # Closing shuts the gate: it is the one change that is never written.
        write = requested is not WorkerStatus.CLOSED
        return StatusChange(ChangeOutcome.APPLIED, requested, write_now=write)
    return StatusChange(ChangeOutcome.REFUSED, current, write_now=False)


def registration_status(current: WorkerStatus) -> WorkerStatus | None:
    """The status a (re)registration writes, or ``None`` when it must write nothing.

    Registration only moves ``starting`` to ``running``; a drain that began before it is kept
    (S18-02A). Once stop began, registering would write the key back after it was removed.
    """
    if current in (WorkerStatus.STARTING, WorkerStatus.RUNNING):
        return WorkerStatus.RUNNING
    if current is WorkerStatus.DRAINING:
        return WorkerStatus.DRAINING
    return None


def registration_retry_delay(failures: int) -> float:
    """Seconds before the next registration attempt after ``failures`` failed ones:
    1 s, 2 s, 4 s … capped at 30 s, so a Redis outage does not flood the log (A2R19-03)."""
    return REGISTRATION_BACKOFF.delay_ms(max(1, failures)) / 1000


# --- drain (W17, S18-01) ---------------------------------------------------------------


class DrainInvariant(enum.StrEnum):
    #: A read or reclaim that returns after the drain began is neither dispatched nor acked;
    #: its entries stay pending for another worker to claim.
    I1_POST_READ_GATE = "I1"
    #: The drain timeout stops reading and waiting; it never aborts a running node.
    I2_ADVISORY_TIMEOUT = "I2"
    #: Only a dispatch that returned is acked, even after the stop; an unfinished one stays
    #: pending and is replayed from its checkpoint.
    I3_ACK_ONLY_COMPLETED = "I3"
    #: After the stop no new step starts and nothing is enqueued or acked on a step's behalf.
    I4_NO_STEP_AFTER_STOP = "I4"
    #: Backoffs are sliced and abandoned at the stop (not at the signal: a drain lets the
    #: in-flight steps finish); an abandoned backoff enqueues and acks nothing.
    I5_INTERRUPTIBLE_BACKOFF = "I5"


class DrainPhase(enum.StrEnum):
    CONSUMING = "consuming"
    #: The signal came (D1): no new reads, in-flight dispatches run to completion.
    DRAINING = "draining"
    #: Nothing is in flight any more, or the drain timeout passed (D2): the process may exit.
    STOPPED = "stopped"


class DrainEvent(enum.Enum):
    SIGNAL_RECEIVED = "signal_received"
    #: One entry came back from XREADGROUP or a reclaim.
    READ_RETURNED = "read_returned"
    DISPATCH_COMPLETED = "dispatch_completed"
    #: A dispatch raised, was interrupted or stopped at a step boundary.
    DISPATCH_ABORTED = "dispatch_aborted"
    #: One slice of a backoff elapsed.
    BACKOFF_SLICE = "backoff_slice"
    #: A dispatch is about to run its next node.
    STEP_BOUNDARY = "step_boundary"
    DRAIN_TIMEOUT = "drain_timeout"


class DrainAction(enum.Enum):
    STOP_READING = "stop_reading"
    DISPATCH = "dispatch"
    #: Neither dispatch nor ack: the entry stays in the pending list.
    LEAVE_PENDING = "leave_pending"
    ACK = "ack"
    KEEP_BACKING_OFF = "keep_backing_off"
    ABORT_BACKOFF = "abort_backoff"
    RUN_NEXT_STEP = "run_next_step"
    STOP_AT_BOUNDARY = "stop_at_boundary"
    STOP_WAITING = "stop_waiting"
    #: A drain timeout without a drain: no timer should have been armed.
    NOTHING = "nothing"


@attrs.frozen
class DrainState:
    phase: DrainPhase = DrainPhase.CONSUMING
    in_flight: int = 0

    @property
    def reading(self) -> bool:
        return self.phase is DrainPhase.CONSUMING

    @property
    def may_exit(self) -> bool:
        return self.phase is DrainPhase.STOPPED


@attrs.frozen
class DrainStep:
    state: DrainState
    action: DrainAction
    #: The invariant that decided the action, for the log line and the tests.
    invariant: DrainInvariant | None = None


def _settle(phase: DrainPhase, in_flight: int) -> DrainState:
    # A drain with nothing left in flight is over: the worker stops.
    if phase is DrainPhase.DRAINING and in_flight == 0:
        phase = DrainPhase.STOPPED
    return DrainState(phase, in_flight)


def drain_step(state: DrainState, event: DrainEvent) -> DrainStep:
    phase, in_flight = state.phase, state.in_flight
    stopped = phase is DrainPhase.STOPPED
    if event is DrainEvent.SIGNAL_RECEIVED:
        started = DrainPhase.DRAINING if phase is DrainPhase.CONSUMING else phase
        return DrainStep(_settle(started, in_flight), DrainAction.STOP_READING)
    if event is DrainEvent.READ_RETURNED:
        if phase is DrainPhase.CONSUMING:
            return DrainStep(DrainState(phase, in_flight + 1), DrainAction.DISPATCH)
        return DrainStep(state, DrainAction.LEAVE_PENDING, DrainInvariant.I1_POST_READ_GATE)
    if event in (DrainEvent.DISPATCH_COMPLETED, DrainEvent.DISPATCH_ABORTED):
        done = _settle(phase, max(0, in_flight - 1))
        # The work is done even when the stop came first, so acking it is still right.
        action = (
            DrainAction.ACK if event is DrainEvent.DISPATCH_COMPLETED else DrainAction.LEAVE_PENDING
        )
        return DrainStep(done, action, DrainInvariant.I3_ACK_ONLY_COMPLETED)
    if event is DrainEvent.BACKOFF_SLICE:
        if stopped:
            return DrainStep(
                state, DrainAction.ABORT_BACKOFF, DrainInvariant.I5_INTERRUPTIBLE_BACKOFF
            )
        return DrainStep(state, DrainAction.KEEP_BACKING_OFF)
    if event is DrainEvent.STEP_BOUNDARY:
        if stopped:
            return DrainStep(
                state, DrainAction.STOP_AT_BOUNDARY, DrainInvariant.I4_NO_STEP_AFTER_STOP
            )
        return DrainStep(state, DrainAction.RUN_NEXT_STEP)
    # DRAIN_TIMEOUT
    if phase is DrainPhase.CONSUMING:
        return DrainStep(state, DrainAction.NOTHING)
    # Stop reading and waiting whatever is still in flight; the running nodes are not
    # aborted, and a read issued before the stop must not slip through (I1).
    stop = DrainState(DrainPhase.STOPPED, in_flight)
    return DrainStep(stop, DrainAction.STOP_WAITING, DrainInvariant.I2_ADVISORY_TIMEOUT)
