"""ExecutionQuery: the console's search as one pure value (C1)."""

from __future__ import annotations

from typing import Any

import pytest

from plaita.domain.errors import InvalidExecutionQueryError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.execution_query import EVERY_EXECUTION, ExecutionQuery, InputCondition

S = ExecutionStatus


def state(
    *, input: dict[str, Any] | None = None, created_at_ms: int = 100, flow_id: str = "f"
) -> ExecutionState:
    return ExecutionState(
        execution_id="x-1",
        flow_id=flow_id,
        flow_version="1",
        fingerprint="fp",
        status=S.RUNNING,
        created_at_ms=created_at_ms,
        updated_at_ms=created_at_ms,
        input=input or {},
    )


@pytest.mark.parametrize(
    ("condition", "document", "holds"),
    [
        ("customer.id = 42", {"customer": {"id": 42}}, True),
        ("customer.id = 42", {"customer": {"id": 42.0}}, True),
        ("customer.id = 42", {"customer": {"id": "42"}}, True),
        ("customer.id=42", {"customer": {"id": 43}}, False),
        ("customer.id = 42", {"customer": 42}, False),
        ("customer.id = 42", {}, False),
        ("name = ada", {"name": "ada"}, True),
        ('name = "ada"', {"name": "ada"}, True),
        ("flag = true", {"flag": True}, True),
        ("flag = true", {"flag": 1}, False),
        ("n = 1", {"n": True}, False),
        ("tags = [1, 2]", {"tags": [1, 2]}, True),
        ("missing = null", {"missing": None}, True),
        ("missing = null", {}, False),
        ("expr = a=b", {"expr": "a=b"}, True),
    ],
)
def test_an_input_condition_holds_by_json_equality_or_the_typed_text(
    condition: str, document: dict[str, Any], holds: bool
) -> None:
    assert InputCondition.parse(condition).holds(document) is holds


@pytest.mark.parametrize("condition", ["customer.id", "= 42", "customer..id = 1", " . = 1", ""])
def test_a_condition_that_is_not_path_equals_value_names_the_input_parameter(
    condition: str,
) -> None:
    with pytest.raises(InvalidExecutionQueryError, match=r"^input: .*customer.id = 42") as raised:
        InputCondition.parse(condition)
    assert raised.value.parameter == "input"


def test_an_empty_creation_window_names_created_to_ms() -> None:
    with pytest.raises(InvalidExecutionQueryError, match="before created_from_ms") as raised:
        ExecutionQuery(created_from_ms=10, created_to_ms=9)
    assert raised.value.parameter == "created_to_ms"


@pytest.mark.parametrize("value", [-1, True, 1.5])
def test_a_creation_bound_that_is_not_a_time_is_refused(value: Any) -> None:
    with pytest.raises(InvalidExecutionQueryError, match=r"^created_from_ms: "):
        ExecutionQuery(created_from_ms=value)


def test_the_creation_window_keeps_both_ends() -> None:
    query = ExecutionQuery(created_from_ms=100, created_to_ms=200)
    assert [query.matches(state(created_at_ms=t)) for t in (99, 100, 200, 201)] == [
        False,
        True,
        True,
        False,
    ]


def test_every_filter_applies_together() -> None:
    query = ExecutionQuery.build(flow_id="f", created_from_ms=50, input_condition="k = 1")
    assert query.matches(state(input={"k": 1}))
    assert not query.matches(state(input={"k": 1}, flow_id="g"))
    assert not query.matches(state(input={"k": 2}))
    assert not query.matches(state(input={"k": 1}, created_at_ms=10))


def test_the_empty_query_matches_everything_and_needs_no_state() -> None:
    assert EVERY_EXECUTION.matches(state())
    assert not EVERY_EXECUTION.needs_state
    assert ExecutionQuery.build(input_condition="a=1").needs_state


def test_narrowing_adds_flow_and_status_and_refuses_a_contradiction() -> None:
    narrowed = EVERY_EXECUTION.narrowed(flow_id="f", status=S.RUNNING)
    assert (narrowed.flow_id, narrowed.status) == ("f", S.RUNNING)
    assert narrowed.narrowed(flow_id="f") == narrowed
    with pytest.raises(InvalidExecutionQueryError, match=r"^status: given twice"):
        narrowed.narrowed(status=S.ERROR)


def test_a_query_describes_itself_for_logs_and_confirmations() -> None:
    query = ExecutionQuery.build(flow_id="f", input_condition="customer.id=42")
    assert query.describe() == "flow_id=f, input: customer.id = 42"
    assert EVERY_EXECUTION.describe() == "every execution"
