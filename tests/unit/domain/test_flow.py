"""The flow graph: validation with named errors, fingerprints, handler modules (E1, E1a, W7)."""

from __future__ import annotations

import copy
import json
import random
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import (
    DuplicateNodeIdError,
    EmptyEventTypeError,
    FlowDefinitionError,
    InvalidFlowDocumentError,
    InvalidFlowIdError,
    InvalidHandlerReferenceError,
    InvalidHttpNodeError,
    InvalidTimeoutError,
    MissingStartNodeError,
    UnknownNodeTargetError,
)
from plaita.domain.flow import Flow, HttpNode, TaskNode

DAY_MS = 24 * 60 * 60 * 1000


def approval_document() -> dict[str, Any]:
    """The E1a example, completed so that every target exists."""
    return {
        "flow_id": "approval",
        "version": "1",
        "start": "request",
        "timeout": "PT1H",
        "nodes": [
            {
                "id": "request",
                "type": "task",
                "handler": "examples.handlers:create_request",
                "params": {"amount": "input.amount", "currency": "EUR"},
                "next": "check",
                "timeout": 5000,
                "retryTimes": 2,
                "errorHandler": {"strategy": "abort"},
            },
            {
                "id": "check",
                "type": "if",
                "condition": "amount > 100",
                "then": "wait",
                "else": "route",
            },
            {
                "id": "route",
                "type": "switch",
                "cases": [{"when": "amount < 10", "next": "nap"}],
                "default": "auto",
            },
            {
                "id": "wait",
                "type": "event",
                "event_type": "approval_decision",
                "filter": {"kind": "expense"},
                "timeout": DAY_MS,
                "timeout_next": "expire",
                "next": "decide",
            },
            {
                "id": "decide",
                "type": "task",
                "handler": "examples.handlers:decide",
                "next": "done",
                "timeoutHandler": {"strategy": "continue_with", "default": {"approved": False}},
            },
            {"id": "auto", "type": "task", "handler": "examples.auto:approve", "next": "done"},
            {"id": "nap", "type": "sleep", "duration": 5000, "next": "done"},
            {"id": "expire", "type": "end", "output": "'expired'"},
            {"id": "done", "type": "end", "output": "NODE['decide']"},
        ],
    }


def node_of(document: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(node for node in document["nodes"] if node["id"] == node_id)


def two_node_document(**task_fields: Any) -> dict[str, Any]:
    task = {"id": "a", "type": "task", "handler": "m:f", "next": "b", **task_fields}
    return {"flow_id": "f", "start": "a", "nodes": [task, {"id": "b", "type": "end"}]}


def subgraph(document: dict[str, Any], node_id: str) -> str:
    return Flow.from_document(document).subgraph_fingerprint(node_id)


def shuffled_keys(value: Any, rnd: random.Random) -> Any:
    """The same JSON value with every object's keys in a random order."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {key: shuffled_keys(value[key], rnd) for key in keys}
    if isinstance(value, list):
        return [shuffled_keys(item, rnd) for item in value]
    return value


# --- a valid definition -------------------------------------------------------------


def test_e1a_example_builds_a_flow_with_its_start_node_and_flow_timeout() -> None:
    flow = Flow.from_document(approval_document())

    assert flow.flow_id == "approval"
    assert flow.version == "1"
    assert flow.start_node.id == "request"
    assert flow.timeout_ms == 60 * 60 * 1000
    assert {node.id for node in flow.nodes()} == {n["id"] for n in approval_document()["nodes"]}
    assert flow.has_node("wait") and not flow.has_node("nowhere")


def test_from_json_accepts_text_and_bytes_alike() -> None:
    text = json.dumps(approval_document())

    assert Flow.from_json(text).fingerprint == Flow.from_json(text.encode()).fingerprint


def test_to_document_rebuilds_the_same_flow() -> None:
    flow = Flow.from_document(approval_document())

    assert Flow.from_document(flow.to_document()).fingerprint == flow.fingerprint


def test_every_named_definition_error_is_a_flow_definition_error() -> None:
    """Callers can catch the family (E1)."""
    for error in (
        InvalidFlowDocumentError,
        DuplicateNodeIdError,
        MissingStartNodeError,
        UnknownNodeTargetError,
        EmptyEventTypeError,
        InvalidTimeoutError,
        InvalidHandlerReferenceError,
        InvalidHttpNodeError,
    ):
        assert issubclass(error, FlowDefinitionError)


@pytest.mark.parametrize("flow_id", ["orders/v2", "../flows", "my flow", ".", "{f}"])
def test_a_flow_id_outside_the_id_rule_raises_invalid_flow_id(flow_id: str) -> None:
    """R4 (E1): every way a flow is registered builds a Flow; none may store such an id."""
    document = approval_document()
    document["flow_id"] = flow_id
    with pytest.raises(InvalidFlowIdError, match="flow id"):
        Flow.from_document(document)
    assert issubclass(InvalidFlowIdError, FlowDefinitionError)


# --- InvalidFlowDocumentError --------------------------------------------------------


@pytest.mark.parametrize("text", ["", "{", "not json", '{"flow_id": "f",}', "{'flow_id': 'f'}"])
def test_text_that_is_not_json_raises_invalid_flow_document(text: str) -> None:
    with pytest.raises(InvalidFlowDocumentError, match="not valid JSON"):
        Flow.from_json(text)


@pytest.mark.parametrize("text", ["[]", "[1, 2]", '"approval"', "42", "null", "true"])
def test_json_that_is_not_an_object_raises_invalid_flow_document(text: str) -> None:
    with pytest.raises(InvalidFlowDocumentError, match="JSON object"):
        Flow.from_json(text)


def test_bytes_that_are_not_utf8_raise_invalid_flow_document() -> None:
    with pytest.raises(InvalidFlowDocumentError):
        Flow.from_json(b"\xff\xfe{")


@pytest.mark.parametrize(
    "make",
    [
        lambda: two_node_document(params={"x": "\ud800"}),
        lambda: two_node_document(params={"x": {"\ud800": 1}}),
        lambda: json.loads(
            '{"flow_id": "f", "start": "a", "nodes": [{"id": "a", "type": "task", '
            '"handler": "m:f", "next": "b", "params": {"x": "\\udfff"}}, '
            '{"id": "b", "type": "end"}]}'
        ),
    ],
    ids=["python-text", "python-object-key", "json-escape"],
)
def test_a_lone_surrogate_in_a_definition_is_a_named_definition_error(make: Any) -> None:
    with pytest.raises(InvalidFlowDocumentError, match=r"flow 'f' .* lone surrogate"):
        Flow.from_document(make())


def test_deeply_nested_json_raises_invalid_flow_document() -> None:
    with pytest.raises(InvalidFlowDocumentError):
        Flow.from_json("[" * 100_000)


@pytest.mark.parametrize("node_type", ["code", "writefile", "Task", "", "loop"])
def test_unknown_node_type_raises_invalid_flow_document(node_type: str) -> None:
    """A `code` node is out of scope (docs/requirements.md): it must be refused, not ignored."""
    document = {"flow_id": "f", "start": "a", "nodes": [{"id": "a", "type": node_type}]}

    with pytest.raises(InvalidFlowDocumentError):
        Flow.from_document(document)


WRONG_FIELD_TYPES: dict[str, dict[str, Any]] = {
    "next is a number": two_node_document(next=5),
    "params is a list": two_node_document(params=[1, 2]),
    "handler is a list": two_node_document(handler=["m", "f"]),
    "timeout is a list": two_node_document(timeout=[5000]),
    "timeout is an object": two_node_document(timeout={"ms": 5000}),
    "retryTimes is text": two_node_document(retryTimes="twice"),
    "retryTimes is negative": two_node_document(retryTimes=-1),
    "errorHandler has an unknown strategy": two_node_document(errorHandler={"strategy": "retry"}),
    "a node has an unknown field": two_node_document(bogus=1),
    "nodes is an object": {"flow_id": "f", "start": "a", "nodes": {"a": {"type": "end"}}},
    "nodes is empty": {"flow_id": "f", "start": "a", "nodes": []},
    "flow_id is missing": {"start": "a", "nodes": [{"id": "a", "type": "end"}]},
    "flow_id is empty": {"flow_id": "", "start": "a", "nodes": [{"id": "a", "type": "end"}]},
    "start is a number": {"flow_id": "f", "start": 1, "nodes": [{"id": "a", "type": "end"}]},
    "node id is empty": {"flow_id": "f", "start": "a", "nodes": [{"id": "", "type": "end"}]},
    "node has no type": {"flow_id": "f", "start": "a", "nodes": [{"id": "a"}]},
    "switch has no cases": {
        "flow_id": "f",
        "start": "a",
        "nodes": [{"id": "a", "type": "switch", "cases": [], "default": "a"}],
    },
    "event filter is a list": {
        "flow_id": "f",
        "start": "a",
        "nodes": [{"id": "a", "type": "event", "event_type": "x", "filter": ["k"], "next": "a"}],
    },
}


@pytest.mark.parametrize("document", WRONG_FIELD_TYPES.values(), ids=WRONG_FIELD_TYPES.keys())
def test_wrong_field_types_raise_invalid_flow_document(document: dict[str, Any]) -> None:
    with pytest.raises(InvalidFlowDocumentError):
        Flow.from_document(document)


def test_invalid_flow_document_error_names_the_flow_and_the_field() -> None:
    with pytest.raises(InvalidFlowDocumentError) as caught:
        Flow.from_document(two_node_document(next=5))

    assert "'f'" in str(caught.value)
    assert "next" in str(caught.value)


@pytest.mark.parametrize(
    "document",
    [
        two_node_document(timeout=True),
        {**two_node_document(), "timeout": True},
        {
            "flow_id": "f",
            "start": "a",
            "nodes": [
                {"id": "a", "type": "sleep", "duration": True, "next": "b"},
                {"id": "b", "type": "end"},
            ],
        },
    ],
    ids=["node timeout", "flow timeout", "sleep duration"],
)
def test_boolean_durations_are_refused(document: dict[str, Any]) -> None:
    with pytest.raises(FlowDefinitionError):
        Flow.from_document(document)


# --- graph errors -------------------------------------------------------------------


def test_two_nodes_with_one_id_raise_duplicate_node_id() -> None:
    document = approval_document()
    document["nodes"].append({"id": "check", "type": "end"})

    with pytest.raises(DuplicateNodeIdError, match="'check'"):
        Flow.from_document(document)


def test_start_naming_no_node_raises_missing_start_node() -> None:
    document = approval_document()
    document["start"] = "begin"

    with pytest.raises(MissingStartNodeError, match="'begin'"):
        Flow.from_document(document)


def _set_next(d: dict[str, Any]) -> None:
    node_of(d, "request")["next"] = "ghost"


def _set_then(d: dict[str, Any]) -> None:
    node_of(d, "check")["then"] = "ghost"


def _set_else(d: dict[str, Any]) -> None:
    node_of(d, "check")["else"] = "ghost"


def _set_case(d: dict[str, Any]) -> None:
    node_of(d, "route")["cases"].append({"when": "true", "next": "ghost"})


def _set_default(d: dict[str, Any]) -> None:
    node_of(d, "route")["default"] = "ghost"


def _set_timeout_next(d: dict[str, Any]) -> None:
    node_of(d, "wait")["timeout_next"] = "ghost"


def _set_event_next(d: dict[str, Any]) -> None:
    node_of(d, "wait")["next"] = "ghost"


def _set_sleep_next(d: dict[str, Any]) -> None:
    node_of(d, "nap")["next"] = "ghost"


@pytest.mark.parametrize(
    "point_at_ghost",
    [
        _set_next,
        _set_then,
        _set_else,
        _set_case,
        _set_default,
        _set_timeout_next,
        _set_event_next,
        _set_sleep_next,
    ],
    ids=[
        "task next",
        "then",
        "else",
        "cases",
        "default",
        "timeout_next",
        "event next",
        "sleep next",
    ],
)
def test_target_naming_no_node_raises_unknown_node_target(point_at_ghost: Any) -> None:
    document = approval_document()
    point_at_ghost(document)

    with pytest.raises(UnknownNodeTargetError, match="'ghost'"):
        Flow.from_document(document)


def test_switch_without_default_is_valid() -> None:
    """E7 handles a branch miss at run time; a missing default is not a definition error."""
    document = approval_document()
    del node_of(document, "route")["default"]

    Flow.from_document(document)


@pytest.mark.parametrize("event_type", ["", " ", "\t\n "])
def test_empty_or_blank_event_type_raises_empty_event_type(event_type: str) -> None:
    document = approval_document()
    node_of(document, "wait")["event_type"] = event_type

    with pytest.raises(EmptyEventTypeError, match="'wait'"):
        Flow.from_document(document)


@pytest.mark.parametrize("handler", ["mf", "m:", ":f", ":", ""])
def test_handler_not_written_module_colon_function_raises_invalid_handler_reference(
    handler: str,
) -> None:
    with pytest.raises(InvalidHandlerReferenceError, match="module:function"):
        Flow.from_document(two_node_document(handler=handler))


# --- timeouts (E1, E5) --------------------------------------------------------------


@pytest.mark.parametrize(
    "timeout",
    [
        -1,
        float("inf"),
        float("-inf"),
        float("nan"),
        DAY_MS + 1,
        "PT24H1S",
        "P2D",
        "PTXS",
        "P",
        "5 seconds",
        "-PT5S",
        "PT-5S",
    ],
)
def test_node_timeout_negative_non_finite_over_24h_or_unparseable_raises_invalid_timeout(
    timeout: Any,
) -> None:
    with pytest.raises(InvalidTimeoutError, match="'a'"):
        Flow.from_document(two_node_document(timeout=timeout))


def test_fractional_negative_node_timeout_raises_invalid_timeout() -> None:
    with pytest.raises(InvalidTimeoutError):
        Flow.from_document(two_node_document(timeout=-0.5))


@pytest.mark.parametrize("timeout", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_node_timeout_in_json_text_raises_invalid_timeout(timeout: str) -> None:
    text = json.dumps(two_node_document()).replace(
        '"next": "b"', f'"next": "b", "timeout": {timeout}'
    )

    with pytest.raises(InvalidTimeoutError):
        Flow.from_json(text)


@pytest.mark.parametrize("timeout", [0, 1, 5000, DAY_MS, "PT5S", "PT24H", "P1D", "5000"])
def test_node_timeout_up_to_24h_is_accepted(timeout: Any) -> None:
    Flow.from_document(two_node_document(timeout=timeout))


def test_node_timeout_on_an_end_node_is_checked_too() -> None:
    document = {"flow_id": "f", "start": "a", "nodes": [{"id": "a", "type": "end", "timeout": -1}]}

    with pytest.raises(InvalidTimeoutError):
        Flow.from_document(document)


@pytest.mark.parametrize("timeout", [-1, "PTXS", float("inf")])
def test_invalid_flow_timeout_raises_invalid_timeout(timeout: Any) -> None:
    document = approval_document()
    document["timeout"] = timeout

    with pytest.raises(InvalidTimeoutError, match=r"flow\.timeout"):
        Flow.from_document(document)


@pytest.mark.parametrize("duration", [-1, "PTXS", float("nan")])
def test_invalid_sleep_duration_raises_invalid_timeout(duration: Any) -> None:
    document = approval_document()
    node_of(document, "nap")["duration"] = duration

    with pytest.raises(InvalidTimeoutError, match="'nap'"):
        Flow.from_document(document)


def test_flow_without_timeout_has_no_flow_timeout() -> None:
    document = approval_document()
    del document["timeout"]

    assert Flow.from_document(document).timeout_ms is None


# --- fingerprints (E1, W7) ----------------------------------------------------------


def test_fingerprint_is_a_sha256_hex_digest() -> None:
    fingerprint = Flow.from_document(approval_document()).fingerprint

    assert len(fingerprint) == 64
    int(fingerprint, 16)


@given(rnd=st.randoms(use_true_random=False))
def test_fingerprint_is_stable_under_key_order(rnd: random.Random) -> None:
    """Fingerprint = sha256 of the canonical JSON with sorted keys (E1)."""
    document = approval_document()
    reordered = shuffled_keys(document, rnd)

    from_reordered_text = Flow.from_json(json.dumps(reordered))

    assert from_reordered_text.fingerprint == Flow.from_document(document).fingerprint


def _edit_param(d: dict[str, Any]) -> None:
    node_of(d, "request")["params"]["currency"] = "USD"


def _edit_target(d: dict[str, Any]) -> None:
    node_of(d, "check")["then"] = "auto"


def _edit_event_type(d: dict[str, Any]) -> None:
    node_of(d, "wait")["event_type"] = "approval_given"


def _edit_retry(d: dict[str, Any]) -> None:
    node_of(d, "request")["retryTimes"] = 3


def _edit_flow_timeout(d: dict[str, Any]) -> None:
    d["timeout"] = "PT2H"


def _add_node(d: dict[str, Any]) -> None:
    d["nodes"].append({"id": "unused", "type": "end"})


@pytest.mark.parametrize(
    "edit",
    [_edit_param, _edit_target, _edit_event_type, _edit_retry, _edit_flow_timeout, _add_node],
    ids=["param", "target", "event_type", "retryTimes", "flow timeout", "extra node"],
)
def test_fingerprint_changes_with_content(edit: Any) -> None:
    document = approval_document()
    edited = copy.deepcopy(document)
    edit(edited)

    assert Flow.from_document(edited).fingerprint != Flow.from_document(document).fingerprint


def test_subgraph_fingerprint_ignores_an_edit_the_node_cannot_reach() -> None:
    """A suspended run at `wait` survives a deploy that only edits `request` (W7 drift)."""
    document = approval_document()
    edited = copy.deepcopy(document)
    node_of(edited, "request")["params"]["currency"] = "USD"
    edited["nodes"].append({"id": "unused", "type": "end"})
    before, after = Flow.from_document(document), Flow.from_document(edited)

    assert after.fingerprint != before.fingerprint
    assert after.subgraph_fingerprint("wait") == before.subgraph_fingerprint("wait")


@pytest.mark.parametrize("node_id", ["wait", "decide", "done"])
def test_subgraph_fingerprint_changes_with_an_edit_downstream(node_id: str) -> None:
    document = approval_document()
    edited = copy.deepcopy(document)
    node_of(edited, "done")["output"] = "'changed'"

    assert subgraph(edited, node_id) != subgraph(document, node_id)


def test_subgraph_fingerprint_follows_the_timeout_branch() -> None:
    document = approval_document()
    edited = copy.deepcopy(document)
    node_of(edited, "expire")["output"] = "'gone'"

    assert subgraph(edited, "wait") != subgraph(document, "wait")


def test_subgraph_fingerprint_changes_when_the_node_itself_changes() -> None:
    document = approval_document()
    edited = copy.deepcopy(document)
    node_of(edited, "wait")["filter"] = {"kind": "travel"}

    assert subgraph(edited, "wait") != subgraph(document, "wait")


def test_subgraph_fingerprint_is_stable_under_key_order() -> None:
    document = approval_document()
    reordered = shuffled_keys(document, random.Random(7))

    assert subgraph(reordered, "wait") == subgraph(document, "wait")


# --- handler modules ----------------------------------------------------------------


def test_handler_modules_lists_the_module_of_every_task() -> None:
    """The worker checks these against its --handler-modules allowlist (no ``code`` node)."""
    flow = Flow.from_document(approval_document())

    assert flow.handler_modules() == frozenset({"examples.handlers", "examples.auto"})


def test_flow_without_tasks_has_no_handler_modules() -> None:
    document = {"flow_id": "f", "start": "a", "nodes": [{"id": "a", "type": "end"}]}

    assert Flow.from_document(document).handler_modules() == frozenset()


def test_task_node_handler_module_is_the_part_before_the_colon() -> None:
    node = Flow.from_document(two_node_document(handler="pkg.sub.mod:func")).node("a")

    assert isinstance(node, TaskNode)
    assert node.handler_module == "pkg.sub.mod"


# --- the http node (E11) ------------------------------------------------------------------


def http_document(**node: Any) -> dict[str, Any]:
    call = {"id": "call", "type": "http", "url": "https://api.example/a", "next": "done"}
    return {
        "flow_id": "calls",
        "start": "call",
        "nodes": [call | node, {"id": "done", "type": "end"}],
    }


def test_an_http_node_reads_every_field_of_the_format() -> None:
    document = http_document(
        method="POST",
        headers={"X-A": "${input['a']}"},
        body={"k": "${k}"},
        expect=[200, "3xx"],
        blockPrivateNetworks=True,
        timeout=5000,
        retryTimes=2,
    )
    node = Flow.from_document(document).node("call")
    assert isinstance(node, HttpNode)
    assert (node.method, node.expect, node.block_private_networks) == ("POST", [200, "3xx"], True)
    assert node.targets() == ("done",)
    assert Flow.from_document(document).to_document()["nodes"][0]["blockPrivateNetworks"] is True


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"method": "get"}, "method 'get' is not one of DELETE, GET"),
        ({"method": "TRACE"}, "method 'TRACE' is not one of"),
        ({"url": "file:///etc/passwd"}, "must be an absolute http:// or https:// URL"),
        ({"url": "https://"}, "must be an absolute http:// or https:// URL"),
        ({"headers": {"Bad Name": "x"}}, "header name 'Bad Name' is not a valid"),
        ({"expect": []}, "expect must be a non-empty list"),
        ({"expect": [700]}, "expect: 700 is not an HTTP status"),
    ],
)
def test_an_unusable_http_node_is_a_named_error(node: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidHttpNodeError, match=re.escape(message)):
        Flow.from_document(http_document(**node))


def test_a_templated_url_is_checked_once_rendered() -> None:
    assert Flow.from_document(http_document(url="${base}/orders")).node("call")


def test_an_http_node_without_a_url_or_next_is_not_a_definition() -> None:
    document = http_document()
    del document["nodes"][0]["url"]
    with pytest.raises(InvalidFlowDocumentError, match=r"nodes\.0\.http\.url"):
        Flow.from_document(document)
