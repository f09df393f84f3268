"""The builder's round trip (L2), over generated E1a documents of every node type: a canonical
document comes back from ``Flow.from_dict(doc).to_dict()`` unchanged, and the same document
with its defaults spelt out comes back canonical, with the same domain fingerprint."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plaita.domain.durations import MAX_NODE_TIMEOUT_MS, MAX_WAIT_MS
from plaita.domain.flow import Flow as Definition
from plaita.entrypoints.sdk.flow import Flow

from ..strategies import valid_ids

JSON = Any
PROPERTY = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

# No "$" in generated text: a "${" in a param would be a template that must parse. No lone
# surrogate either: a definition holding one is refused (tests/unit/domain/test_flow.py).
text = st.text(st.characters(exclude_characters="$", exclude_categories=("Cs",)), max_size=8)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=8,
)
non_null_json = json_values.filter(lambda value: value is not None)
json_objects = st.dictionaries(text, json_values, min_size=1, max_size=3)


def durations(maximum_ms: int) -> st.SearchStrategy[JSON]:
    iso = ["PT0S", "PT0.02S", "PT5S", "PT1H", "PT24H"]
    if maximum_ms == MAX_WAIT_MS:
        iso += ["P1D", "P30D", "P366D"]
    return st.one_of(
        st.integers(0, maximum_ms),
        st.floats(0, maximum_ms),
        st.integers(0, maximum_ms).map(str),
        st.sampled_from(iso),
    )


conditions = st.sampled_from(
    ["amount > 1", "flag", "not flag", "NODE.get('a') == 2", "tier == 'gold'", "$LAST_NODE is None"]
)
outputs = st.sampled_from(["$LAST_NODE", "{'v': amount}", "BRANCH", "len(NODE)", "input"])
templates = st.sampled_from(["${amount}", "n=${amount}", "${NODE['a']}", "${$LAST_NODE}"])
params = st.dictionaries(text, json_values | templates, min_size=1, max_size=3)
handlers = st.sampled_from(["m:f", "pkg.mod:fn", "examples.docs_handlers:echo"])
event_types = st.text(min_size=1, max_size=8).filter(str.strip)
urls = st.sampled_from(["https://api.example/a", "http://h:8080/x?y=1", "${base}/orders"])

#: Every canonical form of a handler: the default (abort, no default) is left out.
strategies = st.one_of(
    st.fixed_dictionaries({"strategy": st.just("continue")}),
    st.fixed_dictionaries(
        {"strategy": st.sampled_from(["abort", "continue"]), "default": non_null_json}
    ),
    st.fixed_dictionaries({"strategy": st.just("continue_with"), "default": json_values}),
)


@st.composite
def nodes(draw: st.DrawFn, node_id: str, ids: list[str]) -> dict[str, JSON]:
    target = st.sampled_from(ids)
    kind = draw(st.sampled_from(["task", "http", "if", "switch", "event", "sleep", "end"]))
    node: dict[str, JSON] = {"id": node_id, "type": kind}
    optional: dict[str, st.SearchStrategy[JSON]] = {}
    if kind == "task":
        node |= {"handler": draw(handlers), "next": draw(target)}
        optional["params"] = params
    elif kind == "http":
        node |= {"url": draw(urls), "next": draw(target)}
        optional |= {
            # Only non-default values: a canonical document leaves the defaults out.
            "method": st.sampled_from(["POST", "PUT", "DELETE"]),
            "headers": st.dictionaries(st.sampled_from(["Accept", "X-Id"]), templates, min_size=1),
            "body": non_null_json | templates,
            "expect": st.lists(st.sampled_from([200, 204, "2xx", "3xx", 404]), min_size=1),
            "blockPrivateNetworks": st.booleans(),
        }
    elif kind == "if":
        node |= {"condition": draw(conditions), "then": draw(target), "else": draw(target)}
    elif kind == "switch":
        cases = st.fixed_dictionaries({"when": conditions, "next": target})
        node["cases"] = draw(st.lists(cases, min_size=1, max_size=3))
        optional["default"] = target
    elif kind == "event":
        node |= {"event_type": draw(event_types), "next": draw(target)}
        optional |= {"filter": json_objects, "timeout_next": target}
    elif kind == "sleep":
        node |= {"duration": draw(durations(MAX_WAIT_MS)), "next": draw(target)}
    else:
        optional["output"] = outputs
    # The fields every node has, validated on all of them.
    optional |= {
        "timeout": durations(MAX_WAIT_MS if kind == "event" else MAX_NODE_TIMEOUT_MS),
        "retryTimes": st.integers(0, 100),
        "errorHandler": strategies,
        "timeoutHandler": strategies,
    }
    for field, values in optional.items():
        if draw(st.booleans()):
            node[field] = draw(values)
    return node


@st.composite
def canonical_documents(draw: st.DrawFn) -> dict[str, JSON]:
    ids = draw(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=7, unique=True))
    document: dict[str, JSON] = {"flow_id": draw(valid_ids)}
    version = draw(st.none() | st.text(min_size=1, max_size=6).filter(lambda v: v != "1"))
    if version is not None:
        document["version"] = version
    document["start"] = draw(st.sampled_from(ids))
    timeout = draw(st.none() | durations(MAX_WAIT_MS))
    if timeout is not None:
        document["timeout"] = timeout
    document["nodes"] = [draw(nodes(node_id, ids)) for node_id in ids]
    return document


#: Fields a document may spell out with their default value; none is in the canonical form.
FLOW_DEFAULTS = {"version": "1", "timeout": None}
NODE_DEFAULTS: dict[str, dict[str, JSON]] = {
    "task": {"params": {}},
    "switch": {"default": None},
    "http": {"method": "GET", "headers": {}, "body": None, "expect": None},
    "event": {"filter": {}, "timeout_next": None},
    "end": {"output": None},
}
COMMON_DEFAULTS = {
    "timeout": None,
    "retryTimes": None,
    "errorHandler": {"strategy": "abort"},
    "timeoutHandler": {"strategy": "abort", "default": None},
}


@st.composite
def spelt_out(draw: st.DrawFn, document: dict[str, JSON]) -> dict[str, JSON]:
    """``document`` with some defaults written out, as a hand-written file may have them."""

    def fill(target: dict[str, JSON], defaults: dict[str, JSON]) -> dict[str, JSON]:
        filled = dict(target)
        for field, value in defaults.items():
            if field not in filled and draw(st.booleans()):
                filled[field] = value
        for field in ("errorHandler", "timeoutHandler"):
            # continue_with without a default means a default of null.
            continue_with_null = {"strategy": "continue_with", "default": None}
            if filled.get(field) == continue_with_null and draw(st.booleans()):
                filled[field] = {"strategy": "continue_with"}
        return filled

    verbose = fill(document, FLOW_DEFAULTS)
    verbose["nodes"] = [
        fill(node, NODE_DEFAULTS.get(node["type"], {}) | COMMON_DEFAULTS)
        for node in document["nodes"]
    ]
    return verbose


@PROPERTY
@given(canonical_documents())
def test_a_canonical_document_round_trips_unchanged(document: dict[str, JSON]) -> None:
    flow = Flow.from_dict(document)
    assert flow.to_dict() == document
    assert Flow.from_json(flow.to_json()).to_dict() == document
    assert json.loads(flow.to_json()) == document
    assert flow.build().fingerprint == Definition.from_document(document).fingerprint


@PROPERTY
@given(canonical_documents().flatmap(lambda doc: st.tuples(st.just(doc), spelt_out(doc))))
def test_an_accepted_document_round_trips_to_its_canonical_form(
    pair: tuple[dict[str, JSON], dict[str, JSON]],
) -> None:
    canonical, verbose = pair
    flow = Flow.from_dict(verbose)
    assert flow.to_dict() == canonical
    assert flow.build().fingerprint == Definition.from_document(verbose).fingerprint
