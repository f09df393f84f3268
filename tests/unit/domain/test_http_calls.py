"""An http node's response judged (E11, E3): expected statuses succeed; 429 and 5xx are
transient; every other status is deterministic."""

from __future__ import annotations

from typing import Any

import pytest

from plaita.domain.http_calls import ExpectedStatuses, ResponseVerdict, judge_response

S, T, D = ResponseVerdict.SUCCESS, ResponseVerdict.TRANSIENT, ResponseVerdict.DETERMINISTIC


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, S),
        (201, S),
        (299, S),
        (301, D),
        (400, D),
        (404, D),
        (409, D),
        (429, T),
        (500, T),
        (503, T),
        (599, T),
        (100, D),
    ],
)
def test_by_default_every_2xx_succeeds(status: int, verdict: ResponseVerdict) -> None:
    assert judge_response(status, ExpectedStatuses.parse(None)) is verdict


def test_expect_names_codes_and_classes_and_only_those_succeed() -> None:
    expected = ExpectedStatuses.parse([200, 404, "3xx"])
    assert [judge_response(s, expected) for s in (200, 201, 302, 404, 410, 503)] == [
        S,
        D,
        S,
        S,
        D,
        T,
    ]


def test_an_expected_5xx_is_a_success_not_a_retry() -> None:
    assert judge_response(503, ExpectedStatuses.parse([503])) is S


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "non-empty list"),
        ("2xx", "non-empty list"),
        ([99], "99 is not an HTTP status"),
        ([600], "600 is not an HTTP status"),
        (["6xx"], "neither a status code"),
        (["20x"], "neither a status code"),
        ([True], "neither a status code"),
        ([2.0], "neither a status code"),
    ],
)
def test_an_unreadable_expect_is_refused_naming_the_entry(raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExpectedStatuses.parse(raw)


def test_only_an_integer_status_is_ever_expected() -> None:
    assert "200" not in ExpectedStatuses.parse(None)
    assert 200 in ExpectedStatuses.parse(None)
