"""An http node's response judged (E11, E3): expected statuses succeed; 429 and 5xx are
transient; every other status is deterministic."""

from __future__ import annotations

import re
from typing import Any

import pytest

from plaita.domain.failures import (
    HttpDeterministicStatusError,
    HttpRequestError,
    HttpResponseNotJsonError,
    HttpTargetBlockedError,
    HttpTransientStatusError,
)
from plaita.domain.http_calls import (
    REDACTED,
    ExpectedStatuses,
    HttpRequest,
    HttpResponse,
    ResponseVerdict,
    build_request,
    judge_response,
    redirected,
    response_result,
    status_failure,
)
from plaita.domain.tracing import TraceContext

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


# --- the request ------------------------------------------------------------------------


def request(**overrides: Any) -> HttpRequest:
    fields: dict[str, Any] = {
        "node_id": "call",
        "method": "POST",
        "url": "https://api.example/a",
        "headers": {},
        "body": None,
        "block_private": False,
        "expected": ExpectedStatuses(),
    }
    return build_request(**(fields | overrides))


@pytest.mark.parametrize(
    ("body", "sent", "content_type"),
    [
        (None, None, None),
        ({"a": 1}, b'{"a":1}', "application/json"),
        ([1, "é"], '[1,"é"]'.encode(), "application/json"),
        (7, b"7", "application/json"),
        ("hi", b"hi", "text/plain; charset=utf-8"),
    ],
)
def test_the_body_is_sent_as_json_or_text(body: Any, sent: Any, content_type: Any) -> None:
    built = request(body=body)
    assert built.body == sent
    assert dict(built.headers).get("Content-Type") == content_type


def test_a_content_type_the_node_sets_wins() -> None:
    built = request(body={"a": 1}, headers={"content-type": "application/vnd.x+json"})
    assert built.headers == (("content-type", "application/vnd.x+json"),)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"url": 5}, "url rendered to 5, not a string"),
        ({"url": "ftp://x/"}, "absolute http:// or https:// URL"),
        ({"url": "/relative"}, "absolute http:// or https:// URL"),
        ({"url": "http://h:99999/"}, "cannot be read"),
        ({"headers": {"X": {"a": 1}}}, "header 'X' rendered to"),
        ({"headers": {"X": True}}, "header 'X' rendered to True"),
        ({"headers": {"X": "a\r\nInjected: 1"}}, "holds a line break"),
        ({"body": {"n": float("nan")}}, "body cannot be sent as JSON"),
    ],
)
def test_a_request_that_cannot_be_sent_is_a_named_deterministic_error(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(HttpRequestError, match=re.escape(message)):
        request(**overrides)


TRACE = TraceContext("00-" + "ab" * 16 + "-" + "cd" * 8 + "-01", "v=1")


def test_the_running_span_is_sent_on_unless_the_node_sets_its_own() -> None:
    carried = request(trace=TRACE).headers
    assert carried == (("traceparent", TRACE.traceparent), ("tracestate", "v=1"))
    own = request(trace=TRACE, headers={"TraceParent": "00-mine"}).headers
    assert own == (("TraceParent", "00-mine"),)
    assert request(trace=TraceContext(TRACE.traceparent)).headers == (
        ("traceparent", TRACE.traceparent),
    )


def test_numbers_in_headers_become_text() -> None:
    assert request(headers={"X-N": 3, "X-F": 1.5}).headers == (("X-N", "3"), ("X-F", "1.5"))


def test_redirects_are_followed_unless_a_3xx_is_expected() -> None:
    assert request().follow_redirects is True
    assert request(expected=ExpectedStatuses.parse([302])).follow_redirects is False
    assert request(expected=ExpectedStatuses.parse(["3xx"])).follow_redirects is False


def test_the_history_never_sees_credentials() -> None:
    headers = {
        "Authorization": "Bearer x",
        "Cookie": "s=1",
        "X-Api-Key": "k",
        "X-Auth-Token": "t",
        "X-Hub-Signature": "sig",
        "Accept": "text/html",
    }
    shown = request(headers=headers, body="abc").for_history()
    assert shown == {
        "method": "POST",
        "url": "https://api.example/a",
        "headers": {
            "Authorization": REDACTED,
            "Cookie": REDACTED,
            "X-Api-Key": REDACTED,
            "X-Auth-Token": REDACTED,
            "X-Hub-Signature": REDACTED,
            "Accept": "text/html",
            "Content-Type": "text/plain; charset=utf-8",
        },
        "body_bytes": 3,
    }


# --- redirects --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "method", "expected_method", "keeps_body"),
    [
        (301, "POST", "GET", False),
        (302, "POST", "GET", False),
        (303, "POST", "GET", False),
        (303, "HEAD", "HEAD", False),
        (301, "PUT", "PUT", True),
        (307, "POST", "POST", True),
        (308, "PATCH", "PATCH", True),
    ],
)
def test_a_redirect_rewrites_the_method_as_browsers_do(
    status: int, method: str, expected_method: str, keeps_body: bool
) -> None:
    original = request(method=method, body={"a": 1})
    followed = redirected(original, status, "/b")
    assert (followed.method, followed.url) == (expected_method, "https://api.example/b")
    assert (followed.body is not None) is (keeps_body and method != "HEAD")
    assert ("Content-Type" in dict(followed.headers)) is (followed.body is not None)


def test_credentials_stay_with_their_origin() -> None:
    original = request(headers={"Authorization": "x", "Cookie": "c", "X-Other": "o"})
    same = redirected(original, 307, "https://api.example:443/c")
    other = redirected(original, 307, "https://elsewhere.example/c")
    assert dict(same.headers).keys() >= {"Authorization", "Cookie", "X-Other"}
    assert "Authorization" not in dict(other.headers)
    assert "Cookie" not in dict(other.headers)
    assert dict(other.headers)["X-Other"] == "o"


def test_a_redirect_to_another_scheme_is_refused() -> None:
    with pytest.raises(HttpTargetBlockedError, match="redirected to an unusable target"):
        redirected(request(), 302, "file:///etc/passwd")


# --- the response -----------------------------------------------------------------------


def response(body: bytes, content_type: str | None, *extra: tuple[str, str]) -> HttpResponse:
    headers = (() if content_type is None else (("Content-Type", content_type),)) + extra
    return HttpResponse(200, "OK", headers, body, "https://api.example/a")


@pytest.mark.parametrize(
    ("body", "content_type", "parsed"),
    [
        (b'{"a": 1}', "application/json", {"a": 1}),
        (b"[1]", "application/problem+json; charset=utf-8", [1]),
        (b"", "application/json", None),
        ("café".encode("latin-1"), "text/plain; charset=latin-1", "café"),
        (b"caf\xff", "text/plain", "caf\ufffd"),
        (b"x", "text/plain; charset=no-such-charset", "x"),
        (b"<p>", None, "<p>"),
    ],
)
def test_the_body_is_parsed_by_its_content_type(
    body: bytes, content_type: str | None, parsed: Any
) -> None:
    assert response_result("call", response(body, content_type))["body"] == parsed


def test_a_body_that_says_json_and_is_not_is_a_named_error() -> None:
    with pytest.raises(HttpResponseNotJsonError, match="says application/json but its body"):
        response_result("call", response(b"<html>", "application/json"))


def test_header_names_are_lower_cased_and_repeats_joined() -> None:
    result = response_result("call", response(b"", "text/plain", ("Vary", "a"), ("vary", "b")))
    assert result["headers"] == {"content-type": "text/plain", "vary": "a, b"}


def test_a_failure_is_transient_or_deterministic_with_the_status_and_an_excerpt() -> None:
    sent = request()
    bad = HttpResponse(503, "Service Unavailable", (), b"busy " * 100, "https://api.example/a")
    transient = status_failure("call", sent, bad, ResponseVerdict.TRANSIENT)
    assert isinstance(transient, HttpTransientStatusError)
    assert transient.status == 503
    assert str(transient).startswith(
        "http node 'call': POST https://api.example/a answered 503 Service Unavailable: busy"
    )
    assert len(str(transient)) < 300
    missing = HttpResponse(404, "", (), b"", "https://api.example/a")
    deterministic = status_failure("call", sent, missing, ResponseVerdict.DETERMINISTIC)
    assert isinstance(deterministic, HttpDeterministicStatusError)
    assert str(deterministic) == "http node 'call': POST https://api.example/a answered 404"
