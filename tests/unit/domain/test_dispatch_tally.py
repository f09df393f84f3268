"""What a settled dispatch counts as in the metrics (C5): one test per row of the table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.dispatch_tally import DispatchTally, tally_dispatch

ROWS = [
    # outcome, disposition, failure, retry, lease_conflict
    ("completed", "ack", False, False, False),
    ("suspended", "ack", False, False, False),
    ("failed", "ack", True, False, False),
    ("crashed", "leave_pending", True, False, False),
    ("carrier_too_old", "dead_letter", True, False, False),
    ("retry_scheduled", "ack", False, True, False),
    ("lease_conflict", "leave_pending", False, False, True),
    ("lease_conflict", "ack", False, False, True),
    ("lease_conflict", "dead_letter", True, False, True),
]


@pytest.mark.parametrize(("outcome", "disposition", "failure", "retry", "conflict"), ROWS)
def test_each_row(
    outcome: str, disposition: str, failure: bool, retry: bool, conflict: bool
) -> None:
    assert tally_dispatch(outcome, disposition) == DispatchTally(
        failure=failure, retry=retry, lease_conflict=conflict
    )


@given(st.text())
def test_a_dead_lettered_dispatch_is_a_failure_whatever_its_outcome(outcome: str) -> None:
    assert tally_dispatch(outcome, "dead_letter").failure


@pytest.mark.parametrize("outcome", ["handed_over", "target_stripped"])
def test_an_affinity_outcome_is_counted_by_its_action_and_is_no_failure(outcome: str) -> None:
    assert tally_dispatch(outcome, "ack") == DispatchTally(
        failure=False, retry=False, lease_conflict=False, affinity=outcome
    )
