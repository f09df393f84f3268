"""Task envelopes on the wire: flat string fields, validated by pydantic at the boundary.

Adapters store ``encode_envelope(...)`` as the stream entry's fields and hand each entry they
read, as raw as they read it, to ``decode_delivery``; an entry that is not UTF-8, over the
JSON limits, names an invalid id or is otherwise malformed becomes a ``Delivery`` without an
envelope that keeps its raw fields as evidence (R4) — one bad entry never fails the others
read with it. ``schema_version`` travels as its own field so a worker can refuse a newer
envelope without having to understand the rest of it (W11).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from plaita.application.ports import Counters, DeadLetter, Delivery, RawBase64
from plaita.domain.budgets import Counter, CounterChange, CounterOp
from plaita.domain.config_generations import MALFORMED_EVENT, read_generations
from plaita.domain.envelope import (
    CURRENT_SCHEMA_VERSION,
    CarrierKind,
    ResumeType,
    TaskEnvelope,
    check_schema_version,
)
from plaita.domain.errors import (
    InvalidEnvelopeError,
    InvalidHandoverCountError,
    InvalidIdError,
    InvalidPriorityError,
    InvalidTenantIdError,
    PayloadLimitError,
    SchemaVersionError,
)
from plaita.domain.ids import validate_event_id, validate_execution_id, validate_flow_id
from plaita.domain.limits import ENVELOPE_LIMIT, JsonLimit, check_json_text
from plaita.domain.priorities import Priority, parse_priority
from plaita.domain.tracing import parse_traceparent

log = logging.getLogger("plaita.codec")

ENVELOPE_FIELD = "envelope"
SCHEMA_FIELD = "schema_version"

#: A stream entry's fields as an adapter read them: bytes from Redis, text from the twin.
RawFields = Mapping[str, str] | Mapping[bytes, bytes] | Mapping[str | bytes, str | bytes]


class EnvelopeDocument(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: Literal["start", "resume"]
    execution_id: str = Field(min_length=1)
    flow_id: str = Field(min_length=1)
    timestamp_ms: int = Field(ge=0)
    version: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    resume_type: Literal["continue", "retry", "event", "timeout", "cancel", "child"] | None = None
    event: dict[str, Any] | None = None
    subscription_id: str | None = None
    tenant_id: str = Field(default="default", min_length=1)
    dedup_key: str | None = None
    # Older carriers have none; an unreadable one is dropped (it only feeds the history).
    origin: Any = None
    # Older carriers have none; a malformed one is dropped (it only feeds a span's link).
    traceparent: Any = None
    # Any: a malformed generation makes the carrier legacy (W12 rule 4), not undecodable.
    config_family: Any = None
    config_generation: Any = None
    budget_generation: Any = None
    # W25; absent on older carriers and on carriers without a target. Any: the domain's
    # rules judge them (a malformed one makes the carrier malformed, by name).
    target_instance_id: Any = None
    handovers: Any = 0
    # Absent on normal carriers and on older ones; a malformed one makes the carrier
    # malformed, by name (a guess could run it ahead of its turn).
    priority: Any = None


def encode_envelope(envelope: TaskEnvelope) -> dict[str, str]:
    document = {
        "kind": envelope.kind.value,
        "execution_id": envelope.execution_id,
        "flow_id": envelope.flow_id,
        "timestamp_ms": envelope.timestamp_ms,
        "version": envelope.version,
        "params": dict(envelope.params),
        "resume_type": None if envelope.resume_type is None else envelope.resume_type.value,
        "event": None if envelope.event is None else dict(envelope.event),
        "subscription_id": envelope.subscription_id,
        "tenant_id": envelope.tenant_id,
        "dedup_key": envelope.dedup_key,
        "config_family": envelope.generations.config_family,
        "config_generation": envelope.generations.config_generation,
        "budget_generation": envelope.generations.budget_generation,
    }
    if envelope.origin is not None:
        document["origin"] = envelope.origin
    if envelope.traceparent is not None:
        document["traceparent"] = envelope.traceparent
    # Only when set: a carrier without a target is byte for byte what it was before W25.
    if envelope.target_instance_id is not None:
        document["target_instance_id"] = envelope.target_instance_id
    if envelope.handovers:
        document["handovers"] = envelope.handovers
    # Only when not normal: a normal carrier is byte for byte what it was before priorities.
    if envelope.priority is not Priority.NORMAL:
        document["priority"] = envelope.priority.value
    return {
        ENVELOPE_FIELD: json.dumps(document, separators=(",", ":")),
        SCHEMA_FIELD: str(envelope.schema_version),
    }


def decode_envelope(fields: Mapping[str, str]) -> TaskEnvelope:
    """Rebuild the envelope, or raise ``InvalidEnvelopeError`` / ``SchemaVersionError``."""
    raw_version = fields.get(SCHEMA_FIELD, str(CURRENT_SCHEMA_VERSION))
    try:
        schema_version = int(raw_version)
    except ValueError:
        raise InvalidEnvelopeError(f"schema_version {raw_version!r} is not an integer") from None
    check_schema_version(schema_version)
    text = fields.get(ENVELOPE_FIELD)
    if text is None:
        raise InvalidEnvelopeError(f"entry has no {ENVELOPE_FIELD!r} field: {sorted(fields)}")
    try:
        # Before any parser sees it: a 10,000-deep document makes parsers recurse.
        check_json_text(text, ENVELOPE_LIMIT, field=ENVELOPE_FIELD)
    except PayloadLimitError as exc:
        raise InvalidEnvelopeError(f"malformed task envelope: {exc}") from None
    try:
        document = EnvelopeDocument.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<envelope>'}: {e['msg']}"
            for e in exc.errors()
        )
        raise InvalidEnvelopeError(f"malformed task envelope: {problems}") from None
    generations = read_generations(
        {
            "config_family": document.config_family,
            "config_generation": document.config_generation,
            "budget_generation": document.budget_generation,
        }
    )
    if generations.malformed:
        log.warning(
            "event=%s execution_id=%s fields=%s: read as missing, as on a legacy carrier, never as "
            "this worker's values; find the producer that wrote them",
            MALFORMED_EVENT,
            document.execution_id,
            ",".join(generations.malformed),
        )
    try:
        return TaskEnvelope(
            kind=CarrierKind(document.kind),
            execution_id=validate_execution_id(document.execution_id),
            flow_id=validate_flow_id(document.flow_id),
            timestamp_ms=document.timestamp_ms,
            version=document.version,
            params=document.params,
            resume_type=None if document.resume_type is None else ResumeType(document.resume_type),
            event=_checked_event(document.event),
            subscription_id=document.subscription_id,
            tenant_id=document.tenant_id,
            dedup_key=document.dedup_key,
            schema_version=schema_version,
            generations=generations.generations,
            origin=document.origin if isinstance(document.origin, str) else None,
            traceparent=parse_traceparent(document.traceparent),
            target_instance_id=document.target_instance_id,
            handovers=document.handovers,
            priority=(
                Priority.NORMAL if document.priority is None else parse_priority(document.priority)
            ),
        )
    except (
        ValueError,
        InvalidTenantIdError,
        InvalidIdError,
        InvalidHandoverCountError,
        InvalidPriorityError,
    ) as exc:
        raise InvalidEnvelopeError(f"malformed task envelope: {exc}") from None


def _checked_event(event: dict[str, Any] | None) -> dict[str, Any] | None:
    if event is not None and "event_id" in event:
        validate_event_id(event["event_id"])
    return event


def decode_delivery(
    message_id: str, fields: RawFields, delivery_count: int, *, reclaimed: bool = False
) -> Delivery:
    """One queue entry as a ``Delivery``, decoded on its own; never raises for its content.

    An undecodable entry keeps its raw fields and the reason; one that is not UTF-8 also
    keeps its exact bytes (``raw_base64``), since its readable copy had to escape them.
    """
    text, not_utf8 = _text_fields(fields)
    if not_utf8 is not None:
        return Delivery(
            message_id,
            None,
            text,
            delivery_count,
            reclaimed,
            problem=not_utf8,
            raw_base64=_base64_pairs(fields),
        )
    try:
        envelope = decode_envelope(text)
    except (InvalidEnvelopeError, SchemaVersionError) as exc:
        return Delivery(message_id, None, text, delivery_count, reclaimed, problem=str(exc))
    return Delivery(message_id, envelope, text, delivery_count, reclaimed)


def envelope_document(raw: Mapping[str, str]) -> dict[str, Any] | None:
    """The envelope field of raw carrier fields as a JSON object, best effort, never raising.

    For evidence (which execution a malformed carrier names): text over the envelope limits
    or not JSON gives None rather than an error, so no hostile carrier can fail its reader.
    """
    text = raw.get(ENVELOPE_FIELD)
    if text is None:
        return None
    try:
        check_json_text(text, ENVELOPE_LIMIT, field=ENVELOPE_FIELD)
        document = json.loads(text)
    except (PayloadLimitError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def carrier_priority(document: Mapping[str, Any]) -> Priority:
    """The stream a raw carrier (its ``envelope_document``) is written to: the priority it
    names, normal when it names none or no valid one (it is then read where any carrier is,
    and dead-lettered by name)."""
    raw = document.get("priority")
    if raw is None:
        return Priority.NORMAL
    try:
        return parse_priority(raw)
    except InvalidPriorityError:
        return Priority.NORMAL


def _text_fields(fields: RawFields) -> tuple[dict[str, str], str | None]:
    """The fields as text, and why they are not UTF-8 (None when they are).

    Bytes that are not UTF-8 are shown ``\\x``-escaped, so the text is readable and still
    tells the bytes apart; the exact bytes go to ``raw_base64``.
    """
    try:
        return {_utf8(name): _utf8(value) for name, value in fields.items()}, None
    except UnicodeDecodeError:
        pass
    text: dict[str, str] = {}
    problem: str | None = None
    for name, value in fields.items():
        shown = [_escaped(name), _escaped(value)]
        text[shown[0]] = shown[1]
        for part in (name, value):
            if problem is None and isinstance(part, bytes):
                try:
                    part.decode("utf-8")
                except UnicodeDecodeError as exc:
                    where = "a field name" if part is name else f"field {shown[0]!r}"
                    problem = (
                        f"entry is not UTF-8: {where} has byte 0x{part[exc.start]:02x} at offset "
                        f"{exc.start}; its exact bytes are kept in raw_base64 as evidence"
                    )
    return text, problem


def _utf8(part: str | bytes) -> str:
    return part if isinstance(part, str) else part.decode("utf-8")


def _escaped(part: str | bytes) -> str:
    return part if isinstance(part, str) else part.decode("utf-8", errors="backslashreplace")


def _base64_pairs(fields: RawFields) -> RawBase64:
    return tuple((_base64(name), _base64(value)) for name, value in fields.items())


def _base64(part: str | bytes) -> str:
    data = part.encode("utf-8") if isinstance(part, str) else part
    return base64.b64encode(data).decode("ascii")


def encode_dead_letter(delivery: Delivery, reason: str) -> dict[str, str]:
    """DLQ entry fields: the original message id, the reason and the raw fields as evidence.

    Every value is ASCII (JSON escapes the rest), whatever bytes the carrier held.
    """
    raw = json.dumps(delivery.raw, separators=(",", ":"), sort_keys=True)
    fields = {"message_id": delivery.message_id, "reason": reason, "raw": raw}
    if delivery.raw_base64 is not None:
        fields["raw_base64"] = json.dumps([list(pair) for pair in delivery.raw_base64])
    return fields


def decode_dead_letter(dlq_id: str, fields: Mapping[str, str]) -> DeadLetter:
    """A DLQ entry as plaita wrote it; one written by hand is shown as best it can be."""
    raw = _json_or_none(fields.get("raw", "{}"))
    pairs = _json_or_none(fields.get("raw_base64", "null"))
    return DeadLetter(
        dlq_id=dlq_id,
        message_id=fields.get("message_id", ""),
        reason=fields.get("reason", ""),
        raw=(
            {str(key): str(value) for key, value in raw.items()}
            if isinstance(raw, dict)
            else {"raw": fields.get("raw", "")}
        ),
        raw_base64=(
            tuple((str(pair[0]), str(pair[1])) for pair in pairs if len(pair) == 2)
            if isinstance(pairs, list) and all(isinstance(pair, list) for pair in pairs)
            else None
        ),
    )


#: DLQ evidence may be as large as the carrier it copies; only its depth must stay parseable.
_EVIDENCE_LIMIT = JsonLimit("dead-letter evidence", ENVELOPE_LIMIT.max_depth, None)


def _json_or_none(text: str) -> Any:
    try:
        check_json_text(text, _EVIDENCE_LIMIT, field="dead letter")
        return json.loads(text)
    except (PayloadLimitError, ValueError):
        return None


#: Counter hash fields (W2, W7, W8): ``noderetry:<node id>`` and ``nodecrash:<node id>`` per
#: node, ``attempt`` for the open dispatch's lease generation, the others by name.
NODE_RETRY_PREFIX = f"{Counter.NODE_RETRIES.value}:"
NODE_CRASH_PREFIX = f"{Counter.NODE_CRASHES.value}:"
OPEN_ATTEMPT_FIELD = "attempt"
_NODE_PREFIXES = {Counter.NODE_RETRIES: NODE_RETRY_PREFIX, Counter.NODE_CRASHES: NODE_CRASH_PREFIX}
_EVERY_NODE = {
    Counter.ALL_NODE_RETRIES: NODE_RETRY_PREFIX,
    Counter.ALL_NODE_CRASHES: NODE_CRASH_PREFIX,
}


def counter_op(change: CounterChange) -> tuple[str, str]:
    """(op, field) of one change — ``incr``, ``del`` or ``delprefix``; ValueError if invalid.

    Every change is checked before any is written, by both counter adapters.
    """
    counter, op, node_id = change.counter, change.op, change.node_id
    if node_id is not None and counter not in _NODE_PREFIXES:
        raise ValueError(f"counter {counter.value!r} is per execution, not per node")
    if counter in _EVERY_NODE:
        if op is not CounterOp.RESET:
            raise ValueError("every node counter at once can only be reset")
        return "delprefix", _EVERY_NODE[counter]
    prefix = _NODE_PREFIXES.get(counter)
    field = counter.value if prefix is None else f"{prefix}{node_id or ''}"
    return ("incr" if op is CounterOp.INCREMENT else "del"), field


def counters_from_fields(fields: Mapping[str, int | str]) -> Counters:
    """The stored counter fields as ``Counters``; the node id None reads back as ``""``."""
    attempt = fields.get(OPEN_ATTEMPT_FIELD)
    return Counters(
        node_retries=_per_node(fields, NODE_RETRY_PREFIX),
        node_crashes=_per_node(fields, NODE_CRASH_PREFIX),
        total_retries=int(fields.get(Counter.TOTAL_RETRIES.value, 0)),
        wakeups=int(fields.get(Counter.WAKEUPS.value, 0)),
        no_fail=int(fields.get(Counter.NO_FAIL.value, 0)),
        open_attempt=None if attempt is None else int(attempt),
    )


def _per_node(fields: Mapping[str, int | str], prefix: str) -> dict[str, int]:
    return {
        name.removeprefix(prefix): int(value)
        for name, value in fields.items()
        if name.startswith(prefix)
    }
