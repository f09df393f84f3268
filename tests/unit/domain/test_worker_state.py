"""The worker's registry status machine (W16) and its drain (W17, invariants I1-I5).

Incidents (docs/incidents.md): S18-02A (the registry status is the only dispatch allowlist),
A2R19-03 (a failed registration at start-up is retried), S18-01 (the drain machine and its
ack rule), A45-03, A46-01 and A46-03 (writing the status at once, the stopped record, the
closed gate).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from plaita.domain.worker_state import (
    FINAL_STATUSES,
    LEGAL_STATUS_CHANGES,
    ChangeOutcome,
    DrainAction,
    DrainEvent,
    DrainInvariant,
    DrainPhase,
    DrainState,
    DrainStep,
    StatusChange,
    WorkerStatus,
    change_status,
    drain_step,
    is_dispatchable,
    registration_retry_delay,
    registration_status,
    registry_writes_allowed,
)

W = WorkerStatus
E = DrainEvent
A = DrainAction
P = DrainPhase

PAIRS = list(itertools.product(W, W))
LEGAL = [(a, b) for a, b in PAIRS if b in LEGAL_STATUS_CHANGES[a]]
ILLEGAL = [(a, b) for a, b in PAIRS if a is not b and b not in LEGAL_STATUS_CHANGES[a]]


def pair_id(pair: tuple[W, W]) -> str:
    return f"{pair[0]}->{pair[1]}"


# --- registry: every legal and illegal change ---------------------------------------------


def test_the_legal_changes_are_exactly_the_forward_path() -> None:
    """W16: starting → running → draining → stopping → stopped / closed; nothing else."""
    assert {pair_id(p) for p in LEGAL} == {
        "starting->running",
        "starting->draining",
        "starting->stopping",
        "running->draining",
        "running->stopping",
        "draining->stopping",
        "stopping->stopped",
        "stopping->closed",
        "stopped->closed",
    }


@pytest.mark.parametrize("pair", LEGAL, ids=pair_id)
def test_a_forward_change_is_applied(pair: tuple[W, W]) -> None:
    """W16: each step along the path is taken, and written at once unless it closes the gate
    (A45-03: drain and stop do not wait for the next heartbeat; A46-03: closed writes nothing)."""
    current, requested = pair

    change = change_status(current, requested)

    assert change == StatusChange(ChangeOutcome.APPLIED, requested, requested is not W.CLOSED)


@pytest.mark.parametrize("pair", ILLEGAL, ids=pair_id)
def test_a_backward_or_resurrecting_change_is_refused(pair: tuple[W, W]) -> None:
    """W16, S18-02A: no way back, and stopped/closed are never resurrected."""
    current, requested = pair

    assert change_status(current, requested) == StatusChange(ChangeOutcome.REFUSED, current, False)


@pytest.mark.parametrize("status", list(W))
def test_asking_for_the_current_status_changes_nothing_and_writes_nothing(status: W) -> None:
    """W16: a second SIGTERM while draining is not a new drain."""
    assert change_status(status, status) == StatusChange(ChangeOutcome.UNCHANGED, status, False)


def test_draining_and_stopping_are_written_at_once() -> None:
    """W16, A45-03: a draining worker must stop getting hand-overs now, not 10 s later."""
    assert change_status(W.RUNNING, W.DRAINING).write_now
    assert change_status(W.DRAINING, W.STOPPING).write_now


def test_a_signal_before_registration_keeps_the_worker_draining() -> None:
    """W16, S18-02A: SIGTERM before run(); registration must not write running back."""
    draining = change_status(W.STARTING, W.DRAINING).status

    assert registration_status(draining) is W.DRAINING
    assert change_status(draining, W.RUNNING).outcome is ChangeOutcome.REFUSED


@pytest.mark.parametrize(
    ("current", "written"),
    [
        (W.STARTING, W.RUNNING),
        (W.RUNNING, W.RUNNING),
        (W.DRAINING, W.DRAINING),
        (W.STOPPING, None),
        (W.STOPPED, None),
        (W.CLOSED, None),
    ],
)
def test_registration_writes_running_only_from_starting_and_nothing_once_stop_began(
    current: W, written: W | None
) -> None:
    """W16, S18-02A / A2R19-03: registration only moves starting to running; after stop() a
    late registration retry would write the key back after it was removed."""
    assert registration_status(current) is written


@pytest.mark.parametrize("status", [*list(W), None, "", "paused", "RUNNING"])
def test_only_running_is_dispatchable(status: str | None) -> None:
    """W16, S18-02A: starting, draining, stopping, stopped, closed, a missing key and unknown
    values are refused whatever capacity they report."""
    assert is_dispatchable(status) == (status == "running")


@pytest.mark.parametrize("status", list(W))
def test_only_a_closed_worker_stops_writing_its_registry_key(status: W) -> None:
    """W16, A46-03: after closed no heartbeat, capacity report or retry writes the key."""
    assert registry_writes_allowed(status) == (status is not W.CLOSED)


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(0, 1), (1, 1), (2, 2), (3, 4), (4, 8), (5, 16), (6, 30), (7, 30), (10**9, 30)],
)
def test_the_registration_retry_backs_off_from_one_to_thirty_seconds(
    failures: int, delay: float
) -> None:
    """W16, A2R19-03: 1 s → 2 s → … capped at 30 s so a Redis outage does not flood the log."""
    assert registration_retry_delay(failures) == delay


@given(st.integers(min_value=-(10**6), max_value=10**12))
def test_the_registration_retry_delay_is_total_bounded_and_never_shrinks(failures: int) -> None:
    """W16, A2R19-03."""
    delay = registration_retry_delay(failures)

    assert 1 <= delay <= 30
    assert registration_retry_delay(failures + 1) >= delay


class RegistryMachine(RuleBasedStateMachine):
    """W16: random requests, registrations and retries in any order."""

    def __init__(self) -> None:
        super().__init__()
        self.status = W.STARTING
        self.was_final = False

    @rule(requested=st.sampled_from(W))
    def request(self, requested: W) -> None:
        before = self.status
        change = change_status(before, requested)
        if change.outcome is ChangeOutcome.APPLIED:
            assert requested in LEGAL_STATUS_CHANGES[before]
        else:
            assert change.status is before
            assert not change.write_now
        self.status = change.status

    @rule()
    def register(self) -> None:
        written = registration_status(self.status)
        if written is not None:
            change = change_status(self.status, written)
            assert change.outcome is not ChangeOutcome.REFUSED
            self.status = change.status

    @invariant()
    def a_stopped_worker_is_never_resurrected(self) -> None:
        if self.was_final:
            assert self.status in FINAL_STATUSES
        self.was_final = self.status in FINAL_STATUSES

    @invariant()
    def only_running_dispatches(self) -> None:
        assert is_dispatchable(self.status) == (self.status is W.RUNNING)


TestRegistryMachine = RegistryMachine.TestCase


# --- drain: one row per (phase, event) ----------------------------------------------------

I1, I2, I3, I4, I5 = (
    DrainInvariant.I1_POST_READ_GATE,
    DrainInvariant.I2_ADVISORY_TIMEOUT,
    DrainInvariant.I3_ACK_ONLY_COMPLETED,
    DrainInvariant.I4_NO_STEP_AFTER_STOP,
    DrainInvariant.I5_INTERRUPTIBLE_BACKOFF,
)


def step(phase: P, event: E, in_flight: int = 2) -> DrainStep:
    return drain_step(DrainState(phase, in_flight), event)


def test_a_consuming_worker_dispatches_what_it_reads() -> None:
    """W1/W17: before the drain every read entry is dispatched and counted in flight."""
    assert step(P.CONSUMING, E.READ_RETURNED) == DrainStep(DrainState(P.CONSUMING, 3), A.DISPATCH)


def test_the_signal_stops_reading_and_lets_in_flight_dispatches_finish() -> None:
    """W17, S18-01 D1: SIGTERM/SIGINT stop the reads; the running steps carry on."""
    result = step(P.CONSUMING, E.SIGNAL_RECEIVED)

    assert result == DrainStep(DrainState(P.DRAINING, 2), A.STOP_READING)
    assert not result.state.reading
    assert not result.state.may_exit


def test_a_signal_with_nothing_in_flight_stops_the_worker_at_once() -> None:
    """W17: shutdown latency ≲ read_block_ms: nothing to wait for."""
    assert step(P.CONSUMING, E.SIGNAL_RECEIVED, in_flight=0).state == DrainState(P.STOPPED, 0)


@pytest.mark.parametrize("phase", [P.DRAINING, P.STOPPED])
def test_a_second_signal_changes_nothing(phase: P) -> None:
    """W17: signals are idempotent; a stopped worker does not go back to draining."""
    assert step(phase, E.SIGNAL_RECEIVED) == DrainStep(DrainState(phase, 2), A.STOP_READING)


@pytest.mark.parametrize("phase", [P.DRAINING, P.STOPPED])
def test_a_result_read_after_the_drain_began_is_neither_dispatched_nor_acked(phase: P) -> None:
    """W17 I1 (S18-01 post-read gate): the XREADGROUP issued before the signal returns after
    it; its entries stay pending for another worker to claim (drain-read-gate)."""
    result = step(phase, E.READ_RETURNED)

    assert result == DrainStep(DrainState(phase, 2), A.LEAVE_PENDING, I1)


@pytest.mark.parametrize("phase", list(P))
def test_a_completed_dispatch_is_acked_even_after_the_stop(phase: P) -> None:
    """W17 I3: the work is done, so acking it is right whatever the phase (S18-01)."""
    result = step(phase, E.DISPATCH_COMPLETED)

    assert result.action is A.ACK
    assert result.invariant is I3
    assert result.state.in_flight == 1


@pytest.mark.parametrize("phase", list(P))
def test_an_aborted_dispatch_is_never_acked(phase: P) -> None:
    """W17 I3, W1: ack only after the dispatch returned normally; XCLAIM replays the rest."""
    result = step(phase, E.DISPATCH_ABORTED)

    assert result == DrainStep(DrainState(phase, 1), A.LEAVE_PENDING, I3)


@pytest.mark.parametrize("event", [E.DISPATCH_COMPLETED, E.DISPATCH_ABORTED])
def test_the_last_dispatch_to_finish_ends_the_drain(event: E) -> None:
    """W17: a drain with nothing left in flight is over; the process may exit."""
    result = step(P.DRAINING, event, in_flight=1)

    assert result.state == DrainState(P.STOPPED, 0)
    assert result.state.may_exit


def test_a_finished_dispatch_while_consuming_keeps_consuming() -> None:
    """W1: without a drain the worker keeps reading when its last dispatch finishes."""
    assert step(P.CONSUMING, E.DISPATCH_COMPLETED, in_flight=1).state == DrainState(P.CONSUMING)


@pytest.mark.parametrize("phase", [P.CONSUMING, P.DRAINING])
def test_a_backoff_runs_on_until_the_stop(phase: P) -> None:
    """W17 I5: the signal alone lets the in-flight step finish, backoff included."""
    assert step(phase, E.BACKOFF_SLICE) == DrainStep(DrainState(phase, 2), A.KEEP_BACKING_OFF)


def test_a_backoff_is_abandoned_at_the_stop() -> None:
    """W17 I5, E3: backoffs are sliced; after the stop the next slice aborts it, and it
    enqueues and acks nothing (retry-backoff-aborted-by-drain)."""
    result = step(P.STOPPED, E.BACKOFF_SLICE)

    assert result == DrainStep(DrainState(P.STOPPED, 2), A.ABORT_BACKOFF, I5)


@pytest.mark.parametrize("phase", [P.CONSUMING, P.DRAINING])
def test_a_dispatch_runs_its_next_node_until_the_stop(phase: P) -> None:
    """W17: draining lets the in-flight dispatch carry on to suspend or end (W1)."""
    assert step(phase, E.STEP_BOUNDARY) == DrainStep(DrainState(phase, 2), A.RUN_NEXT_STEP)


def test_no_new_node_starts_after_the_stop() -> None:
    """W17 I4 (S18-01 D2): the checkpoint is on disk; the carrier stays pending and the next
    holder resumes from it."""
    result = step(P.STOPPED, E.STEP_BOUNDARY)

    assert result == DrainStep(DrainState(P.STOPPED, 2), A.STOP_AT_BOUNDARY, I4)


def test_the_drain_timeout_stops_waiting_without_aborting_running_nodes() -> None:
    """W17 I2: advisory; the worker stops even with dispatches in flight (S18-01: the old
    active<=0 early return let an issued read dispatch), their nodes are not killed."""
    result = step(P.DRAINING, E.DRAIN_TIMEOUT)

    assert result == DrainStep(DrainState(P.STOPPED, 2), A.STOP_WAITING, I2)
    assert result.state.may_exit


def test_a_drain_timeout_after_the_stop_changes_nothing() -> None:
    """W17 I2."""
    assert step(P.STOPPED, E.DRAIN_TIMEOUT) == DrainStep(
        DrainState(P.STOPPED, 2), A.STOP_WAITING, I2
    )


def test_a_drain_timeout_without_a_drain_is_ignored() -> None:
    """W17: the timer is armed by the signal; a stray one must not stop a consuming worker."""
    assert step(P.CONSUMING, E.DRAIN_TIMEOUT) == DrainStep(DrainState(P.CONSUMING, 2), A.NOTHING)


@given(
    phase=st.sampled_from(P),
    in_flight=st.integers(min_value=0, max_value=10**6),
    event=st.sampled_from(E),
)
def test_the_drain_machine_is_total_and_never_reopens_reads(
    phase: P, in_flight: int, event: E
) -> None:
    """W17: every (phase, in-flight, event) has an answer; in-flight never goes negative,
    a drain never returns to consuming, and only a consuming worker dispatches."""
    result = drain_step(DrainState(phase, in_flight), event)

    assert result.state.in_flight >= 0
    if phase is not P.CONSUMING:
        assert result.state.phase is not P.CONSUMING
    if phase is P.STOPPED:
        assert result.state.phase is P.STOPPED
    if result.action is A.DISPATCH:
        assert phase is P.CONSUMING
    if result.action is A.ACK:
        assert event is E.DISPATCH_COMPLETED


class DrainMachine(RuleBasedStateMachine):
    """W17: random reads, completions, aborts, backoff slices, step boundaries, signals and
    timeouts; each read entry is followed from its read to its ack."""

    def __init__(self) -> None:
        super().__init__()
        self.state = DrainState()
        self.drain_began = False
        self.next_entry = 0
        self.in_flight: list[int] = []
        self.read_after_drain: set[int] = set()
        self.acked: set[int] = set()

    def apply(self, event: E) -> DrainStep:
        result = drain_step(self.state, event)
        self.state = result.state
        return result

    @rule()
    def signal(self) -> None:
        self.drain_began = True
        assert self.apply(E.SIGNAL_RECEIVED).action is A.STOP_READING

    @rule()
    def read(self) -> None:
        entry, self.next_entry = self.next_entry, self.next_entry + 1
        if self.drain_began:
            self.read_after_drain.add(entry)
        if self.apply(E.READ_RETURNED).action is A.DISPATCH:
            self.in_flight.append(entry)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), completed=st.booleans())
    def finish(self, data: st.DataObject, completed: bool) -> None:
        entry = self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))
        event = E.DISPATCH_COMPLETED if completed else E.DISPATCH_ABORTED
        if self.apply(event).action is A.ACK:
            self.acked.add(entry)

    @rule(event=st.sampled_from([E.BACKOFF_SLICE, E.STEP_BOUNDARY, E.DRAIN_TIMEOUT]))
    def tick(self, event: E) -> None:
        result = self.apply(event)
        if self.state.phase is P.STOPPED and event is not E.DRAIN_TIMEOUT:
            assert result.action in (A.ABORT_BACKOFF, A.STOP_AT_BOUNDARY)

    @invariant()
    def a_result_read_after_the_drain_began_is_never_acked(self) -> None:
        assert not self.acked & self.read_after_drain

    @invariant()
    def the_machine_counts_exactly_the_dispatches_in_flight(self) -> None:
        assert self.state.in_flight == len(self.in_flight)

    @invariant()
    def reading_stops_for_good_once_the_drain_began(self) -> None:
        assert self.state.reading == (not self.drain_began)


TestDrainMachine = DrainMachine.TestCase
