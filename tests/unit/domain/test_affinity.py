"""Affinity (W25): run here, hand over to the target, or strip the target — one row a case.

The table is ``plaita.domain.affinity``'s docstring; every row is a case below, and a
property checks that the passing on always ends.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.affinity import (
    DEFAULT_MAX_HANDOVERS,
    MAX_HANDOVERS_LIMIT,
    AffinityAction,
    AffinityDecision,
    AffinityReason,
    TargetView,
    affinity_copy,
    check_max_handovers,
    decide_affinity,
    target_view,
)
from plaita.domain.envelope import (
    LEGACY_GENERATIONS,
    CarrierGenerations,
    TaskEnvelope,
    check_handovers,
    copy_envelope,
    validate_target_instance_id,
)
from plaita.domain.errors import (
    InvalidHandoverCountError,
    InvalidIdError,
    InvalidTargetInstanceError,
)
from plaita.domain.worker_state import WorkerStatus

A = AffinityAction
R = AffinityReason
V = TargetView
ME = "worker-a"
TARGET = "worker-b"
LIMIT_S = 120.0


def decide(**overrides: Any) -> AffinityDecision:
    """A carrier for worker-b, taken by worker-a, with worker-b running and fresh."""
    facts: dict[str, Any] = {
        "target": TARGET,
        "handovers": 0,
        "this_instance": ME,
        "view": V.RUNNING,
        "heartbeat_age_seconds": 2.0,
        "heartbeat_limit_seconds": LIMIT_S,
        "max_handovers": DEFAULT_MAX_HANDOVERS,
    }
    facts.update(overrides)
    return decide_affinity(**facts)


# --- the table, row by row ----------------------------------------------------------------

ROWS = [
    # (case, overrides, action, reason)
    ("no target", {"target": None, "view": None}, A.RUN_HERE, R.NO_TARGET),
    ("target is this worker", {"target": ME, "view": None}, A.RUN_HERE, R.TARGET_IS_THIS_WORKER),
    ("budget spent", {"handovers": DEFAULT_MAX_HANDOVERS}, A.STRIP, R.HANDOVERS_EXHAUSTED),
    ("running, fresh", {}, A.HAND_OVER, R.TARGET_RUNNING),
    (
        "running, heartbeat lapsed",
        {"heartbeat_age_seconds": LIMIT_S},
        A.STRIP,
        R.TARGET_HEARTBEAT_LAPSED,
    ),
    (
        "running, heartbeat from the future",
        {"heartbeat_age_seconds": -1.0},
        A.STRIP,
        R.TARGET_HEARTBEAT_LAPSED,
    ),
    (
        "running, no heartbeat age",
        {"heartbeat_age_seconds": None},
        A.STRIP,
        R.TARGET_HEARTBEAT_LAPSED,
    ),
    ("not running", {"view": V.NOT_RUNNING}, A.STRIP, R.TARGET_NOT_RUNNING),
    ("no record", {"view": V.ABSENT, "heartbeat_age_seconds": None}, A.STRIP, R.TARGET_ABSENT),
    ("registry unreadable", {"view": V.UNREADABLE}, A.HAND_OVER, R.REGISTRY_UNREADABLE),
    ("no registry", {"view": V.NO_REGISTRY}, A.HAND_OVER, R.REGISTRY_DISABLED),
]


@pytest.mark.parametrize(
    ("overrides", "action", "reason"),
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_every_row_of_the_table(overrides: dict[str, Any], action: A, reason: R) -> None:
    assert decide(**overrides) == AffinityDecision(action, reason)


def test_the_table_covers_every_reason() -> None:
    assert {row[3] for row in ROWS} == set(R)


@pytest.mark.parametrize("view", list(V))
def test_the_budget_is_checked_before_the_registry_whatever_it_says(view: V) -> None:
    """Handing over for ever is what the budget prevents: a spent one strips, even when the
    target looks alive or the registry cannot tell."""
    assert decide(view=view, handovers=5, max_handovers=5).reason is R.HANDOVERS_EXHAUSTED


def test_a_budget_of_zero_strips_at_the_first_other_worker() -> None:
    assert decide(max_handovers=0) == AffinityDecision(A.STRIP, R.HANDOVERS_EXHAUSTED)


@pytest.mark.parametrize("handovers", [0, 7, DEFAULT_MAX_HANDOVERS + 3])
def test_the_target_runs_its_own_carrier_whatever_its_count(handovers: int) -> None:
    """A carrier that reached its target runs there, even one passed on past the budget."""
    assert decide(target=ME, handovers=handovers).runs_here


def test_one_below_the_budget_is_still_handed_over() -> None:
    decision = decide(handovers=DEFAULT_MAX_HANDOVERS - 1)
    assert decision.action is A.HAND_OVER


@given(
    view=st.sampled_from(list(V)),
    age=st.one_of(st.none(), st.floats(-10, 500, allow_nan=False)),
    budget=st.integers(0, 50),
)
def test_passing_on_always_ends_within_the_budget(view: V, age: float | None, budget: int) -> None:
    """Follow the copies another worker writes: after at most ``budget`` hand-overs the
    carrier is stripped (or earlier), never handed over once more."""
    envelope = carrier()
    for _ in range(budget + 1):
        decision = decide(
            handovers=envelope.handovers,
            view=view,
            heartbeat_age_seconds=age,
            max_handovers=budget,
        )
        copy = affinity_copy(decision, envelope, timestamp_ms=None)
        assert copy is not None
        envelope = copy
        if decision.action is A.STRIP:
            break
    assert envelope.target_instance_id is None
    assert envelope.handovers <= budget


# --- the registry's status as a view ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "view"),
    [
        (None, V.ABSENT),
        (WorkerStatus.RUNNING.value, V.RUNNING),
        (WorkerStatus.STARTING.value, V.NOT_RUNNING),
        (WorkerStatus.DRAINING.value, V.NOT_RUNNING),
        (WorkerStatus.STOPPING.value, V.NOT_RUNNING),
        (WorkerStatus.STOPPED.value, V.NOT_RUNNING),
        (WorkerStatus.CLOSED.value, V.NOT_RUNNING),
        ("rebooting", V.NOT_RUNNING),
        ("", V.NOT_RUNNING),
    ],
)
def test_only_running_is_a_running_target(status: str | None, view: V) -> None:
    """The registry's allowlist (W16): an unknown status is never taken for a live worker."""
    assert target_view(status) is view


# --- the copies ---------------------------------------------------------------------------


def carrier(**changes: Any) -> TaskEnvelope:
    envelope = TaskEnvelope.start(
        execution_id="x-1",
        flow_id="approval",
        version="1",
        params={"amount": 5},
        now_ms=1_000,
        tenant_id="acme",
        dedup_key="order-7",
        generations=CarrierGenerations("cf1", "cg1", "bg1"),
        target_instance_id=TARGET,
    )
    return copy_envelope(envelope, **changes)


def test_a_hand_over_copy_counts_one_more_and_keeps_everything_else() -> None:
    source = carrier(handovers=2, schema_version=1)
    copy = affinity_copy(AffinityDecision(A.HAND_OVER, R.TARGET_RUNNING), source, timestamp_ms=400)

    assert copy is not None
    assert (copy.target_instance_id, copy.handovers) == (TARGET, 3)
    assert copy.timestamp_ms == 400, "as old as the source's stream id (W14)"
    assert (copy.tenant_id, copy.dedup_key, copy.generations) == (
        source.tenant_id,
        source.dedup_key,
        source.generations,
    )
    assert (copy.execution_id, copy.params, copy.kind) == (
        source.execution_id,
        source.params,
        source.kind,
    )


def test_a_stripped_copy_names_no_target_and_keeps_its_count() -> None:
    source = carrier(handovers=16)
    copy = affinity_copy(
        AffinityDecision(A.STRIP, R.HANDOVERS_EXHAUSTED), source, timestamp_ms=None
    )

    assert copy is not None
    assert (copy.target_instance_id, copy.handovers) == (None, 16)
    assert copy.timestamp_ms == source.timestamp_ms


def test_a_carrier_that_runs_here_needs_no_copy() -> None:
    decision = AffinityDecision(A.RUN_HERE, R.TARGET_IS_THIS_WORKER)
    assert affinity_copy(decision, carrier(), timestamp_ms=None) is None


# --- the fields' rules ----------------------------------------------------------------------


def test_a_carrier_without_the_fields_names_no_target() -> None:
    envelope = TaskEnvelope.start(
        execution_id="x-1",
        flow_id="approval",
        version=None,
        params={},
        now_ms=1,
        generations=LEGACY_GENERATIONS,
    )
    assert (envelope.target_instance_id, envelope.handovers) == (None, 0)


@pytest.mark.parametrize("bad", ["", "two words", "a/b", "{tag}", "x" * 129, 7])
def test_a_bad_target_is_refused_by_name(bad: object) -> None:
    with pytest.raises(InvalidTargetInstanceError, match="target instance id") as raised:
        carrier(target_instance_id=bad)
    assert isinstance(raised.value, InvalidIdError), "bad input, answered like any bad id"
    assert "--consumer-name" in str(raised.value), "it says what to name instead"


@pytest.mark.parametrize("good", ["worker-b", "host-1234-ab12cd", "pool.eu:3"])
def test_instance_ids_that_obey_the_id_rule_are_targets(good: str) -> None:
    assert validate_target_instance_id(good) == good


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3", None])
def test_a_bad_hand_over_count_is_refused_by_name(bad: object) -> None:
    with pytest.raises(InvalidHandoverCountError, match="hand-over count"):
        carrier(handovers=bad)
    with pytest.raises(InvalidHandoverCountError):
        check_handovers(bad)


@pytest.mark.parametrize("bad", [-1, MAX_HANDOVERS_LIMIT + 1, True, 2.0, "16"])
def test_a_bad_budget_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="hand-over budget"):
        check_max_handovers(bad)


@pytest.mark.parametrize("good", [0, 1, DEFAULT_MAX_HANDOVERS, MAX_HANDOVERS_LIMIT])
def test_budgets_from_zero_to_the_limit_are_accepted(good: int) -> None:
    assert check_max_handovers(good) == good
