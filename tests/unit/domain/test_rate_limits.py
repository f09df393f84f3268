"""The rate limit rule (W23): GCRA per bucket, the ``rate_limit`` field's checks."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plaita.domain.errors import InvalidFlowDocumentError, InvalidRateLimitError
from plaita.domain.flow import Flow
from plaita.domain.rate_limits import (
    MAX_PER_SECOND,
    Bucket,
    RateLimitSpec,
    RateRule,
    Take,
    bucket_ttl_ms,
    contended,
    decide_take,
    default_burst,
    key_value,
    node_bucket,
    rule_of,
)

NOW = 1_760_000_000_000
NOW_US = NOW * 1_000
FIVE = RateRule(per_second=5, burst=5)  # interval 200 ms, tolerance 800 ms


def tat(tat_us: int, tail_us: int = 0) -> Bucket:
    return Bucket(tat_us, tail_us)


@pytest.mark.parametrize(
    ("stored", "now_ms", "rule", "expected"),
    [
        # no bucket: full; the first take moves the TAT one interval past now
        (None, NOW, FIVE, Take(True, NOW, tat(NOW_US + 200_000))),
        # a TAT in the past is the same as no bucket
        (tat(NOW_US - 5_000_000), NOW, FIVE, Take(True, NOW, tat(NOW_US + 200_000))),
        # four taken at once: the fifth still fits the burst
        (tat(NOW_US + 800_000), NOW, FIVE, Take(True, NOW, tat(NOW_US + 1_000_000))),
        # five taken at once: the sixth waits one interval; the next waiter's turn is after
        (
            tat(NOW_US + 1_000_000),
            NOW,
            FIVE,
            Take(False, NOW + 200, tat(NOW_US + 1_000_000, NOW_US + 400_000)),
        ),
        # ... and is admitted then (an admitted take leaves the queue's tail as it is)
        (
            tat(NOW_US + 1_000_000, NOW_US + 400_000),
            NOW + 200,
            FIVE,
            Take(True, NOW + 200, tat(NOW_US + 1_200_000, NOW_US + 400_000)),
        ),
        # a second waiter in a row is due one interval after the first
        (
            tat(NOW_US + 1_000_000, NOW_US + 400_000),
            NOW,
            FIVE,
            Take(False, NOW + 400, tat(NOW_US + 1_000_000, NOW_US + 600_000)),
        ),
        # a tail that has fallen behind the next free token is moved up to it
        (
            tat(NOW_US + 1_000_000, NOW_US - 7_000_000),
            NOW,
            FIVE,
            Take(False, NOW + 200, tat(NOW_US + 1_000_000, NOW_US + 400_000)),
        ),
        # burst 1: one at a time, the next one interval after
        (
            tat(NOW_US + 500_000),
            NOW,
            RateRule(2, 1),
            Take(False, NOW + 500, tat(NOW_US + 500_000, NOW_US + 1_000_000)),
        ),
        # a due time between two milliseconds is the later one; with no tolerance to absorb
        # that, the next turn is one interval after that millisecond
        (
            tat(NOW_US + 333_334),
            NOW,
            RateRule(3, 1),
            Take(False, NOW + 334, tat(NOW_US + 333_334, NOW_US + 667_334)),
        ),
        # ... a tolerance of a millisecond or more absorbs it: turns one exact interval apart
        (
            tat(NOW_US + 1_000_000),
            NOW,
            RateRule(3, 3),
            Take(False, NOW + 334, tat(NOW_US + 1_000_000, NOW_US + 666_666)),
        ),
        # half a run a second: one every 2 s
        (None, NOW, RateRule(0.5, 1), Take(True, NOW, tat(NOW_US + 2_000_000))),
    ],
    ids=[
        "no-bucket",
        "passed-tat",
        "last-of-burst",
        "over-burst",
        "admitted-at-due",
        "second-waiter",
        "tail-behind",
        "burst-one",
        "due-rounded-up",
        "rounding-absorbed",
        "fractional-rate",
    ],
)
def test_decide_take(stored: Bucket | None, now_ms: int, rule: RateRule, expected: Take) -> None:
    assert decide_take(stored, now_ms, rule) == expected


@pytest.mark.parametrize(
    ("per_second", "interval_us"),
    [(1, 1_000_000), (3, 333_334), (0.5, 2_000_000), (MAX_PER_SECOND, 100)],
)
def test_the_interval_is_rounded_up_never_faster_than_asked(
    per_second: float, interval_us: int
) -> None:
    assert RateRule(per_second, 1).interval_us == interval_us


def test_a_contended_take_is_tried_again_one_interval_later() -> None:
    assert contended(NOW, FIVE) == Take(False, NOW + 200)
    assert contended(NOW, RateRule(MAX_PER_SECOND, 1)) == Take(False, NOW + 1)


@pytest.mark.parametrize(
    ("bucket", "ttl_ms"),
    [
        (tat(NOW_US + 200_000), 1_200),
        (tat(NOW_US + 1), 1_001),
        (tat(NOW_US), 1_000),
        (tat(NOW_US - 10), 1_000),
        (tat(NOW_US + 200_000, NOW_US + 3_000_000), 4_000),  # waiters queued: kept for them
        (tat(NOW_US + 200_000, NOW_US - 10), 1_200),
    ],
)
def test_a_bucket_is_kept_until_its_tat_and_tail_have_passed_and_a_grace(
    bucket: Bucket, ttl_ms: int
) -> None:
    assert bucket_ttl_ms(bucket, NOW) == ttl_ms


@pytest.mark.parametrize(
    ("per_second", "burst"), [(0.5, 1), (1, 1), (2.5, 3), (10, 10), (MAX_PER_SECOND, 10_000)]
)
def test_the_default_burst_is_one_second_of_the_rate(per_second: float, burst: int) -> None:
    assert default_burst(per_second) == burst


@pytest.mark.parametrize(
    ("spec", "rule"),
    [
        (RateLimitSpec(per_second=10), RateRule(10.0, 10)),
        (RateLimitSpec(per_second=0.5, burst=3, key="${input.x}"), RateRule(0.5, 3)),
        (RateLimitSpec(per_second=MAX_PER_SECOND, burst=1), RateRule(MAX_PER_SECOND, 1)),
    ],
)
def test_rule_of_a_good_rate_limit(spec: RateLimitSpec, rule: RateRule) -> None:
    assert rule_of(spec, where="node 'n'") == rule


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        (RateLimitSpec(), "per_second must be a number above 0"),
        (RateLimitSpec(per_second=0), "got 0"),
        (RateLimitSpec(per_second=-1), "got -1"),
        (RateLimitSpec(per_second=MAX_PER_SECOND + 1), f"at most {MAX_PER_SECOND}"),
        (RateLimitSpec(per_second=True), "got True"),
        (RateLimitSpec(per_second="10"), "got '10'"),
        (RateLimitSpec(per_second=math.inf), "got inf"),
        (RateLimitSpec(per_second=5, burst=0), "burst must be a whole number"),
        (RateLimitSpec(per_second=5, burst=2.5), "got 2.5"),
        (RateLimitSpec(per_second=5, burst=False), "got False"),
        (RateLimitSpec(per_second=5, key=""), "key must be a non-empty string"),
        (RateLimitSpec(per_second=5, key=7), "got 7"),
    ],
)
def test_rule_of_a_bad_rate_limit_names_the_value(spec: RateLimitSpec, named: str) -> None:
    with pytest.raises(InvalidRateLimitError, match="node 'n' rate_limit: ") as caught:
        rule_of(spec, where="node 'n'")
    assert named in str(caught.value)


@pytest.mark.parametrize(
    ("rendered", "key"),
    [
        ("acme", "acme"),
        (42, "42"),
        (True, "true"),
        (None, "null"),
        ({"b": 1, "a": 2}, '{"a":2,"b":1}'),
    ],
)
def test_a_rendered_key_names_its_bucket(rendered: object, key: str) -> None:
    assert key_value(rendered) == key


def test_a_node_without_a_key_has_its_own_bucket() -> None:
    assert node_bucket("billing", "charge") == "billing:charge"


rules = st.builds(
    RateRule,
    per_second=st.one_of(
        st.integers(1, 50).map(float), st.floats(0.1, 50, allow_nan=False, allow_infinity=False)
    ),
    burst=st.integers(1, 20),
)
#: Gaps between take attempts, in ms (many at the same millisecond).
gaps = st.lists(st.integers(0, 700), min_size=1, max_size=120)


def _admitted(rule: RateRule, offsets: list[int]) -> list[int]:
    bucket: Bucket | None = None
    now = NOW
    admitted = []
    for gap in offsets:
        now += gap
        take = decide_take(bucket, now, rule)
        bucket = take.bucket
        if take.allowed:
            admitted.append(now)
    return admitted


@settings(max_examples=300, deadline=None)
@given(rule=rules, offsets=gaps)
def test_no_window_admits_more_than_the_burst_plus_the_rate(
    rule: RateRule, offsets: list[int]
) -> None:
    """In any window of t seconds at most ``burst + per_second * t`` takes are admitted,
    whatever the denied takes did to the queue's tail."""
    admitted = _admitted(rule, offsets)
    for i, first in enumerate(admitted):
        for j in range(i, len(admitted)):
            window_s = (admitted[j] - first) / 1000
            assert j - i + 1 <= rule.burst + rule.per_second * window_s


@settings(max_examples=300, deadline=None)
@given(rule=rules, offsets=gaps)
def test_a_denial_moves_only_the_tail_and_is_due_no_earlier_than_the_next_free_token(
    rule: RateRule, offsets: list[int]
) -> None:
    bucket: Bucket | None = None
    now = NOW
    for gap in offsets:
        now += gap
        take = decide_take(bucket, now, rule)
        if not take.allowed:
            assert bucket is not None and take.bucket is not None
            assert take.due_ms > now and take.bucket.tat_us == bucket.tat_us
            assert take.bucket.tail_us > take.due_ms * 1_000 - rule.interval_us
            assert take.due_ms * 1_000 >= bucket.tat_us - rule.tolerance_us
            assert decide_take(bucket, take.due_ms, rule).allowed
        bucket = take.bucket


@settings(max_examples=300, deadline=None)
@given(rule=rules, offsets=gaps, waiters=st.integers(1, 30), late=st.integers(0, 3_000))
def test_waiters_are_due_one_interval_apart_and_each_is_admitted_at_its_due_time(
    rule: RateRule, offsets: list[int], waiters: int, late: int
) -> None:
    """Whatever came before, takes denied in a row are due in the order they were denied,
    one interval apart (to the millisecond a waiter really comes back); coming back at its
    due time with no newcomer in between, each is admitted."""
    bucket: Bucket | None = None
    now = NOW
    for gap in offsets:
        now += gap
        bucket = decide_take(bucket, now, rule).bucket
    assert bucket is not None
    while decide_take(bucket, now, rule).allowed:  # empty the burst: the next take waits
        bucket = decide_take(bucket, now, rule).bucket
    dues = []
    for _ in range(waiters):
        take = decide_take(bucket, now, rule)
        assert not take.allowed and take.bucket is not None
        dues.append(take.due_ms)
        bucket = take.bucket
    interval_ms = rule.interval_us / 1_000
    for earlier, later in itertools.pairwise(dues):
        assert interval_ms - 1 < later - earlier <= math.ceil(interval_ms)
    for due in dues:
        take = decide_take(bucket, due, rule)
        assert take.allowed, (dues, due, bucket)
        bucket = take.bucket
    # A queue whose turns have passed is empty: a late denial is due at the next free token.
    now = dues[-1] + late
    take = decide_take(bucket, now, rule)
    while take.allowed:
        bucket = take.bucket
        take = decide_take(bucket, now, rule)
    assert bucket is not None
    assert take.due_ms == -(-(bucket.tat_us - rule.tolerance_us) // 1_000)


@settings(max_examples=200, deadline=None)
@given(rule=rules, burst_at=st.integers(0, 10_000))
def test_an_idle_bucket_admits_its_whole_burst_at_once(rule: RateRule, burst_at: int) -> None:
    assert _admitted(rule, [burst_at] + [0] * (rule.burst + 3)) == [NOW + burst_at] * rule.burst


def _flow(first: dict[str, object]) -> Flow:
    return Flow.from_document(
        {
            "flow_id": "f",
            "start": "a",
            "nodes": [{"id": "a", "next": "done", **first}, {"id": "done", "type": "end"}],
        }
    )


TASK = {"type": "task", "handler": "m:f"}


@pytest.mark.parametrize(
    "node", [TASK, {"type": "http", "url": "https://api.example/a"}], ids=["task", "http"]
)
def test_task_and_http_nodes_carry_a_rate_limit(node: dict[str, object]) -> None:
    flow = _flow({**node, "rate_limit": {"key": "${input.c}", "per_second": 2}})

    limit = flow.node("a").rate_limit  # type: ignore[attr-defined]
    assert limit == RateLimitSpec(key="${input.c}", per_second=2)


def test_a_flow_without_rate_limits_keeps_its_fingerprint() -> None:
    """Absent, the field is left out of the canonical JSON: flows registered before rate
    limits existed are the same definitions."""
    assert "rate_limit" not in _flow(TASK).to_document()["nodes"][0]
    assert _flow(TASK).fingerprint != _flow({**TASK, "rate_limit": {"per_second": 1}}).fingerprint


@pytest.mark.parametrize(
    ("node", "error"),
    [
        ({**TASK, "rate_limit": {"per_second": 0}}, InvalidRateLimitError),
        ({**TASK, "rate_limit": {"per_second": 1, "burst": 0}}, InvalidRateLimitError),
        ({**TASK, "rate_limit": {"per_second": 1, "per_minute": 1}}, InvalidFlowDocumentError),
        (
            {"type": "sleep", "duration": 5, "rate_limit": {"per_second": 1}},
            InvalidFlowDocumentError,
        ),
    ],
    ids=["zero-rate", "zero-burst", "unknown-field", "not-a-task"],
)
def test_a_bad_rate_limit_is_refused_at_registration(
    node: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error, match="flow 'f'"):
        _flow(node)
