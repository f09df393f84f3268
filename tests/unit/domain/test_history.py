"""The execution history's entries, bounds and paging windows (pure rules)."""

from __future__ import annotations

import pytest

from plaita.domain import history
from plaita.domain.errors import InvalidOperatorRequestError
from plaita.domain.failures import FailureKind
from plaita.domain.history import (
    MAX_MESSAGE_CHARS,
    MAX_NAME_CHARS,
    MAX_TRACEBACK_CHARS,
    HistoryEntry,
    HistoryKind,
    history_window,
    page_of,
)


@pytest.mark.parametrize(
    ("entry", "kind", "detail"),
    [
        (
            history.started(5, input_size=12, via="start", worker="w1"),
            HistoryKind.STARTED,
            {"input_bytes": 12, "via": "start"},
        ),
        (
            history.node_started(5, node_id="a", attempt=2, worker="w1"),
            HistoryKind.NODE_STARTED,
            {},
        ),
        (
            history.node_finished(
                9, node_id="a", attempt=1, worker="w1", result_size=3, duration_ms=4
            ),
            HistoryKind.NODE_FINISHED,
            {"result_bytes": 3, "duration_ms": 4},
        ),
        (
            history.node_finished(
                9, node_id="a", attempt=1, worker="w1", result_size=3, duration_ms=-2
            ),
            HistoryKind.NODE_FINISHED,
            {"result_bytes": 3, "duration_ms": 0},
        ),
        (
            history.retry_scheduled(9, node_id="a", attempt=1, worker="w1", due_ms=1_009),
            HistoryKind.RETRY_SCHEDULED,
            {"due_ms": 1_009, "next_attempt": 2},
        ),
        (
            history.suspended(9, node_id="w", worker=None, event_type="paid", timer_due_ms=None),
            HistoryKind.SUSPENDED,
            {"event_type": "paid"},
        ),
        (
            history.suspended(9, node_id="w", worker=None, event_type=None, timer_due_ms=77),
            HistoryKind.SUSPENDED,
            {"timer_due_ms": 77},
        ),
        (
            history.event_received(9, node_id="w", worker="w1", event_id="e1", event_type="paid"),
            HistoryKind.EVENT_RECEIVED,
            {"event_id": "e1", "event_type": "paid"},
        ),
        (history.timer_fired(9, node_id="w", worker="w1"), HistoryKind.TIMER_FIRED, {}),
        (
            history.rate_limited(9, node_id="call", worker="w1", key="api", due_ms=1_209),
            HistoryKind.RATE_LIMITED,
            {"key": "api", "due_ms": 1_209},
        ),
        (
            history.lease_lost(9, fenced=False, node_id="a", worker="w1", generation=3),
            HistoryKind.LEASE_LOST,
            {"generation": 3},
        ),
        (
            history.lease_lost(9, fenced=True, node_id="a", worker="w1", generation=3),
            HistoryKind.FENCED,
            {"generation": 3},
        ),
        (
            history.operator_action(9, who="ops@x", action="cancel"),
            HistoryKind.OPERATOR_ACTION,
            {"who": "ops@x", "action": "cancel"},
        ),
        (
            history.ended(9, status="completed", worker="w1"),
            HistoryKind.ENDED,
            {"status": "completed"},
        ),
        (
            history.ended(9, status="error", worker="w1", error_code=500, message="boom"),
            HistoryKind.ENDED,
            {"status": "error", "error_code": 500, "message": "boom"},
        ),
    ],
)
def test_builders_record_their_facts_and_survive_the_stored_form(
    entry: HistoryEntry, kind: HistoryKind, detail: dict[str, object]
) -> None:
    assert entry.kind is kind
    assert dict(entry.detail) == detail
    assert HistoryEntry.decode(entry.encode(), 7) == HistoryEntry(
        entry.kind, entry.at_ms, entry.node_id, entry.attempt, entry.worker, entry.detail, 7
    )


def test_node_failed_bounds_message_and_traceback_and_names_the_failure() -> None:
    entry = history.node_failed(
        1,
        node_id="n" * 500,
        attempt=3,
        worker="w1",
        error_class="TimeoutError",
        message="m" * 5_000,
        traceback="head\n" + "x" * 20_000 + "\nraise TimeoutError",
        failure=FailureKind.TRANSIENT,
        duration_ms=12,
    )
    assert entry.node_id is not None and len(entry.node_id) <= MAX_NAME_CHARS
    assert len(entry.detail["message"]) <= MAX_MESSAGE_CHARS
    assert entry.detail["message"].endswith("more characters]")
    traceback = entry.detail["traceback"]
    assert len(traceback) <= MAX_TRACEBACK_CHARS
    assert traceback.startswith("[... ") and traceback.endswith("raise TimeoutError")
    assert entry.detail["failure"] == "transient"
    deterministic = history.node_failed(
        1,
        node_id="a",
        attempt=1,
        worker=None,
        error_class="ValueError",
        message="bad",
        traceback="tb",
        failure=FailureKind.DETERMINISTIC,
        duration_ms=0,
    )
    assert deterministic.detail == {
        "error_class": "ValueError",
        "message": "bad",
        "traceback": "tb",
        "failure": "deterministic",
        "duration_ms": 0,
    }


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short", 100, "short"),
        ("x" * 100, 100, "x" * 100),
        ("x" * 101, 100, "x" * 60 + " [... 41 more characters]"),
    ],
)
def test_bounded_keeps_the_head_and_counts_the_cut(text: str, limit: int, expected: str) -> None:
    assert history.bounded(text, limit) == expected
    assert len(history.bounded(text, limit)) <= limit


def test_bounded_tail_keeps_the_end() -> None:
    assert history.bounded_tail("a" * 50 + "END", 45) == "[... 48 earlier characters]\naaEND"
    assert history.bounded_tail("short", 45) == "short"


@pytest.mark.parametrize(
    ("total", "held", "after", "limit", "start", "stop", "dropped"),
    [
        (0, 0, None, 10, 0, 0, 0),  # nothing written
        (5, 5, None, 10, 0, 5, 0),  # everything fits
        (5, 5, None, 2, 0, 2, 0),  # first page
        (5, 5, 2, 2, 2, 4, 0),  # after seq 2: seqs 3 and 4
        (5, 5, 5, 2, 5, 5, 0),  # caught up
        (12, 10, None, 3, 0, 3, 2),  # the cap dropped seqs 1-2: starts at seq 3
        (12, 10, 1, 3, 0, 3, 2),  # a cursor into what was dropped starts at the oldest kept
        (12, 10, 10, 5, 8, 10, 2),  # seqs 11, 12
    ],
)
def test_history_window(
    total: int, held: int, after: int | None, limit: int, start: int, stop: int, dropped: int
) -> None:
    window = history_window(total=total, held=held, after=after, limit=limit)
    assert (window.start, window.stop, window.dropped) == (start, stop, dropped)


def test_page_numbers_entries_and_stops_the_cursor_at_the_newest() -> None:
    texts = [history.timer_fired(i, node_id="a", worker=None).encode() for i in range(12)]
    kept = texts[2:]  # the cap (10) dropped two
    window = history_window(total=12, held=10, after=None, limit=4)
    page = page_of(kept[window.start : window.stop], window)
    assert [entry.seq for entry in page.entries] == [3, 4, 5, 6]
    assert (page.next_cursor, page.dropped) == (6, 2)
    last = history_window(total=12, held=10, after=10, limit=4)
    final = page_of(kept[last.start : last.stop], last)
    assert [entry.seq for entry in final.entries] == [11, 12]
    assert final.next_cursor is None


@pytest.mark.parametrize("limit", [0, -1, history.MAX_HISTORY_PAGE + 1, True])
def test_a_bad_limit_is_a_named_error(limit: int) -> None:
    with pytest.raises(InvalidOperatorRequestError, match="history page limit"):
        history.check_history_limit(limit)


@pytest.mark.parametrize("after", [-1, True])
def test_a_bad_cursor_is_a_named_error(after: int) -> None:
    with pytest.raises(InvalidOperatorRequestError, match="history cursor"):
        history.check_history_cursor(after)


@pytest.mark.parametrize(
    ("held", "appended", "cap", "dropped"), [(0, 2, 10, 0), (9, 2, 10, 1), (10, 3, 10, 3)]
)
def test_kept_after_append(held: int, appended: int, cap: int, dropped: int) -> None:
    assert history.kept_after_append(held, appended, cap) == dropped


def test_json_size_counts_compact_bytes() -> None:
    assert history.json_size({"a": [1, 2]}) == len('{"a":[1,2]}')
    assert history.json_size("é") == len('"\\u00e9"')


def test_a_node_started_entry_keeps_small_params_and_only_the_size_of_large_ones() -> None:
    from plaita.domain.history import MAX_PARAMS_BYTES

    small = history.node_started(
        1, node_id="a", attempt=2, worker="w", params={"id": 42}, has_params=True
    )
    assert small.detail == {"params": {"id": 42}}
    big_value = {"blob": "x" * MAX_PARAMS_BYTES}
    big = history.node_started(
        1, node_id="a", attempt=2, worker="w", params=big_value, has_params=True
    )
    assert big.detail == {"params_bytes": history.json_size(big_value)}
    assert history.node_started(1, node_id="a", attempt=1, worker="w").detail == {}


@pytest.mark.parametrize(("priority", "expected"), [("high", "high"), ("low", "low"), (None, None)])
def test_the_summary_names_the_priority_its_start_asked_for(
    priority: str | None, expected: str | None
) -> None:
    """A start that was not normal says so in ``executions show``; a normal one (its accepted
    entry names none) says nothing."""
    accepted = history.accepted(
        1, input_size=2, via="cli", by="ops", dedup_key=None, priority=priority
    )
    started = history.started(2, input_size=2, via="start", worker="w-1")

    summary = history.summarize([accepted, started], dropped=0)

    assert summary.priority == expected
    assert summary.to_json()["priority"] == expected
