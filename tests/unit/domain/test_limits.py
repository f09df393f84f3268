"""One JSON depth and size limit, checked without recursion (R4)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given

from plaita.domain.errors import (
    PayloadLimitError,
    PayloadNotUnicodeError,
    PayloadTooDeepError,
    PayloadTooLargeError,
)
from plaita.domain.limits import (
    ENVELOPE_LIMIT,
    INPUT_LIMIT,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    WRAPPER_DEPTH,
    JsonLimit,
    check_json_text,
    check_json_value,
)

from ..strategies import json_values

SMALL = JsonLimit("test value", max_depth=3, max_bytes=40)


def nested(depth: int) -> Any:
    """A value ``depth`` containers deep: objects and arrays alternating."""
    value: Any = 1
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


@pytest.mark.parametrize(
    ("value", "depth"),
    [(1, 0), ("[[[", 0), ({}, 1), ([], 1), ({"a": [1]}, 2), ([[[]]], 3), ({"a": {"b": {}}}, 3)],
)
def test_depth_counts_nested_objects_and_arrays(value: Any, depth: int) -> None:
    check_json_value(value, JsonLimit("v", depth, 1000), field="v")
    if depth:
        with pytest.raises(PayloadTooDeepError):
            check_json_value(value, JsonLimit("v", depth - 1, 1000), field="v")


def test_a_value_over_the_depth_limit_is_refused_naming_field_and_limit() -> None:
    with pytest.raises(PayloadTooDeepError) as refused:
        check_json_value(nested(MAX_JSON_DEPTH + 1), INPUT_LIMIT, field="input")
    message = str(refused.value)
    assert "input (execution input)" in message
    assert f"more than {MAX_JSON_DEPTH} levels" in message
    assert "depth limit" in message


def test_a_value_at_the_depth_limit_is_accepted_and_encoded_compactly() -> None:
    value = nested(MAX_JSON_DEPTH)
    assert check_json_value(value, INPUT_LIMIT, field="input") == json.dumps(
        value, separators=(",", ":")
    )


def test_ten_thousand_levels_never_raise_recursion_error() -> None:
    with pytest.raises(PayloadTooDeepError):
        check_json_value(nested(10_000), INPUT_LIMIT, field="input")
    with pytest.raises(PayloadTooDeepError):
        check_json_text("[" * 10_000 + "]" * 10_000, ENVELOPE_LIMIT, field="envelope")


def test_a_cycle_is_refused_as_too_deep() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(PayloadTooDeepError):
        check_json_value(loop, INPUT_LIMIT, field="input")


def test_size_is_compact_utf8_json() -> None:
    check_json_value({"a": "x" * 32}, SMALL, field="v")  # {"a":"xxx…"} = 40 bytes
    with pytest.raises(PayloadTooLargeError, match=r"v \(test value\) is 41 bytes"):
        check_json_value({"a": "x" * 33}, SMALL, field="v")
    with pytest.raises(PayloadTooLargeError, match="at most 40 bytes"):
        check_json_value({"a": "é" * 17}, SMALL, field="v")  # 2 bytes each in UTF-8


def test_a_shared_list_cannot_make_the_walk_explode() -> None:
    """A list referenced many times over would be huge as JSON: refused without encoding."""
    value: Any = [0] * 1000
    for _ in range(10):
        value = [value] * 1000
    with pytest.raises(PayloadTooLargeError, match=f"more than {MAX_JSON_BYTES} bytes"):
        check_json_value(value, INPUT_LIMIT, field="input")


@pytest.mark.parametrize(
    ("text", "deep"),
    [
        ("[[[1]]]", False),
        ("[[[[1]]]]", True),
        ('["[[[[[[[["]', False),  # brackets inside a string do not nest
        ('{"a":"\\"[[[[[[["}', False),  # nor after an escaped quote
        ('{"a":{"b":{"c":{}}}}', True),
        ("[1,[2],[3],[4],[5]]", False),  # many openers, little depth
    ],
)
def test_text_depth_is_scanned_outside_strings(text: str, deep: bool) -> None:
    limit = JsonLimit("v", 3, 1000)
    if deep:
        with pytest.raises(PayloadTooDeepError):
            check_json_text(text, limit, field="v")
        with pytest.raises(PayloadTooDeepError):
            check_json_text(text.encode(), limit, field="v")
    else:
        check_json_text(text, limit, field="v")
        check_json_text(text.encode(), limit, field="v")


def test_text_over_the_size_limit_is_refused_before_it_is_scanned() -> None:
    with pytest.raises(PayloadTooLargeError, match="is 41 bytes"):
        check_json_text(b"x" * 41, SMALL, field="v")


def test_text_that_is_not_utf8_is_measured_and_scanned_as_bytes() -> None:
    check_json_text(b'{"a":"\xff\xfe"}', SMALL, field="v")


def test_the_envelope_wraps_the_values_it_carries() -> None:
    """An event's data sits two levels down in an envelope; every accepted value fits."""
    assert ENVELOPE_LIMIT.max_depth == MAX_JSON_DEPTH + WRAPPER_DEPTH >= MAX_JSON_DEPTH + 2
    data = nested(MAX_JSON_DEPTH)
    envelope = {"kind": "resume", "event": {"event_type": "t", "data": data}}
    check_json_text(json.dumps(envelope), ENVELOPE_LIMIT, field="envelope")


@given(json_values)
def test_text_and_value_checks_agree(value: Any) -> None:
    limit = JsonLimit("v", 2, 10_000)
    refusals = []
    for check in (
        lambda: check_json_value(value, limit, field="v"),
        lambda: check_json_text(json.dumps(value), limit, field="v"),
    ):
        try:
            check()
        except PayloadLimitError as exc:
            refusals.append(type(exc))
        else:
            refusals.append(None)
    assert refusals[0] == refusals[1]


@pytest.mark.timeout(10)
def test_an_unterminated_string_of_escaped_quotes_is_scanned_in_one_pass() -> None:
    """R4: a failed string match retried from every escaped quote was quadratic — an envelope
    of 1 MiB would have held a worker for about an hour. A parser stops at such a string, so
    the brackets after it cannot nest."""
    hostile = '"' + '\\"' * 400_000 + "[" * 100
    check_json_text(hostile, ENVELOPE_LIMIT, field="envelope")
    with pytest.raises(PayloadTooDeepError):
        check_json_text("[" * 100 + hostile, ENVELOPE_LIMIT, field="envelope")


@pytest.mark.parametrize("text", ["\ud800", "ok \udfff", "\udc80 from surrogateescape"])
def test_a_lone_surrogate_is_refused_by_name_with_its_position(text: str) -> None:
    with pytest.raises(PayloadNotUnicodeError, match=r"input holds a lone surrogate \(U\+D"):
        check_json_value({"name": text}, INPUT_LIMIT, field="input")
    encoded = json.dumps({"name": text}, ensure_ascii=False)
    with pytest.raises(PayloadNotUnicodeError, match="at character"):
        check_json_text(encoded, INPUT_LIMIT, field="input")


def test_a_surrogate_pair_and_its_escape_are_unicode_text() -> None:
    assert check_json_value({"emoji": "\U0001f600"}, INPUT_LIMIT, field="input")
    check_json_text('{"escaped": "\\ud800"}', INPUT_LIMIT, field="input")  # parsed, then checked
