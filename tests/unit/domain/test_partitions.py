"""Queue partitions: a carrier's partition and the message ids that name it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.partitions import (
    MAX_PARTITIONS,
    check_partitions,
    partition_of,
    qualified_id,
    split_id,
)
from plaita.domain.tombstone import parse_stream_id_ms

# CRC-32 of the UTF-8 execution id, mod P: pinned so a release cannot move an execution.
PINNED = [
    ("x-0", 3, 2),
    ("x-1", 3, 1),
    ("x-2", 3, 0),
    ("x-3", 3, 0),
    ("order-42", 1, 0),
    ("order-42", 7, 1),
    ("order-42", 1024, 734),
]


@pytest.mark.parametrize(("execution_id", "partitions", "expected"), PINNED)
def test_the_partition_of_an_execution_is_pinned(
    execution_id: str, partitions: int, expected: int
) -> None:
    assert partition_of(execution_id, partitions) == expected


ids = st.text(min_size=1, max_size=60)
counts = st.integers(min_value=1, max_value=MAX_PARTITIONS)


@given(ids, counts)
def test_every_carrier_of_an_execution_lands_on_one_partition_in_range(
    execution_id: str, partitions: int
) -> None:
    first = partition_of(execution_id, partitions)
    assert 0 <= first < partitions
    assert all(partition_of(execution_id, partitions) == first for _ in range(3))


@given(ids)
def test_one_partition_is_always_partition_0(execution_id: str) -> None:
    assert partition_of(execution_id, 1) == 0


def test_executions_spread_over_the_partitions() -> None:
    seen = {partition_of(f"execution-{n}", 8) for n in range(200)}
    assert seen == set(range(8))


@pytest.mark.parametrize("bad", [0, -1, MAX_PARTITIONS + 1, True, 2.0, "3"])
def test_a_partition_count_outside_1_to_1024_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="from 1 to 1024"):
        check_partitions(bad)  # type: ignore[arg-type]


stream_ids = st.tuples(
    st.integers(min_value=0, max_value=2**48), st.integers(min_value=0, max_value=2**32)
).map(lambda parts: f"{parts[0]}-{parts[1]}")


@given(stream_ids, st.data())
def test_a_message_id_names_its_partition_and_keeps_its_milliseconds(
    stream_id: str, data: st.DataObject
) -> None:
    partitions = data.draw(counts)
    partition = data.draw(st.integers(min_value=0, max_value=partitions - 1))

    message_id = qualified_id(stream_id, partition, partitions)

    assert split_id(message_id, partitions) == (partition, stream_id)
    assert parse_stream_id_ms(message_id) == parse_stream_id_ms(stream_id)


@given(stream_ids)
def test_with_one_partition_a_message_id_is_the_stream_id(stream_id: str) -> None:
    assert qualified_id(stream_id, 0, 1) == stream_id
    assert split_id(stream_id, 1) == (0, stream_id)


def test_message_ids_of_one_partition_keep_their_order() -> None:
    ids = [qualified_id(f"5-{seq}", 2, 3) for seq in range(4)]
    assert ids == ["5-2", "5-5", "5-8", "5-11"]


@pytest.mark.parametrize("bad", ["", "1", "a-1", "1-b", "-1", "1-", "\uff11-1"])
def test_what_is_not_a_message_id_names_no_partition(bad: str) -> None:
    assert split_id(bad, 3) is None
