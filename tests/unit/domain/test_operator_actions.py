"""The operator actions table: which action can work in which state, and why not (W23, C2).

One row per (status, action); the console offers buttons from this table and the use cases
refuse with its reasons, so these rows are what an operator sees either way.
"""

from __future__ import annotations

import pytest

from plaita.domain.execution import ExecutionStatus
from plaita.domain.operator_actions import (
    Availability,
    ExecutionAction,
    action_availability,
    available_actions,
)
from plaita.domain.operator_controls import ControlFlags

A = ExecutionAction
NONE = ControlFlags()
PAUSED = ControlFlags(paused=True)
#: Can the action work (y) or not (-), for an execution neither paused nor with parked
#: carriers, in each status — the module's table, column by column.
STATUSES = ("pending", "running", "suspended", "error", "completed", "cancelled")
MATRIX = {
    A.RESUME: "- y - - - -",
    A.RETRY: "- - - y - y",
    A.RETRY_FROM_NODE: "- - y y - y",
    A.CANCEL: "y y y - - -",
    A.PAUSE: "y y y - - -",
    A.UNPAUSE: "- - - - - -",
    A.PUBLISH_EVENT: "y y y - - -",
    A.DELETE: "y y y y y y",
}
TABLE: dict[str, dict[ExecutionAction, bool]] = {
    status: {action: row.split()[column] == "y" for action, row in MATRIX.items()}
    for column, status in enumerate(STATUSES)
}
ROWS = [(status, action, can) for status, row in TABLE.items() for action, can in row.items()]


def test_the_table_covers_every_status_and_every_action() -> None:
    assert {s.value for s in ExecutionStatus} <= set(TABLE)
    assert all(set(row) == set(ExecutionAction) for row in TABLE.values())


@pytest.mark.parametrize(("status", "action", "can"), ROWS)
def test_each_row_says_whether_the_action_can_work_and_why_not(
    status: str, action: ExecutionAction, can: bool
) -> None:
    found = action_availability(action, status, NONE)
    assert found.available is can
    # An absent button always says why, in words (no requirement ids, no internal names).
    assert bool(found.reason) is not can
    assert found.reason == "" or found.reason[0].isupper()
    for jargon in ("carrier", "fence", "generation", "W7", "W23", "lease"):
        assert jargon not in found.reason


@pytest.mark.parametrize("status", list(TABLE))
def test_an_execution_that_is_paused_or_has_parked_carriers_can_be_unpaused(status: str) -> None:
    assert action_availability(A.UNPAUSE, status, PAUSED).available
    assert action_availability(A.UNPAUSE, status, ControlFlags(parked=1)).available


def test_pausing_a_paused_execution_is_a_harmless_no_op() -> None:
    found = action_availability(A.PAUSE, "running", PAUSED)
    assert (found.available, found.no_op, found.code) == (False, True, "already_paused")


def test_a_suspended_execution_points_at_what_moves_it() -> None:
    resume = action_availability(A.RESUME, ExecutionStatus.SUSPENDED, NONE)
    assert "publish the event" in resume.reason
    assert "retry from a node" in resume.reason


def test_completed_offers_neither_publish_nor_retry_from_node() -> None:
    actions = available_actions(ExecutionStatus.COMPLETED, NONE)
    assert [a for a, found in actions.items() if found.available] == [A.DELETE]


def test_an_unknown_status_offers_nothing_but_delete_and_says_so() -> None:
    found = action_availability(A.RETRY, "archived", NONE)
    assert (found.available, found.code) == (False, "unknown_status")
    assert "'archived'" in found.reason


def test_the_api_form_is_available_and_reason() -> None:
    assert Availability(False, "It has completed.", "x").to_json() == {
        "available": False,
        "reason": "It has completed.",
    }
