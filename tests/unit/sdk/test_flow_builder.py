"""plaita.Flow, the typed builder of the E1a document (L2): what each node method emits, the
start and next rules, the handler rules, the named errors, the JSON round trip, and a built
flow running to its end through ``plaita run``'s own code path."""

from __future__ import annotations

import functools
import json
from datetime import timedelta
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import plaita
from plaita.domain.errors import (
    DuplicateNodeIdError,
    EmptyEventTypeError,
    HandlerNotImportableError,
    InvalidExpressionError,
    InvalidFlowDocumentError,
    InvalidFlowIdError,
    InvalidHandlerReferenceError,
    InvalidHttpNodeError,
    InvalidRateLimitError,
    InvalidTimeoutError,
    MissingStartNodeError,
    UnknownNodeTargetError,
)
from plaita.domain.flow import Flow as Definition
from plaita.entrypoints.cli import main
from plaita.entrypoints.container import build_container
from plaita.entrypoints.run_flow import run_flow
from plaita.entrypoints.sdk.flow import ContinueWith, Flow, handler_reference
from plaita.entrypoints.settings import Settings

from . import handlers
from .guide import REPO_ROOT, flow_documents
from .handlers import Handlers, label, price

MODULE = "tests.unit.sdk.handlers"


@pytest.fixture
def at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)  # plaita run imports handler modules from the cwd


def nodes(flow: Flow) -> list[dict[str, Any]]:
    document: list[dict[str, Any]] = flow.to_dict()["nodes"]
    return document


# --- what each node method emits --------------------------------------------------------------


def test_plaita_flow_is_the_builder() -> None:
    assert plaita.Flow is Flow


def test_a_task_node_with_every_field() -> None:
    flow = (
        Flow("f")
        .task(
            "price",
            price,
            params={"quantity": "${quantity}", "unit_price": 2.5, "tags": ("a", "b")},
            next="done",
            timeout="PT5S",
            retry_times=2,
            error_handler="continue",
            timeout_handler=Flow.continue_with({"total": 0}),
        )
        .end("done")
    )
    assert nodes(flow)[0] == {
        "id": "price",
        "type": "task",
        "handler": f"{MODULE}:price",
        "params": {"quantity": "${quantity}", "unit_price": 2.5, "tags": ["a", "b"]},
        "next": "done",
        "timeout": "PT5S",
        "retryTimes": 2,
        "errorHandler": {"strategy": "continue"},
        "timeoutHandler": {"strategy": "continue_with", "default": {"total": 0}},
    }


def test_a_task_node_leaves_its_defaults_out() -> None:
    flow = Flow("f").task("a", "m:f", next="done").end("done")
    assert nodes(flow)[0] == {"id": "a", "type": "task", "handler": "m:f", "next": "done"}


def test_an_if_node() -> None:
    flow = (
        Flow("f")
        .if_("check", "amount > 10", then="big", else_="small", error_handler="continue")
        .end("big")
        .end("small")
    )
    assert nodes(flow)[0] == {
        "id": "check",
        "type": "if",
        "condition": "amount > 10",
        "then": "big",
        "else": "small",
        "errorHandler": {"strategy": "continue"},
    }


def test_a_switch_node_from_a_mapping_keeps_the_order_of_its_cases() -> None:
    flow = (
        Flow("f")
        .switch("route", {"tier == 'gold'": "gold", "amount > 100": "large"}, default="std")
        .end("gold")
        .end("large")
        .end("std")
    )
    assert nodes(flow)[0] == {
        "id": "route",
        "type": "switch",
        "cases": [
            {"when": "tier == 'gold'", "next": "gold"},
            {"when": "amount > 100", "next": "large"},
        ],
        "default": "std",
    }


def test_a_switch_node_from_pairs_without_default() -> None:
    flow = (
        Flow("f")
        .switch(
            "route",
            [("tier == 'gold'", "done"), ("amount > 1", "done")],
            error_handler={"strategy": "continue_with", "default": {"routed": False}},
        )
        .end("done")
    )
    assert nodes(flow)[0] == {
        "id": "route",
        "type": "switch",
        "cases": [
            {"when": "tier == 'gold'", "next": "done"},
            {"when": "amount > 1", "next": "done"},
        ],
        "errorHandler": {"strategy": "continue_with", "default": {"routed": False}},
    }


def test_an_event_node_with_every_field() -> None:
    flow = (
        Flow("f")
        .event(
            "wait",
            "approval_decision",
            filter={"kind": "expense"},
            timeout=timedelta(days=1),
            timeout_next="expired",
            next="done",
            timeout_handler="continue",
        )
        .end("done")
        .end("expired")
    )
    assert nodes(flow)[0] == {
        "id": "wait",
        "type": "event",
        "event_type": "approval_decision",
        "filter": {"kind": "expense"},
        "timeout_next": "expired",
        "next": "done",
        "timeout": 86_400_000,
        "timeoutHandler": {"strategy": "continue"},
    }


def test_a_sleep_and_an_end_node() -> None:
    flow = Flow("f").sleep("nap", 5000, next="done").end("done", output="$LAST_NODE")
    assert nodes(flow) == [
        {"id": "nap", "type": "sleep", "duration": 5000, "next": "done"},
        {"id": "done", "type": "end", "output": "$LAST_NODE"},
    ]


def test_the_flow_fields_leave_the_default_version_out() -> None:
    assert Flow("f").end("done").to_dict() == {
        "flow_id": "f",
        "start": "done",
        "nodes": [{"id": "done", "type": "end"}],
    }
    document = Flow("f", "2", "PT1H").end("done").to_dict()
    assert document == {
        "flow_id": "f",
        "version": "2",
        "start": "done",
        "timeout": "PT1H",
        "nodes": [{"id": "done", "type": "end"}],
    }
    assert list(document) == ["flow_id", "version", "start", "timeout", "nodes"]


def test_a_timedelta_is_written_as_whole_milliseconds() -> None:
    flow = Flow("f", timeout=timedelta(minutes=2)).sleep("nap", timedelta(seconds=1.5), next="done")
    flow.end("done")
    document = flow.to_dict()
    assert document["timeout"] == 120_000
    assert document["nodes"][0]["duration"] == 1500


def test_the_handler_strategies_have_one_canonical_form_each() -> None:
    flow = (
        Flow("f")
        .task("a", "m:f", error_handler="abort", timeout_handler={"strategy": "abort"})
        .task("b", "m:f", error_handler=ContinueWith(None))
        .task("c", "m:f", error_handler={"strategy": "continue_with"})
        .task("d", "m:f", error_handler={"strategy": "continue"})
        .end("done")
    )
    emitted = {node["id"]: node.get("errorHandler") for node in nodes(flow)}
    assert emitted == {
        "a": None,  # abort is the default: left out
        "b": {"strategy": "continue_with", "default": None},
        "c": {"strategy": "continue_with", "default": None},
        "d": {"strategy": "continue"},
        "done": None,
    }
    assert "timeoutHandler" not in nodes(flow)[0]


def test_params_become_plain_json() -> None:
    class Level(IntEnum):
        HIGH = 3

    class Colour(StrEnum):
        RED = "red"

    flow = (
        Flow("f")
        .task("a", "m:f", params={"level": Level.HIGH, "colour": Colour.RED, "list": (1, [2])})
        .end("done")
    )
    params = nodes(flow)[0]["params"]
    assert params == {"level": 3, "colour": "red", "list": [1, [2]]}
    assert type(params["level"]) is int and type(params["colour"]) is str


# --- the start rule and the next rule ---------------------------------------------------------


def test_the_first_node_added_is_the_start() -> None:
    flow = Flow("f").task("a", "m:f", next="b").end("b")
    assert flow.start == "a" and flow.to_dict()["start"] == "a"
    assert flow.build().start_node.id == "a"


def test_start_names_another_node() -> None:
    flow = Flow("f", start="b").end("a").task("b", "m:f", next="a")
    assert flow.start == "b" and flow.build().start_node.id == "b"


def test_next_none_leads_to_the_node_added_next() -> None:
    flow = (
        Flow("f")
        .task("a", "m:f")
        .event("wait", "e", timeout=10, timeout_next="done")
        .sleep("nap", 1)
        .if_("check", "True", then="b", else_="done")
        .task("b", "m:f")
        .end("done")
    )
    targets = {node["id"]: node.get("next") for node in nodes(flow)}
    assert targets == {
        "a": "wait",
        "wait": "nap",
        "nap": "check",
        "check": None,
        "b": "done",
        "done": None,
    }


def test_an_explicit_next_is_kept_and_the_node_after_it_is_not_chained() -> None:
    flow = Flow("f").task("a", "m:f", next="done").task("b", "m:f", next="done").end("done")
    assert [node.get("next") for node in nodes(flow)] == ["done", "done", None]


def test_nodes_after_a_branch_are_not_chained_to_it() -> None:
    flow = Flow("f").if_("check", "True", then="done", else_="done").end("done")
    assert nodes(flow)[0] == {
        "id": "check",
        "type": "if",
        "condition": "True",
        "then": "done",
        "else": "done",
    }


def test_a_next_left_to_a_node_never_added_is_refused_naming_the_node() -> None:
    flow = Flow("f").task("a", "m:f").task("b", "m:f")
    with pytest.raises(InvalidFlowDocumentError, match=r"node 'b' \(task\) has no next"):
        flow.build()
    with pytest.raises(InvalidFlowDocumentError, match="node 'b'"):
        flow.to_dict()
    assert "'b' leads to the next node added" in repr(flow)
    flow.end("done")
    assert nodes(flow)[1]["next"] == "done"


# --- the named errors -------------------------------------------------------------------------


def test_a_duplicate_id_is_refused_when_added_and_the_builder_is_unchanged() -> None:
    flow = Flow("f").task("a", "m:f")
    with pytest.raises(DuplicateNodeIdError, match=r"node 'a'.*already used by the task node"):
        flow.end("a")
    assert flow.node_ids == ("a",)
    flow.end("done")
    assert nodes(flow)[0]["next"] == "done"


def test_an_unknown_target_is_refused_at_build() -> None:
    flow = Flow("f").task("a", "m:f", next="nowhere").end("done")
    with pytest.raises(UnknownNodeTargetError, match="node 'a' points at unknown node 'nowhere'"):
        flow.build()


def test_a_start_naming_no_node_is_refused() -> None:
    with pytest.raises(MissingStartNodeError, match="start node 'z' does not exist"):
        Flow("f", start="z").end("done").build()
    with pytest.raises(MissingStartNodeError, match="start must be the id of a node"):
        Flow("f", start="")


def test_a_flow_without_nodes_is_refused() -> None:
    with pytest.raises(MissingStartNodeError, match="has no nodes"):
        Flow("f").build()


@pytest.mark.parametrize("flow_id", ["orders/v2", "my flow", "", ".x"])
def test_a_bad_flow_id_is_refused_at_once(flow_id: str) -> None:
    with pytest.raises(InvalidFlowIdError):
        Flow(flow_id)


@pytest.mark.parametrize("version", ["", 2])
def test_a_bad_version_is_refused_at_once(version: Any) -> None:
    with pytest.raises(InvalidFlowDocumentError, match="version must be a non-empty string"):
        Flow("f", version)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Flow("f", timeout="1h"), "flow.timeout"),
        (lambda: Flow("f").task("a", "m:f", timeout=-5), "node 'a' timeout"),
        (lambda: Flow("f").task("a", "m:f", timeout="P2D"), "node 'a' timeout"),  # over 24 h
        (lambda: Flow("f").sleep("nap", "5s"), "node 'nap' duration"),
        (lambda: Flow("f").sleep("nap", "P400D"), "node 'nap' duration"),
        (lambda: Flow("f").event("w", "e", timeout=float("inf")), "node 'w' timeout"),
        (lambda: Flow("f").sleep("nap", timedelta(seconds=-1)), "node 'nap' duration"),
    ],
)
def test_a_bad_duration_is_refused_when_added(build: Any, field: str) -> None:
    with pytest.raises(InvalidTimeoutError, match=field):
        build()


def test_an_event_may_wait_longer_than_a_task_attempt() -> None:
    flow = Flow("f").event("w", "e", timeout="P30D", timeout_next="done").end("done")
    assert nodes(flow)[0]["timeout"] == "P30D"


@pytest.mark.parametrize(
    "flow",
    [
        Flow("f").if_("check", "amount >", then="done", else_="done").end("done"),
        Flow("f").switch("route", {"tier ==": "done"}).end("done"),
        Flow("f").end("done", output="{'a': "),
        Flow("f").task("a", "m:f", params={"x": "${1 +}"}).end("done"),
    ],
    ids=["if", "switch", "end", "params"],
)
def test_an_expression_that_does_not_parse_is_refused_at_build(flow: Flow) -> None:
    with pytest.raises(InvalidExpressionError, match="flow 'f' node"):
        flow.build()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Flow("f").task("a", "m:f", retry_times=True), "retry_times"),
        (lambda: Flow("f").task("a", "m:f", retry_times=101), "retry_times"),
        (lambda: Flow("f").task("", "m:f"), "id"),
        (lambda: Flow("f").if_("c", "", then="a", else_="b"), "condition"),
        (lambda: Flow("f").switch("s", {}), "cases"),
        (lambda: Flow("f").switch("s", ["tier == 'gold'"]), "cases: expected"),
        (lambda: Flow("f").end("e", error_handler={"strategy": "retry"}), "error_handler"),
        (lambda: Flow("f").end("e", error_handler=3), "error_handler: expected"),
        (lambda: Flow("f").task("a", "m:f", params={"at": object()}), "params: <object"),
        (lambda: Flow("f").task("a", "m:f", params={1: "x"}), "key 1 is not a string"),
        (lambda: Flow("f").event("w", "e", filter={"s": {1, 2}}), "filter"),
    ],
)
def test_a_malformed_field_is_refused_when_added(build: Any, message: str) -> None:
    with pytest.raises(InvalidFlowDocumentError, match=message):
        build()


def test_an_empty_event_type_is_refused_when_added() -> None:
    with pytest.raises(EmptyEventTypeError, match="node 'w'"):
        Flow("f").event("w", "  ")


@pytest.mark.parametrize("reference", ["no_colon", ":f", "m:", ""])
def test_a_handler_string_that_is_not_module_function_is_refused(reference: str) -> None:
    with pytest.raises(InvalidHandlerReferenceError, match="must be written as 'module:function'"):
        Flow("f").task("a", reference)


def test_a_handler_that_is_not_callable_is_refused() -> None:
    with pytest.raises(InvalidHandlerReferenceError, match=r"node 'a'.*got int 3"):
        Flow("f").task("a", 3)


# --- handlers: callables and their names ------------------------------------------------------


def test_a_module_level_function_becomes_module_colon_qualname() -> None:
    flow = Flow("f").task("p", price).task("l", label).end("done")
    assert [node.get("handler") for node in nodes(flow)] == [
        f"{MODULE}:price",
        f"{MODULE}:label",
        None,
    ]
    assert handler_reference(price) == f"{MODULE}:price"
    assert flow.build().handler_modules() == {MODULE}


def _nested() -> Any:
    def inner(params: Any, ctx: Any) -> Any:
        return params

    return inner


def _in_main() -> Any:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec("def main_handler(params, ctx):\n    return params\n", namespace)
    return namespace["main_handler"]


class _Callable:
    def __call__(self, params: Any, ctx: Any) -> Any:
        return params


def _ghost() -> Any:
    def ghost(params: Any, ctx: Any) -> Any:
        return params

    ghost.__module__, ghost.__qualname__ = MODULE, "ghost"
    return ghost


def _unimportable() -> Any:
    def lost(params: Any, ctx: Any) -> Any:
        return params

    lost.__module__, lost.__qualname__ = "no_such_module_for_plaita_tests", "lost"
    return lost


@pytest.mark.parametrize(
    ("handler", "reason"),
    [
        (lambda params, ctx: params, "it is a lambda"),
        (_nested(), "defined inside the function '_nested'"),
        (Handlers().method, "'Handlers.method' is an attribute of 'Handlers'"),
        (Handlers.static, "'Handlers.static' is an attribute of 'Handlers'"),
        (_in_main(), "defined in __main__"),
        (functools.partial(price), "a partial object has no module-level name"),
        (_Callable(), "a _Callable object has no module-level name"),
        (handlers.FIRST_SHADOWED, "is another object"),
        (_ghost(), f"module '{MODULE}' has no 'ghost'"),
        (_unimportable(), "cannot be imported (ModuleNotFoundError"),
    ],
    ids=[
        "lambda",
        "nested",
        "method",
        "staticmethod",
        "main",
        "partial",
        "instance",
        "shadowed",
        "missing",
        "unimportable",
    ],
)
def test_a_callable_that_cannot_be_imported_back_is_refused(handler: Any, reason: str) -> None:
    flow = Flow("f")
    with pytest.raises(HandlerNotImportableError) as raised:
        flow.task("a", handler)
    message = str(raised.value)
    assert message.startswith("flow 'f' node 'a': handler ")
    assert reason in message
    assert "Define it at module level in an importable module" in message
    assert "or pass a 'module:function' string" in message
    assert flow.node_ids == ()


def test_the_string_form_names_a_handler_only_a_worker_can_import() -> None:
    flow = Flow("f").task("a", "billing.jobs:charge").end("done")
    assert nodes(flow)[0]["handler"] == "billing.jobs:charge"


# --- the round trip ---------------------------------------------------------------------------

#: The guide's reference document ("one of each node type"), and its canonical form.
REFERENCE_TEXT = flow_documents()[0]
REFERENCE = Flow.from_json(REFERENCE_TEXT).to_dict()


def test_the_canonical_form_of_the_reference_leaves_its_defaults_out() -> None:
    written = json.loads(REFERENCE_TEXT)
    assert written["version"] == "1"
    assert written["nodes"][0]["errorHandler"] == {"strategy": "abort"}
    del written["version"], written["nodes"][0]["errorHandler"]
    assert written == REFERENCE


@pytest.mark.parametrize("text", flow_documents())
def test_every_document_of_the_guide_round_trips_to_its_canonical_form(text: str) -> None:
    canonical = Flow.from_json(text).to_dict()
    assert Flow.from_dict(canonical).to_dict() == canonical
    assert Flow.from_dict(canonical).build().fingerprint == Definition.from_json(text).fingerprint


def test_the_reference_document_round_trips_through_dict_and_json() -> None:
    flow = Flow.from_dict(REFERENCE)
    assert flow.to_dict() == REFERENCE
    assert Flow.from_json(flow.to_json()).to_dict() == REFERENCE
    assert json.loads(flow.to_json(indent=2)) == REFERENCE


def test_the_builder_emits_the_document_the_engine_loads_from_json() -> None:
    built = (
        Flow("approval", timeout="PT1H")
        .task(
            "request",
            "examples.handlers:create_request",
            params={"amount": "${amount}"},
            timeout=5000,
            retry_times=2,
        )
        .if_("check", "amount > 1000", then="wait", else_="route")
        .switch("route", {"kind == 'a'": "nap"}, default="done")
        .event(
            "wait",
            "approval_decision",
            filter={"kind": "expense"},
            timeout=86_400_000,
            timeout_next="done",
        )
        .sleep("nap", 5000, next="done")
        .end("done", output="$LAST_NODE")
    )
    assert built.to_dict() == REFERENCE
    loaded = Definition.from_json(REFERENCE_TEXT)
    assert built.build().fingerprint == loaded.fingerprint
    assert Definition.from_json(built.to_json()).fingerprint == loaded.fingerprint


def test_a_document_with_its_defaults_spelt_out_loads_to_the_same_fingerprint() -> None:
    verbose = {
        "flow_id": "f",
        "version": "1",
        "start": "a",
        "nodes": [
            {
                "id": "a",
                "type": "task",
                "handler": "m:f",
                "params": {},
                "next": "b",
                "errorHandler": {"strategy": "abort"},
                "timeoutHandler": {"strategy": "continue_with"},
            },
            {"id": "b", "type": "event", "event_type": "e", "filter": {}, "next": "c"},
            {"id": "c", "type": "end", "output": None},
        ],
    }
    flow = Flow.from_dict(verbose)
    assert flow.to_dict() == {
        "flow_id": "f",
        "start": "a",
        "nodes": [
            {
                "id": "a",
                "type": "task",
                "handler": "m:f",
                "next": "b",
                "timeoutHandler": {"strategy": "continue_with", "default": None},
            },
            {"id": "b", "type": "event", "event_type": "e", "next": "c"},
            {"id": "c", "type": "end"},
        ],
    }
    assert flow.build().fingerprint == Definition.from_document(verbose).fingerprint


def test_a_loaded_flow_takes_more_nodes() -> None:
    flow = Flow.from_dict({"flow_id": "f", "start": "a", "nodes": [{"id": "a", "type": "end"}]})
    flow.task("b", "m:f").end("c")
    assert flow.start == "a" and flow.node_ids == ("a", "b", "c")
    assert nodes(flow)[1]["next"] == "c"


def test_from_definition_is_the_inverse_of_build() -> None:
    definition = Flow.from_dict(REFERENCE).build()
    assert Flow.from_definition(definition).to_dict() == REFERENCE


@pytest.mark.parametrize(
    ("document", "error"),
    [
        ({**REFERENCE, "description": "x"}, InvalidFlowDocumentError),
        ({**REFERENCE, "start": "nope"}, MissingStartNodeError),
        ({**REFERENCE, "flow_id": "a b"}, InvalidFlowIdError),
        (
            {**REFERENCE, "nodes": [*REFERENCE["nodes"], REFERENCE["nodes"][0]]},
            DuplicateNodeIdError,
        ),
        (
            {**REFERENCE, "nodes": [{"id": "request", "type": "end", "output": "1 +"}]},
            InvalidExpressionError,
        ),
        ({**REFERENCE, "timeout": (1, 2)}, InvalidFlowDocumentError),
        ([REFERENCE], InvalidFlowDocumentError),
    ],
)
def test_from_dict_refuses_with_the_domains_named_errors(document: Any, error: type) -> None:
    with pytest.raises(error):
        Flow.from_dict(document)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{", InvalidFlowDocumentError),
        ("[]", InvalidFlowDocumentError),
        (
            '{"flow_id": "f", "start": "a", "nodes": [{"id": "a", "type": "end", "output": "("}]}',
            InvalidExpressionError,
        ),
    ],
)
def test_from_json_refuses_with_the_domains_named_errors(text: str, error: type) -> None:
    with pytest.raises(error):
        Flow.from_json(text)


def test_repr_shows_the_flow_its_start_and_its_nodes() -> None:
    flow = Flow("orders", "3", "PT1M").task("a", "m:f").end("done")
    assert repr(flow) == (
        "<plaita.Flow 'orders' version='3' timeout='PT1M' start='a' nodes=[a:task, done:end]>"
    )
    assert repr(Flow("empty")) == "<plaita.Flow 'empty' version='1' start=None nodes=[]>"


# --- a built flow runs ------------------------------------------------------------------------


def shop() -> Flow:
    return (
        Flow("shop")
        .task("price", price, params={"quantity": "${quantity}", "unit_price": "${unit}"})
        .switch(
            "route",
            {"NODE['price']['total'] > 100": "wait"},
            default="label",
        )
        .event("wait", "approval", filter={"kind": "shop"}, timeout=20, timeout_next="expired")
        .sleep("nap", "PT0.001S")
        .task("label", label, params={"item": "${item}", "total": "${NODE['price']['total']}"})
        .if_(
            "approved",
            "'wait' not in NODE or NODE['wait']['data']['ok']",
            then="done",
            else_="expired",
        )
        .end("done", output="{'label': NODE['label']['label'], 'node': NODE['price']['node']}")
        .end("expired", output="{'expired': True}")
    )


def run_in_process(flow: Flow, params: dict[str, Any], events: list[Any]) -> Any:
    container = build_container(Settings(backend="memory", handler_modules=(MODULE,)))
    lines: list[str] = []
    return run_flow(container, flow.build(), params, events, stream=False, emit=lines.append)


@pytest.mark.parametrize(
    ("params", "events", "expected"),
    [
        ({"quantity": 2, "unit": 5, "item": "pen"}, [], {"label": "pen for 10", "node": "price"}),
        (
            {"quantity": 30, "unit": 5, "item": "ink"},
            [("approval", {"kind": "shop", "ok": True})],
            {"label": "ink for 150", "node": "price"},
        ),
        (
            {"quantity": 30, "unit": 5, "item": "ink"},
            [("approval", {"kind": "other", "ok": True})],
            {"expired": True},
        ),
    ],
    ids=["small", "approved", "timed-out"],
)
def test_a_built_flow_runs_to_its_end_in_process(
    params: dict[str, Any], events: list[Any], expected: Any, at_repo_root: None
) -> None:
    assert run_in_process(shop(), params, events) == expected


def test_the_emitted_json_runs_through_plaita_run(tmp_path: Path, at_repo_root: None) -> None:
    flow_file = tmp_path / "shop.json"
    flow_file.write_text(shop().to_json(indent=2), encoding="utf-8")
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(flow_file),
            "--input",
            '{"quantity": 30, "unit": 5, "item": "ink"}',
            "--event",
            'approval={"kind": "shop", "ok": true}',
            "--handler-modules",
            MODULE,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"label": "ink for 150", "node": "price"}


def test_a_built_flow_walks_its_nodes_in_order(at_repo_root: None) -> None:
    container = build_container(Settings(backend="memory", handler_modules=(MODULE,)))
    lines: list[str] = []
    params = {"quantity": 1, "unit": 1, "item": "x"}
    run_flow(container, shop().build(), params, [], stream=True, emit=lines.append)
    walked = [json.loads(line)["node_id"] for line in lines]
    assert walked == ["price", "route", "label", "approved", "done"]


def test_an_http_node_with_every_field() -> None:
    flow = (
        Flow("f")
        .http(
            "call",
            "https://api.example/orders/${order_id}",
            method="POST",
            headers={"Authorization": "Bearer ${input['token']}"},
            body={"sku": "${sku}"},
            expect=[201, "2xx"],
            block_private_networks=True,
            timeout=timedelta(seconds=10),
            retry_times=3,
            error_handler="continue",
        )
        .end("done")
    )
    assert nodes(flow)[0] == {
        "id": "call",
        "type": "http",
        "method": "POST",
        "url": "https://api.example/orders/${order_id}",
        "headers": {"Authorization": "Bearer ${input['token']}"},
        "body": {"sku": "${sku}"},
        "expect": [201, "2xx"],
        "blockPrivateNetworks": True,
        "next": "done",
        "timeout": 10_000,
        "retryTimes": 3,
        "errorHandler": {"strategy": "continue"},
    }


def test_an_http_node_leaves_its_defaults_out_and_checks_what_it_is_given() -> None:
    flow = Flow("f").http("call", "https://api.example/a").end("done")
    assert nodes(flow)[0] == {
        "id": "call",
        "type": "http",
        "url": "https://api.example/a",
        "next": "done",
    }
    with pytest.raises(InvalidHttpNodeError, match="method 'get' is not one of"):
        Flow("f").http("call", "https://api.example/a", method="get")


def test_parallel_subflow_and_map_nodes_build_the_documented_fields() -> None:
    """E12-E14: the builder writes what docs/flows.md documents, defaults left out."""
    flow = (
        Flow("fan")
        .parallel("fan", ["a", "b"], join="both", wait="any")
        .event("a", "a.ok", next="both")
        .event("b", "b.ok", next="both")
        .map("both", "$input.items", "per_item", concurrency=3, on_item_error="collect")
        .subflow("kyc", "kyc_check", version="2", input={"who": "${name}"}, on_parent_end="abandon")
        .end("done")
    )
    nodes = flow.to_dict()["nodes"]
    assert nodes[0] == {
        "id": "fan",
        "type": "parallel",
        "branches": ["a", "b"],
        "join": "both",
        "wait": "any",
    }
    assert nodes[3] == {
        "id": "both",
        "type": "map",
        "items": "$input.items",
        "flow_id": "per_item",
        "concurrency": 3,
        "on_item_error": "collect",
        "next": "kyc",
    }
    assert nodes[4] == {
        "id": "kyc",
        "type": "subflow",
        "flow_id": "kyc_check",
        "version": "2",
        "input": {"who": "${name}"},
        "on_parent_end": "abandon",
        "next": "done",
    }
    assert flow.build().fingerprint == Flow.from_dict(flow.to_dict()).build().fingerprint


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda f: f.map("m", "$x", "per", concurrency=0), "concurrency must be 1 to 1000"),
        (lambda f: f.map("m", "$x", "per", on_item_error="shrug"), "on_item_error"),
        (lambda f: f.subflow("s", "bad id!"), "flow_id 'bad id!'"),
        (lambda f: f.parallel("p", ["only"], join="j"), "branches"),
    ],
)
def test_a_bad_child_or_fork_field_is_refused_when_added(build: Any, message: str) -> None:
    from plaita.domain.errors import FlowDefinitionError

    with pytest.raises(FlowDefinitionError, match=message):
        build(Flow("f"))


def test_task_and_http_nodes_take_a_rate_limit() -> None:
    """W23: the builder writes ``rate_limit`` as given, leaves its defaults out, and the JSON
    form comes back the same."""
    flow = (
        Flow("f")
        .task("charge", "m:f", rate_limit={"key": "${customer}", "per_second": 0.5, "burst": 3})
        .http("notify", "https://api.example/n", rate_limit={"per_second": 10})
        .end("done")
    )
    charge, notify, _ = nodes(flow)
    assert charge["rate_limit"] == {"key": "${customer}", "per_second": 0.5, "burst": 3}
    assert notify["rate_limit"] == {"per_second": 10}
    assert Flow.from_dict(flow.to_dict()).to_dict() == flow.to_dict()
    assert flow.build().node("charge").rate_limit is not None


def test_a_bad_rate_limit_is_a_named_error() -> None:
    with pytest.raises(InvalidRateLimitError, match="node 'charge' rate_limit: per_second must"):
        Flow("f").task("charge", "m:f", rate_limit={"per_second": 0})
    with pytest.raises(InvalidExpressionError, match="node 'charge'"):
        Flow("f").task("charge", "m:f", rate_limit={"key": "${customer +}", "per_second": 1}).end(
            "done"
        ).build()
