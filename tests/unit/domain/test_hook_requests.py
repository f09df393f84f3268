"""What a webhook request means (V10): the signing scheme, the replay window and the mapping
from a JSON body to an event, each decision a table of requests and what they meet."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import (
    FutureHookTimestampError,
    HookPayloadError,
    HookPointerMissingError,
    HookSignatureError,
    InvalidHookSignatureError,
    MissingHookSignatureError,
    StaleHookTimestampError,
)
from plaita.domain.hook_requests import (
    MAX_FUTURE_SKEW_MS,
    HookEvent,
    VerifiedRequest,
    hook_event_id,
    map_payload,
    replayed,
    sign,
    verify_request,
)
from plaita.domain.hooks import HookDefinition, parse_hook

SECRET = "whsec-0123456789abcdef"
NOW_MS = 1_760_000_000_000
NOW_S = NOW_MS // 1000
BODY = b'{"order": {"id": "ord-7", "total": 12}, "decision": {"approved": true}}'


def hook(**fields: Any) -> HookDefinition:
    return parse_hook(
        {
            "name": "payments",
            "event_type": "payment.settled",
            "correlation_id_pointer": "/order/id",
            "secret": SECRET,
            **fields,
        }
    )


def signed(
    timestamp: int = NOW_S, body: bytes = BODY, secret: str = SECRET, prefix: str = "sha256="
) -> dict[str, str]:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return {"X-Plaita-Timestamp": str(timestamp), "X-Plaita-Signature": prefix + digest.hexdigest()}


def without(name: str) -> dict[str, str]:
    headers = signed()
    del headers[name]
    return headers


def tampered(headers: dict[str, str], **changes: str) -> dict[str, str]:
    return {**headers, **changes}


# Every row: the headers and body a request carries, and what verification meets.
SIGNATURE_TABLE: list[tuple[str, dict[str, str], bytes, type[HookSignatureError] | None]] = [
    ("good, sha256= prefix", signed(), BODY, None),
    ("good, bare hex", signed(prefix=""), BODY, None),
    (
        "good, uppercase hex",
        {**signed(), "X-Plaita-Signature": signed()["X-Plaita-Signature"].upper()[7:]},
        BODY,
        None,
    ),
    (
        "good, header names in any case",
        {k.lower(): v for k, v in signed().items()},
        BODY,
        None,
    ),
    ("good, at the edge of the window", signed(NOW_S - 300), BODY, None),
    ("good, a clock a little ahead", signed(NOW_S + 60), BODY, None),
    (
        "bad: another secret",
        signed(secret="another-secret-0123456"),
        BODY,
        InvalidHookSignatureError,
    ),
    (
        "bad: not hex",
        tampered(signed(), **{"X-Plaita-Signature": "sha256=zz"}),
        BODY,
        InvalidHookSignatureError,
    ),
    ("bad: another algorithm's prefix", signed(prefix="sha1="), BODY, InvalidHookSignatureError),
    (
        "bad: timestamp not digits",
        tampered(signed(), **{"X-Plaita-Timestamp": "1.5e9"}),
        BODY,
        InvalidHookSignatureError,
    ),
    (
        "bad: signed another timestamp",
        tampered(signed(), **{"X-Plaita-Timestamp": str(NOW_S - 1)}),
        BODY,
        InvalidHookSignatureError,
    ),
    ("wrong body", signed(), BODY + b" ", InvalidHookSignatureError),
    (
        "wrong body: re-encoded JSON",
        signed(),
        json.dumps(json.loads(BODY), separators=(",", ":")).encode(),
        InvalidHookSignatureError,
    ),
    ("missing signature", without("X-Plaita-Signature"), BODY, MissingHookSignatureError),
    ("missing timestamp", without("X-Plaita-Timestamp"), BODY, MissingHookSignatureError),
    ("missing both", {}, BODY, MissingHookSignatureError),
    (
        "empty signature",
        tampered(signed(), **{"X-Plaita-Signature": ""}),
        BODY,
        MissingHookSignatureError,
    ),
    ("stale", signed(NOW_S - 301), BODY, StaleHookTimestampError),
    ("stale by a day", signed(NOW_S - 86_400), BODY, StaleHookTimestampError),
    ("future-skewed", signed(NOW_S + 61), BODY, FutureHookTimestampError),
    ("future-skewed by an hour", signed(NOW_S + 3600), BODY, FutureHookTimestampError),
]


@pytest.mark.parametrize(
    ("headers", "body", "refused"),
    [pytest.param(h, b, r, id=label) for label, h, b, r in SIGNATURE_TABLE],
)
def test_a_request_is_verified_by_its_signature_then_its_age(
    headers: dict[str, str], body: bytes, refused: type[HookSignatureError] | None
) -> None:
    def verify() -> VerifiedRequest:
        return verify_request(hook(), headers, body, secret=SECRET.encode(), now_ms=NOW_MS)

    if refused is None:
        verified = verify()
        sent = {name.lower(): value for name, value in headers.items()}
        assert verified.timestamp == sent["x-plaita-timestamp"]
        assert verified.signature == sent["x-plaita-signature"].lower().removeprefix("sha256=")
        return
    with pytest.raises(refused) as error:
        verify()
    assert SECRET not in str(error.value)


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body() -> None:
    """The scheme as the docs state it, computed without plaita's helper."""
    expected = hmac.new(SECRET.encode(), b"1760000000." + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET.encode(), "1760000000", BODY) == expected


def test_a_stale_request_with_a_wrong_signature_is_told_only_that_it_is_wrong() -> None:
    """The signature is checked first: a caller without the secret learns nothing more."""
    headers = signed(NOW_S - 3600, secret="another-secret-0123456")
    with pytest.raises(InvalidHookSignatureError):
        verify_request(hook(), headers, BODY, secret=SECRET.encode(), now_ms=NOW_MS)


@pytest.mark.parametrize(
    ("age_s", "ttl_ms"),
    [(0, 300_000), (299, 1_000), (300, 1), (-60, 360_000)],
)
def test_a_signature_is_remembered_until_its_timestamp_leaves_the_window(
    age_s: int, ttl_ms: int
) -> None:
    verified = verify_request(
        hook(), signed(NOW_S - age_s), BODY, secret=SECRET.encode(), now_ms=NOW_MS
    )
    assert verified.seen_ttl_ms == ttl_ms


def test_the_window_and_the_headers_are_the_hooks_own() -> None:
    custom = hook(
        replay_window_seconds=30,
        signature_header="X-Sig",
        timestamp_header="X-Time",
    )
    headers = signed(NOW_S - 29)
    renamed = {"X-Sig": headers["X-Plaita-Signature"], "X-Time": headers["X-Plaita-Timestamp"]}
    assert verify_request(custom, renamed, BODY, secret=SECRET.encode(), now_ms=NOW_MS)
    late = signed(NOW_S - 31)
    with pytest.raises(StaleHookTimestampError, match="30 s"):
        verify_request(
            custom,
            {"X-Sig": late["X-Plaita-Signature"], "X-Time": late["X-Plaita-Timestamp"]},
            BODY,
            secret=SECRET.encode(),
            now_ms=NOW_MS,
        )
    with pytest.raises(MissingHookSignatureError, match="X-Sig"):
        verify_request(custom, headers, BODY, secret=SECRET.encode(), now_ms=NOW_MS)


def test_a_window_shorter_than_the_skew_bounds_the_future_too() -> None:
    short = hook(replay_window_seconds=10)
    with pytest.raises(FutureHookTimestampError, match="10 s"):
        verify_request(short, signed(NOW_S + 11), BODY, secret=SECRET.encode(), now_ms=NOW_MS)
    assert MAX_FUTURE_SKEW_MS == 60_000


@given(body=st.binary(max_size=200), timestamp=st.integers(0, 10**11))
def test_every_body_signed_with_the_scheme_verifies_and_no_other_body_does(
    body: bytes, timestamp: int
) -> None:
    headers = signed(timestamp, body)
    now_ms = timestamp * 1000
    assert verify_request(hook(), headers, body, secret=SECRET.encode(), now_ms=now_ms)
    with pytest.raises(InvalidHookSignatureError):
        verify_request(hook(), headers, body + b"x", secret=SECRET.encode(), now_ms=now_ms)


def test_a_delivery_keeps_its_event_id_and_another_gets_another() -> None:
    first = verify_request(hook(), signed(), BODY, secret=SECRET.encode(), now_ms=NOW_MS)
    again = verify_request(hook(), signed(), BODY, secret=SECRET.encode(), now_ms=NOW_MS + 5)
    other = verify_request(hook(), signed(NOW_S - 1), BODY, secret=SECRET.encode(), now_ms=NOW_MS)
    assert hook_event_id(hook(), first) == hook_event_id(hook(), again)
    assert hook_event_id(hook(), first) != hook_event_id(hook(), other)
    assert hook_event_id(hook(name="other"), first) != hook_event_id(hook(), first)


def test_a_replay_is_refused_by_name() -> None:
    assert "payments" in str(replayed(hook()))


# --- the mapping ---------------------------------------------------------------------------

MAPPING_TABLE: list[tuple[str, dict[str, Any], bytes, HookEvent | type[HookPayloadError]]] = [
    (
        "the whole body is the data",
        {},
        BODY,
        HookEvent("payment.settled", "ord-7", json.loads(BODY), "default"),
    ),
    (
        "a part of the body is the data",
        {"data_pointer": "/decision", "tenant": "acme"},
        BODY,
        HookEvent("payment.settled", "ord-7", {"approved": True}, "acme"),
    ),
    (
        "an integer correlation id becomes its digits",
        {"correlation_id_pointer": "/order/total"},
        BODY,
        HookEvent("payment.settled", "12", json.loads(BODY), "default"),
    ),
    (
        "array indexes and escaped keys",
        {"correlation_id_pointer": "/items/1/a~1b", "data_pointer": "/items/0"},
        b'{"items": [{"n": 1}, {"a/b": "x-2"}]}',
        HookEvent("payment.settled", "x-2", {"n": 1}, "default"),
    ),
    (
        "pointer missing: correlation id",
        {"correlation_id_pointer": "/order/nope"},
        BODY,
        HookPointerMissingError,
    ),
    ("pointer missing: data", {"data_pointer": "/absent"}, BODY, HookPointerMissingError),
    (
        "pointer missing: past the end of an array",
        {"correlation_id_pointer": "/a/-"},
        b'{"a": [1]}',
        HookPointerMissingError,
    ),
    (
        "pointer missing: an index out of range",
        {"correlation_id_pointer": "/a/5"},
        b'{"a": [1]}',
        HookPointerMissingError,
    ),
    (
        "pointer missing: into a string",
        {"correlation_id_pointer": "/order/id/x"},
        BODY,
        HookPointerMissingError,
    ),
    (
        "correlation id of the wrong kind",
        {"correlation_id_pointer": "/order"},
        BODY,
        HookPayloadError,
    ),
    (
        "correlation id true",
        {"correlation_id_pointer": "/decision/approved"},
        BODY,
        HookPayloadError,
    ),
    ("correlation id empty", {}, b'{"order": {"id": ""}}', HookPayloadError),
    ("correlation id with a newline", {}, b'{"order": {"id": "a\\nb"}}', HookPayloadError),
    ("data not an object", {"data_pointer": "/order/id"}, BODY, HookPayloadError),
    ("the body is not JSON", {}, b"order=7", HookPayloadError),
    ("the body is nested too deep to read", {}, b"[" * 600 + b"]" * 600, HookPayloadError),
    (
        "the whole body is the data, and is an array",
        {"correlation_id_pointer": "/0"},
        b'["a"]',
        HookPayloadError,
    ),
    ("correlation id null", {}, b'{"order": {"id": null}}', HookPayloadError),
    ("correlation id a number with a fraction", {}, b'{"order": {"id": 1.5}}', HookPayloadError),
    ("the body is not UTF-8", {}, b'{"order": {"id": "\xff"}}', HookPayloadError),
    (
        "the data is nested too deep for an event",
        {"correlation_id_pointer": "/id"},
        b'{"id": "a", "d": ' + b"[" * 70 + b"]" * 70 + b"}",
        HookPayloadError,
    ),
]


@pytest.mark.parametrize(
    ("fields", "body", "expected"),
    [pytest.param(f, b, e, id=label) for label, f, b, e in MAPPING_TABLE],
)
def test_a_body_maps_to_an_event_or_is_refused_naming_what_is_missing(
    fields: dict[str, Any], body: bytes, expected: HookEvent | type[HookPayloadError]
) -> None:
    if isinstance(expected, HookEvent):
        assert map_payload(hook(**fields), body) == expected
        return
    with pytest.raises(expected) as error:
        map_payload(hook(**fields), body)
    assert "payments" in str(error.value)


def test_a_missing_pointer_is_named_in_the_refusal() -> None:
    with pytest.raises(HookPointerMissingError, match=r"'/order/nope'.*correlation_id_pointer"):
        map_payload(hook(correlation_id_pointer="/order/nope"), BODY)


def test_the_worked_example_of_the_operations_guide_holds() -> None:
    """docs/operations.md, "The signing scheme", shows this signature: keep both in step."""
    body = b'{"execution_id": "order-7", "decision": {"approved": true}}'
    assert sign(b"whsec-0123456789abcdef", "1760000000", body) == (
        "150139fc2b1a5164eb1833cdd8f58550f4596a6e7dc94c8bde9bd7db1bda2e22"
    )
