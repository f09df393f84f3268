"""Priorities: parsing, the read rule with its share for lower levels, and message ids."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import InvalidPriorityError
from plaita.domain.partitions import MAX_PARTITIONS, qualified_id, split_id
from plaita.domain.priorities import (
    PRIORITIES,
    SHARE_CYCLE,
    Priority,
    parse_priority,
    priority_id,
    split_priority_id,
    take_in_priority_order,
)
from plaita.domain.tombstone import parse_stream_id_ms

H, N, L = Priority.HIGH, Priority.NORMAL, Priority.LOW


@pytest.mark.parametrize("value", ["high", "normal", "low"])
def test_each_level_parses_by_its_name(value: str) -> None:
    assert parse_priority(value) == Priority(value)


@pytest.mark.parametrize("value", ["HIGH", "urgent", "", " low", 1, None, True])
def test_anything_else_is_refused_naming_the_value_and_the_allowed_ones(value: object) -> None:
    with pytest.raises(InvalidPriorityError) as refused:
        parse_priority(value)
    assert repr(value) in str(refused.value)
    assert "high, normal, low" in str(refused.value)


def test_the_share_cycle_is_seven_high_two_normal_one_low() -> None:
    assert Counter(SHARE_CYCLE) == {H: 7, N: 2, L: 1}


# (count, ready high/normal/low, turn) -> (taken high/normal/low, next turn)
RULE = [
    # all three have work: a read of 10 from the cycle's start takes 7 : 2 : 1
    (10, (50, 50, 50), 0, (7, 2, 1), 0),
    # a read of 1 takes whose turn it is
    (1, (5, 5, 5), 0, (1, 0, 0), 1),
    (1, (5, 5, 5), 2, (0, 1, 0), 3),
    (1, (5, 5, 5), 5, (0, 0, 1), 6),
    # a level with nothing ready gives its turn to the highest level that has something
    (1, (0, 5, 5), 0, (0, 1, 0), 1),
    (1, (5, 0, 5), 2, (1, 0, 0), 3),
    (1, (5, 5, 0), 5, (1, 0, 0), 6),
    (10, (0, 50, 50), 0, (0, 9, 1), 0),
    (10, (50, 0, 50), 0, (9, 0, 1), 0),
    (10, (0, 0, 50), 0, (0, 0, 10), 0),
    # fewer ready than asked: everything ready, a turn per carrier taken
    (10, (1, 1, 1), 0, (1, 1, 1), 3),
    (5, (0, 0, 0), 4, (0, 0, 0), 4),
    # nothing to take: nothing taken, the turn stays
    (0, (5, 5, 5), 7, (0, 0, 0), 7),
    (-3, (5, 5, 5), 7, (0, 0, 0), 7),
    (3, (-1, 0, 2), 0, (0, 0, 2), 2),
    # a turn beyond the cycle wraps
    (1, (5, 5, 5), 12, (0, 1, 0), 3),
]


@pytest.mark.parametrize(("count", "ready", "turn", "taken", "next_turn"), RULE)
def test_the_read_rule(
    count: int,
    ready: tuple[int, int, int],
    turn: int,
    taken: tuple[int, int, int],
    next_turn: int,
) -> None:
    decision = take_in_priority_order(count, dict(zip(PRIORITIES, ready, strict=True)), turn)
    assert tuple(decision.taken[level] for level in PRIORITIES) == taken
    assert decision.next_turn == next_turn


@given(
    count=st.integers(min_value=-2, max_value=40),
    ready=st.tuples(*(st.integers(min_value=0, max_value=30) for _ in PRIORITIES)),
    turn=st.integers(min_value=0, max_value=100),
)
def test_a_read_takes_all_it_may_and_never_more_than_a_level_has(
    count: int, ready: tuple[int, int, int], turn: int
) -> None:
    decision = take_in_priority_order(count, dict(zip(PRIORITIES, ready, strict=True)), turn)
    assert decision.total == min(max(count, 0), sum(ready))
    for level, has in zip(PRIORITIES, ready, strict=True):
        assert 0 <= decision.taken[level] <= has
    assert 0 <= decision.next_turn < len(SHARE_CYCLE)


@given(
    reads=st.lists(st.integers(min_value=1, max_value=13), min_size=1, max_size=60),
    backlog=st.integers(min_value=0, max_value=5),
)
def test_no_level_starves_while_all_three_are_backlogged(reads: list[int], backlog: int) -> None:
    """Over any run of reads of any sizes, with every level backlogged, each level's share
    of what was taken stays within one cycle of 7 : 2 : 1; each carrier is taken once, none
    is lost (every carrier is numbered; the taken ones are the oldest of their level)."""
    queues = {level: list(range(1000)) for level in PRIORITIES}
    taken: dict[Priority, list[int]] = {level: [] for level in PRIORITIES}
    turn = 0
    for count in reads:
        # what a read sees ready: at least ``count`` of each level, more when read ahead
        ready = {level: min(len(queues[level]), count + backlog) for level in PRIORITIES}
        decision = take_in_priority_order(count, ready, turn)
        turn = decision.next_turn
        assert decision.total == count
        for level in PRIORITIES:
            n = decision.taken[level]
            taken[level] += queues[level][:n]
            del queues[level][:n]
    total = sum(reads)
    cycles, rest = divmod(total, len(SHARE_CYCLE))
    for level, weight in zip(PRIORITIES, (7, 2, 1), strict=True):
        assert cycles * weight <= len(taken[level]) <= cycles * weight + min(rest, weight)
        assert taken[level] == list(range(len(taken[level])))  # oldest first, none twice
        assert len(taken[level]) + len(queues[level]) == 1000  # none lost


# --- message ids ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stream_id", "level", "message_id"),
    [
        ("1760000000000-0", N, "1760000000000-0"),
        ("1760000000000-7", H, "1760000000000-1000000000000000007"),
        ("1760000000000-7", L, "1760000000000-2000000000000000007"),
    ],
)
def test_a_message_id_names_its_level_and_a_normal_one_is_unchanged(
    stream_id: str, level: Priority, message_id: str
) -> None:
    assert priority_id(stream_id, level) == message_id
    assert split_priority_id(message_id) == (level, stream_id)


@pytest.mark.parametrize(
    "message_id", ["", "abc", "1-", "-1", "1-x", "1760000000000-3000000000000000000"]
)
def test_what_is_no_message_id_names_no_level(message_id: str) -> None:
    assert split_priority_id(message_id) is None


@given(
    ms=st.integers(min_value=0, max_value=2**48),
    seq=st.integers(min_value=0, max_value=2**40),
    partitions=st.integers(min_value=1, max_value=MAX_PARTITIONS),
    partition=st.integers(min_value=0, max_value=MAX_PARTITIONS - 1),
    level=st.sampled_from(PRIORITIES),
)
def test_a_message_id_round_trips_its_partition_and_level_and_keeps_its_age(
    ms: int, seq: int, partitions: int, partition: int, level: Priority
) -> None:
    partition %= partitions
    stream_id = f"{ms}-{seq}"
    message_id = priority_id(qualified_id(stream_id, partition, partitions), level)
    where = split_priority_id(message_id)
    assert where is not None and where[0] is level
    assert split_id(where[1], partitions) == (partition, stream_id)
    assert parse_stream_id_ms(message_id) == ms  # the carrier-age gate reads it (W14)
