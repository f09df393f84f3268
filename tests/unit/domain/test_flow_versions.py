"""The version order and the latest rule of ``plaita.domain.flow_versions`` (S2): every
example of its docstring, a total order consistent with equality, and one test per row of
the table V1-V5."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.flow_versions import (
    LatestDecision,
    LatestReason,
    is_higher,
    latest_decision,
    version_key,
)

#: Every pair of the module docstring, lower first, and a few more of the same kinds.
ORDERED = [
    ("2", "10"),
    ("1.9", "1.10"),
    ("v2", "v3"),
    ("v3", "v10"),
    ("1", "1.0"),
    ("2", "v1"),
    ("01", "1"),
    ("1.0", "1.0-rc1"),
    ("9" * 5000, "1" + "0" * 5000),  # numbers longer than int() would convert
    ("2024-09-30", "2024-10-01"),
    ("A", "a"),  # text by code point: case counts
]


@pytest.mark.parametrize(("lower", "higher"), ORDERED)
def test_the_documented_examples_are_in_order(lower: str, higher: str) -> None:
    assert is_higher(higher, lower)
    assert not is_higher(lower, higher)
    assert version_key(lower) < version_key(higher)


def test_a_mixed_list_sorts_naturally() -> None:
    versions = ["10", "v10", "1.10", "2", "v2", "1.9", "1", "1.0", "01", "v1"]
    assert sorted(versions, key=version_key) == [
        "01",
        "1",
        "1.0",
        "1.9",
        "1.10",
        "2",
        "10",
        "v1",
        "v2",
        "v10",
    ]


#: Versions built from the pieces that make the order interesting: digits (leading zeros
#: too), separators, letters of both cases and other text.
VERSIONS = st.lists(
    st.one_of(
        st.from_regex(r"[0-9]{1,4}", fullmatch=True),
        st.sampled_from([".", "-", "v", "V", "rc", "é", "_"]),
        st.text(min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=6,
).map("".join)


@given(VERSIONS, VERSIONS)
def test_the_order_is_total_and_consistent_with_equality(a: str, b: str) -> None:
    """Exactly one of a < b, a == b, b < a; equal keys only for equal versions."""
    answers = [is_higher(b, a), a == b, is_higher(a, b)]
    assert answers.count(True) == 1, (a, b)
    assert (version_key(a) == version_key(b)) == (a == b)


@given(VERSIONS, VERSIONS, VERSIONS)
def test_the_order_is_transitive(a: str, b: str, c: str) -> None:
    low, middle, high = sorted([a, b, c], key=version_key)
    assert not is_higher(low, middle) and not is_higher(middle, high)
    if low != high:
        assert is_higher(high, low)


@given(st.from_regex(r"[0-9]{1,30}", fullmatch=True), st.from_regex(r"[0-9]{1,30}", fullmatch=True))
def test_plain_numbers_compare_as_numbers(a: str, b: str) -> None:
    if int(a) != int(b):
        assert is_higher(a, b) == (int(a) > int(b))


# --- the latest rule (V1-V5) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "version", "current", "explicit", "reason", "moves", "latest"),
    [
        ("V1", "1", None, False, LatestReason.FIRST, True, "1"),
        ("V1", "1", None, True, LatestReason.FIRST, True, "1"),
        ("V2", "2", "2", False, LatestReason.ALREADY, False, "2"),
        ("V2", "2", "2", True, LatestReason.ALREADY, False, "2"),
        ("V3", "10", "9", False, LatestReason.HIGHER, True, "10"),
        ("V3", "v3", "v2", True, LatestReason.HIGHER, True, "v3"),
        ("V4", "1", "2", False, LatestReason.LOWER, False, "2"),
        ("V4", "1.9", "1.10", False, LatestReason.LOWER, False, "1.10"),
        ("V5", "1", "2", True, LatestReason.CHOSEN, True, "1"),
    ],
)
def test_whether_a_registration_moves_the_latest(
    row: str,
    version: str,
    current: str | None,
    explicit: bool,
    reason: LatestReason,
    moves: bool,
    latest: str,
) -> None:
    decision = latest_decision(version, current, explicit=explicit)

    assert decision == LatestDecision(version, current, reason), row
    assert decision.moves is moves, row
    assert decision.latest == latest, row
    assert decision.is_latest is (latest == version), row


@given(st.lists(VERSIONS, min_size=1, max_size=8))
def test_by_the_rule_the_latest_is_the_highest_whatever_the_order_of_registrations(
    versions: list[str],
) -> None:
    """Registrations without ``explicit``, in any order (repeats too): the highest wins."""
    current: str | None = None
    for version in versions:
        current = latest_decision(version, current, explicit=False).latest
    assert current == max(versions, key=version_key)
