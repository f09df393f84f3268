"""A flow's ``concurrency`` (E1a): the document field, its named errors at registration, the
key's value over the input, and the builder's ``.concurrency(limit, key=None)``."""

from __future__ import annotations

from typing import Any

import pytest

from plaita.application.engine.expressions import (
    ExpressionEvaluationError,
    compile_flow_expressions,
    concurrency_key,
)
from plaita.domain.errors import InvalidConcurrencyError
from plaita.domain.flow import Flow as Definition
from plaita.entrypoints.sdk.flow import Flow

END = [{"id": "done", "type": "end"}]


def document(concurrency: Any) -> dict[str, Any]:
    return {"flow_id": "orders", "start": "done", "concurrency": concurrency, "nodes": END}


def test_a_limit_per_key_is_kept_in_the_document() -> None:
    flow = Definition.from_document(document({"key": "${customer}", "limit": 2}))
    assert flow.to_document()["concurrency"] == {"key": "${customer}", "limit": 2}


@pytest.mark.parametrize("limit", [0, 10_001, -3, "2", 2.5, True, None])
def test_a_bad_limit_is_refused_at_registration_naming_the_value(limit: object) -> None:
    with pytest.raises(InvalidConcurrencyError, match=r"flow 'orders' concurrency: limit must"):
        Definition.from_document(document({"limit": limit}))


@pytest.mark.parametrize("key", ["", "   "])
def test_a_blank_key_is_refused(key: str) -> None:
    with pytest.raises(InvalidConcurrencyError, match="key must be a template"):
        Definition.from_document(document({"key": key, "limit": 1}))


def test_a_key_that_does_not_parse_is_refused_at_registration() -> None:
    flow = Definition.from_document(document({"key": "${input.(}", "limit": 1}))
    with pytest.raises(InvalidConcurrencyError, match="concurrency key"):
        compile_flow_expressions(flow)


@pytest.mark.parametrize(
    ("key", "execution_input", "value"),
    [
        (None, {"customer": "acme"}, ""),
        ("${customer}", {"customer": "acme"}, "acme"),
        ("${input.customer}", {"customer": "acme"}, "acme"),
        ("${input['n'] % 2}", {"n": 7}, "1"),
        ("${input.get('tags')}", {"tags": ["b", "a"]}, '["b","a"]'),
        ("${input.get('who')}", {}, "null"),
        ("region-${region}", {"region": "eu"}, "region-eu"),
        ("partner-api", {"customer": "acme"}, "partner-api"),
    ],
)
def test_the_key_is_evaluated_over_the_input_only(
    key: str | None, execution_input: dict[str, Any], value: str
) -> None:
    concurrency: dict[str, Any] = {"limit": 1} if key is None else {"key": key, "limit": 1}
    flow = Definition.from_document(document(concurrency))
    assert concurrency_key(flow, execution_input) == value


def test_a_key_failing_on_the_input_is_an_evaluation_error() -> None:
    flow = Definition.from_document(document({"key": "${input.customer}", "limit": 1}))
    with pytest.raises(ExpressionEvaluationError):
        concurrency_key(flow, {"client": "acme"})


def test_a_flow_without_a_limit_has_no_key() -> None:
    flow = Definition.from_document({"flow_id": "orders", "start": "done", "nodes": END})
    assert concurrency_key(flow, {}) is None


def test_the_builder_sets_the_limit_and_round_trips() -> None:
    flow = Flow("orders").concurrency(2, key="${customer}").end("done")
    assert flow.to_dict()["concurrency"] == {"key": "${customer}", "limit": 2}
    assert Flow.from_dict(flow.to_dict()).to_dict() == flow.to_dict()
    whole = Flow("orders").concurrency(5).end("done")
    assert whole.to_dict()["concurrency"] == {"limit": 5}


@pytest.mark.parametrize(("limit", "key"), [(0, None), (20_000, None), (1, " ")])
def test_the_builder_refuses_bad_values_at_once(limit: int, key: str | None) -> None:
    with pytest.raises(InvalidConcurrencyError):
        Flow("orders").concurrency(limit, key=key)


def test_a_flow_without_a_limit_keeps_the_fingerprint_it_had_before_limits_existed() -> None:
    """Re-registering an unchanged version after an upgrade must not look like a change."""
    flow = Definition.from_document({"flow_id": "a", "start": "done", "nodes": END})
    assert flow.fingerprint == "52019b2438640c539bd0819863608676eb0150eca8d3b6a3974f689707fed55f"
    limited = Definition.from_document(
        {"flow_id": "a", "start": "done", "nodes": END, "concurrency": {"limit": 1}}
    )
    assert limited.fingerprint != flow.fingerprint
