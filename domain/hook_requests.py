"""What an inbound webhook request means (V10): is it signed, is it fresh, what event it is.

The signing scheme. A sender holding the hook's secret sends two headers with the body:

- the timestamp header (``X-Plaita-Timestamp`` unless the hook names another): the moment of
  signing in whole seconds since the Unix epoch, as decimal digits;
- the signature header (``X-Plaita-Signature``): the lowercase or uppercase hex of
  ``HMAC-SHA256(key=secret as UTF-8, message=timestamp + "." + body)``, where ``timestamp`` is
  the header's value exactly as sent and ``body`` the raw request body bytes, optionally
  written ``sha256=<hex>``.

A request is authentic when the signature matches (compared in constant time), fresh when its
timestamp is at most the replay window old and at most ``MAX_FUTURE_SKEW_MS`` (or the window,
if shorter) ahead of this clock. A fresh, authentic request is accepted once: the use case
records the signature as seen until the timestamp leaves the window (``seen_ttl_ms``), and a
second request with it is a replay.

The mapping reads the body as JSON and takes the correlation id and the event's data at the
hook's JSON pointers (RFC 6901). A missing value or one of the wrong kind is refused by name.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

import attrs
import jsonpointer

from plaita.domain.errors import (
    FutureHookTimestampError,
    HookPayloadError,
    HookPointerMissingError,
    HookReplayError,
    InvalidHookSignatureError,
    MissingHookSignatureError,
    PayloadLimitError,
    StaleHookTimestampError,
)
from plaita.domain.hooks import HookDefinition
from plaita.domain.limits import EVENT_DATA_LIMIT, REQUEST_BODY_LIMIT, check_json_text
from plaita.domain.limits import check_json_value as check_json

JSON = Any

SIGNATURE_PREFIX = "sha256="
#: How far ahead of this clock a sender's timestamp may be (its clock runs fast).
MAX_FUTURE_SKEW_MS = 60_000
#: The largest body a hook reads; the console refuses larger ones before reading them (413).
MAX_HOOK_BODY_BYTES = 256 * 1024
MAX_CORRELATION_ID_LENGTH = 256
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
_HEX_DIGEST = re.compile(r"^[0-9a-fA-F]{64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: Event ids of hook deliveries: one per (hook, timestamp, signature), so a delivery that is
#: published again after a failed attempt keeps its id and no wait takes it twice.
_EVENT_IDS = uuid.UUID("8a0c7a52-4f0e-5d3b-9a51-2f1f6f0c9e17")


@attrs.frozen
class VerifiedRequest:
    """An authentic, fresh request: what identifies it, and how long it must be remembered."""

    timestamp: str
    signature: str
    seen_ttl_ms: int


@attrs.frozen
class HookEvent:
    """The event a request maps to."""

    event_type: str
    correlation_id: str
    data: Mapping[str, JSON]
    tenant_id: str


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """The signature of ``body`` at ``timestamp`` (the header's value), as lowercase hex."""
    message = timestamp.encode("ascii") + b"." + body
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def verify_request(
    hook: HookDefinition,
    headers: Mapping[str, str],
    body: bytes,
    *,
    secret: bytes,
    now_ms: int,
) -> VerifiedRequest:
    """The request's identity if it is authentic and fresh, else the HookSignatureError that
    says why. The signature is checked before the timestamp's age, so a caller without the
    secret learns only that its signature is wrong."""
    lowered = {name.lower(): value for name, value in headers.items()}
    timestamp = lowered.get(hook.timestamp_header.lower())
    given = lowered.get(hook.signature_header.lower())
    missing = [
        header
        for header, value in ((hook.signature_header, given), (hook.timestamp_header, timestamp))
        if not value
    ]
    if missing:
        raise MissingHookSignatureError(
            f"the request to hook {hook.name!r} has no {' and no '.join(missing)} header; "
            f"send {hook.timestamp_header}: <unix seconds> and {hook.signature_header}: "
            "sha256=<hex HMAC-SHA256 of timestamp + '.' + body>"
        )
    assert timestamp is not None and given is not None
    timestamp = timestamp.strip()
    if _TIMESTAMP.fullmatch(timestamp) is None:
        raise InvalidHookSignatureError(
            f"{hook.timestamp_header} must be whole seconds since the Unix epoch (digits "
            f"only), got {timestamp[:40]!r}"
        )
    signature = _hex_of(given.strip())
    if signature is None or not hmac.compare_digest(sign(secret, timestamp, body), signature):
        raise InvalidHookSignatureError(
            f"the {hook.signature_header} header is not the HMAC-SHA256 of "
            f"{hook.timestamp_header} + '.' + the body under hook {hook.name!r}'s secret; "
            "check the secret, and sign the raw body exactly as it is sent"
        )
    signed_ms = int(timestamp) * 1000
    age_ms = now_ms - signed_ms
    if age_ms > hook.replay_window_ms:
        raise StaleHookTimestampError(
            f"the request to hook {hook.name!r} was signed {age_ms // 1000} s ago, more than "
            f"its replay window of {hook.replay_window_seconds} s; sign each delivery (and "
            "each retry) with the current time, and check the sender's clock"
        )
    skew_ms = min(MAX_FUTURE_SKEW_MS, hook.replay_window_ms)
    if -age_ms > skew_ms:
        raise FutureHookTimestampError(
            f"the request to hook {hook.name!r} is signed {-age_ms // 1000} s in the future, "
            f"more than the {skew_ms // 1000} s a clock may be ahead; check the sender's clock"
        )
    return VerifiedRequest(
        timestamp=timestamp,
        signature=signature,
        seen_ttl_ms=max(1, signed_ms + hook.replay_window_ms - now_ms),
    )


def replayed(hook: HookDefinition) -> HookReplayError:
    """The refusal of a request whose signature was seen before within the window."""
    return HookReplayError(
        f"this signature was accepted by hook {hook.name!r} before, within its replay window "
        f"of {hook.replay_window_seconds} s; sign a new delivery with the current time"
    )


def hook_event_id(hook: HookDefinition, request: VerifiedRequest) -> str:
    """The event id of a delivery: the same for the same hook, timestamp and signature."""
    return uuid.uuid5(_EVENT_IDS, f"{hook.name}\x1f{request.timestamp}\x1f{request.signature}").hex


def map_payload(hook: HookDefinition, body: bytes) -> HookEvent:
    """The event ``body`` maps to under ``hook``; HookPayloadError naming what is wrong."""
    document = _json_body(hook, body)
    correlation = _at(hook, document, hook.correlation_id_pointer, "correlation_id_pointer")
    data = _at(hook, document, hook.data_pointer, "data_pointer")
    if not isinstance(data, dict):
        raise HookPayloadError(
            f"hook {hook.name!r} takes the event's data at {_shown(hook.data_pointer)}, which "
            f"holds a JSON {_kind(data)}; the data must be a JSON object"
        )
    try:
        check_json(data, EVENT_DATA_LIMIT, field="data")
    except PayloadLimitError as exc:
        raise HookPayloadError(f"hook {hook.name!r}: {exc}") from None
    return HookEvent(
        event_type=hook.event_type,
        correlation_id=_correlation_id(hook, correlation),
        data=data,
        tenant_id=hook.tenant_id,
    )


def _hex_of(given: str) -> str | None:
    digest = given[len(SIGNATURE_PREFIX) :] if given.startswith(SIGNATURE_PREFIX) else given
    return digest.lower() if _HEX_DIGEST.fullmatch(digest) else None


def _json_body(hook: HookDefinition, body: bytes) -> JSON:
    try:
        check_json_text(body, REQUEST_BODY_LIMIT, field="the request body")
        return json.loads(body)
    except PayloadLimitError as exc:
        raise HookPayloadError(f"hook {hook.name!r}: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HookPayloadError(
            f"hook {hook.name!r} reads a JSON body, and this one is not JSON ({exc}); send a "
            "UTF-8 JSON document"
        ) from None


def _at(hook: HookDefinition, document: JSON, pointer: str, field: str) -> JSON:
    missing = object()
    # With a default, a pointer that walks into a string, a number or past an array's end
    # answers the default, as a missing key does.
    found = jsonpointer.resolve_pointer(document, pointer, missing)
    if found is missing or isinstance(found, jsonpointer.EndOfList):
        raise HookPointerMissingError(
            f"the body has nothing at {_shown(pointer)}, where hook {hook.name!r} takes the "
            f"event's {field.removesuffix('_pointer').replace('_', ' ')} ({field}); send it "
            "there or change the hook"
        )
    return found


def _correlation_id(hook: HookDefinition, value: JSON) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise HookPayloadError(
            f"hook {hook.name!r} takes the correlation id at "
            f"{_shown(hook.correlation_id_pointer)}, which holds a JSON {_kind(value)}; it "
            "must be a string or an integer"
        )
    if not value or len(value) > MAX_CORRELATION_ID_LENGTH or _CONTROL.search(value):
        raise HookPayloadError(
            f"hook {hook.name!r} takes the correlation id at "
            f"{_shown(hook.correlation_id_pointer)}, which holds {value[:40]!r}; it must be 1 "
            f"to {MAX_CORRELATION_ID_LENGTH} characters without control characters"
        )
    return value


def _shown(pointer: str) -> str:
    return repr(pointer) if pointer else "'' (the whole body)"


def _kind(value: JSON) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
