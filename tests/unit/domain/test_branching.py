"""Branch choice and branch misses (E7; #53: a miss fails explicitly, never hangs in running).

Branch table (``decide_if`` / ``decide_switch``):

  node    conditions                  -> decision                    $BRANCH    $NODE[id]
  if      true                        -> then                        then       true
  if      false, else set             -> else                        else       false
  if      false, empty else           -> miss                        -          -
  switch  first true at index i       -> case i                      case:i     i
  switch  none true, default set      -> default                     default    null
  switch  none true, no default       -> miss                        -          -

Miss table (``resolve_branch_miss``, the node's errorHandler):

  abort (default)   -> FAIL: BranchMissError naming the node
  continue          -> END_WITH_NULL (WARNING)
  continue_with     -> END_WITH_DEFAULT
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.branching import (
    BRANCH_MISS_EVENT,
    BranchKind,
    BranchMiss,
    BranchTaken,
    MissAction,
    MissOutcome,
    decide_if,
    decide_switch,
    resolve_branch_miss,
)
from plaita.domain.failures import CODE_BRANCH_MISS, BranchMissError
from plaita.domain.flow import FailureStrategy, IfNode, SwitchNode


def _if(else_: str = "no") -> IfNode:
    return IfNode.model_validate(
        {"id": "check", "type": "if", "condition": "amount > 10", "then": "yes", "else": else_}
    )


def _switch(cases: int = 3, default: str | None = None) -> SwitchNode:
    return SwitchNode.model_validate(
        {
            "id": "route",
            "type": "switch",
            "cases": [{"when": f"kind == {i}", "next": f"t{i}"} for i in range(cases)],
            "default": default,
        }
    )


# --- if ---------------------------------------------------------------------------------------


def test_a_true_condition_takes_then() -> None:
    decision = decide_if(_if(), True)

    assert decision == BranchTaken("check", BranchKind.THEN, "yes")
    assert (decision.label, decision.result) == ("then", True)


def test_a_false_condition_takes_else() -> None:
    decision = decide_if(_if(), False)

    assert decision == BranchTaken("check", BranchKind.ELSE, "no")
    assert (decision.label, decision.result) == ("else", False)


def test_a_false_condition_with_an_empty_else_is_a_miss_naming_the_node() -> None:
    """E7; #53: `else_next=""` has no successor — a miss, not a silent end in running."""
    decision = decide_if(_if(else_=""), False)

    assert decision == BranchMiss("check", "if")
    assert "'check'" in decision.message and "no else" in decision.message


# --- switch -----------------------------------------------------------------------------------


def test_the_first_matching_case_is_taken() -> None:
    decision = decide_switch(_switch(), [False, True, True])

    assert decision == BranchTaken("route", BranchKind.CASE, "t1", 1)
    assert (decision.label, decision.result) == ("case:1", 1)


def test_cases_after_the_match_are_never_evaluated() -> None:
    """E2: a later case's expression may fail; the engine only evaluates up to the match."""

    def matches() -> Iterator[bool]:
        yield True
        raise AssertionError("evaluated a case after the match")

    assert decide_switch(_switch(), matches()) == BranchTaken("route", BranchKind.CASE, "t0", 0)


def test_no_matching_case_takes_the_default() -> None:
    decision = decide_switch(_switch(default="fallback"), [False, False, False])

    assert decision == BranchTaken("route", BranchKind.DEFAULT, "fallback")
    assert (decision.label, decision.result) == ("default", None)


def test_no_matching_case_and_no_default_is_a_miss_naming_the_node() -> None:
    """E7; #53: fails with an error naming the node instead of staying running."""
    decision = decide_switch(_switch(), [False, False, False])

    assert decision == BranchMiss("route", "switch")
    error = decision.error()
    assert isinstance(error, BranchMissError)
    assert error.node_id == "route"
    assert error.code == CODE_BRANCH_MISS
    assert "'route'" in str(error) and "no default" in str(error)


def test_cases_without_a_value_count_as_not_matched() -> None:
    """E7: fewer values than cases (the engine stopped early) never invents a match."""
    assert decide_switch(_switch(), [False]) == BranchMiss("route", "switch")


# --- resolving a miss -------------------------------------------------------------------------


def test_a_miss_under_abort_fails_the_execution() -> None:
    """E7; #53: the default errorHandler (abort) → terminal error naming the node."""
    miss = BranchMiss("route", "switch")

    outcome = resolve_branch_miss(miss, FailureStrategy())

    assert outcome == MissOutcome(miss, MissAction.FAIL)
    assert not outcome.ends_flow


def test_a_miss_under_continue_ends_the_flow_with_null() -> None:
    """E7; #53: the only escape hatch — WARNING and the flow ends at the node (0.5.x)."""
    miss = BranchMiss("check", "if")

    outcome = resolve_branch_miss(miss, FailureStrategy(strategy="continue", default=5))

    assert outcome == MissOutcome(miss, MissAction.END_WITH_NULL, None)
    assert outcome.ends_flow
    assert BRANCH_MISS_EVENT == "flow.branch_miss"


def test_a_miss_under_continue_with_ends_the_flow_with_the_default() -> None:
    """E1a: continue_with ends with the errorHandler's default value."""
    miss = BranchMiss("route", "switch")

    outcome = resolve_branch_miss(
        miss, FailureStrategy(strategy="continue_with", default={"route": "manual"})
    )

    assert outcome == MissOutcome(miss, MissAction.END_WITH_DEFAULT, {"route": "manual"})
    assert outcome.ends_flow


# --- properties -------------------------------------------------------------------------------

strategies = st.builds(
    FailureStrategy,
    strategy=st.sampled_from(["abort", "continue", "continue_with"]),
    default=st.none() | st.integers() | st.text(max_size=5),
)


@given(
    cases=st.integers(1, 6),
    values=st.lists(st.booleans(), max_size=8),
    default=st.none() | st.just("fallback"),
    handler=strategies,
)
def test_a_switch_always_takes_a_branch_or_ends_in_a_decided_miss(
    cases: int, values: list[bool], default: str | None, handler: FailureStrategy
) -> None:
    """E7 (property): the first true case wins, else the default, else a miss whose resolution
    either fails the execution or ends the flow — never anything that stays running."""
    decision = decide_switch(_switch(cases, default), values)

    first = next((i for i, v in enumerate(values[:cases]) if v), None)
    if first is not None:
        assert decision == BranchTaken("route", BranchKind.CASE, f"t{first}", first)
    elif default is not None:
        assert decision == BranchTaken("route", BranchKind.DEFAULT, default)
    else:
        assert isinstance(decision, BranchMiss)
        outcome = resolve_branch_miss(decision, handler)
        assert outcome.ends_flow is (handler.strategy != "abort")
        expected: Any = handler.default if handler.strategy == "continue_with" else None
        assert outcome.value == expected


@given(condition=st.booleans(), else_=st.sampled_from(["", "no"]))
def test_an_if_always_takes_a_branch_or_misses(condition: bool, else_: str) -> None:
    """E7 (property): then on true; else on false when there is one; a miss otherwise."""
    decision = decide_if(_if(else_), condition)

    if condition or else_:
        assert isinstance(decision, BranchTaken)
        assert decision.result is condition
    else:
        assert isinstance(decision, BranchMiss)


@pytest.mark.parametrize("node_type", ["if", "switch"])
def test_every_miss_message_names_its_node(node_type: str) -> None:
    assert "'n-1'" in BranchMiss("n-1", node_type).message
