"""Task envelopes on the wire: flat string fields, validated by pydantic at the boundary.

Adapters store ``encode_envelope(...)`` as the stream entry's fields and hand what they read
to ``decode_envelope``; a malformed entry raises ``InvalidEnvelopeError`` and is kept, raw,
as evidence (R4). ``schema_version`` travels as its own field so a worker can refuse a newer
envelope without having to understand the rest of it (W11).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from plaita.application.ports import Counters, DeadLetter, Delivery
from plaita.domain.budgets import Counter, CounterChange, CounterOp
from plaita.domain.config_generations import MALFORMED_EVENT, read_generations
from plaita.domain.envelope import (
    CURRENT_SCHEMA_VERSION,
    CarrierKind,
    ResumeType,
    TaskEnvelope,
    check_schema_version,
)
from plaita.domain.errors import InvalidEnvelopeError, InvalidTenantIdError, SchemaVersionError

log = logging.getLogger("plaita.codec")

ENVELOPE_FIELD = "envelope"
SCHEMA_FIELD = "schema_version"


class EnvelopeDocument(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: Literal["start", "resume"]
    execution_id: str = Field(min_length=1)
    flow_id: str = Field(min_length=1)
    timestamp_ms: int = Field(ge=0)
    version: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    resume_type: Literal["continue", "retry", "event", "timeout", "cancel"] | None = None
    event: dict[str, Any] | None = None
    subscription_id: str | None = None
    tenant_id: str = Field(default="default", min_length=1)
    dedup_key: str | None = None
    # Any: a malformed generation makes the carrier legacy (W12 rule 4), not undecodable.
    config_family: Any = None
    config_generation: Any = None
    budget_generation: Any = None


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
            execution_id=document.execution_id,
            flow_id=document.flow_id,
            timestamp_ms=document.timestamp_ms,
            version=document.version,
            params=document.params,
            resume_type=None if document.resume_type is None else ResumeType(document.resume_type),
            event=document.event,
            subscription_id=document.subscription_id,
            tenant_id=document.tenant_id,
            dedup_key=document.dedup_key,
            schema_version=schema_version,
            generations=generations.generations,
        )
    except (ValueError, InvalidTenantIdError) as exc:
        raise InvalidEnvelopeError(f"malformed task envelope: {exc}") from None


def decode_delivery(
    message_id: str, fields: dict[str, str], delivery_count: int, *, reclaimed: bool = False
) -> Delivery:
    """A queue entry as a ``Delivery``; an undecodable one keeps its raw fields and the reason."""
    try:
        envelope = decode_envelope(fields)
    except (InvalidEnvelopeError, SchemaVersionError) as exc:
        return Delivery(message_id, None, fields, delivery_count, reclaimed, problem=str(exc))
    return Delivery(message_id, envelope, fields, delivery_count, reclaimed)


def encode_dead_letter(delivery: Delivery, reason: str) -> dict[str, str]:
    """DLQ entry fields: the original message id, the reason and the raw fields as evidence."""
    raw = json.dumps(delivery.raw, separators=(",", ":"), sort_keys=True)
    return {"message_id": delivery.message_id, "reason": reason, "raw": raw}


def decode_dead_letter(dlq_id: str, fields: Mapping[str, str]) -> DeadLetter:
    return DeadLetter(
        dlq_id=dlq_id,
        message_id=fields.get("message_id", ""),
        reason=fields.get("reason", ""),
        raw=json.loads(fields.get("raw", "{}")),
    )


#: Counter hash fields (W7, W8): ``noderetry:<node id>`` per node, the others by name.
NODE_RETRY_PREFIX = f"{Counter.NODE_RETRIES.value}:"


def counter_op(change: CounterChange) -> tuple[str, str]:
    """(op, field) of one change — ``incr``, ``del`` or ``delprefix``; ValueError if invalid.

    Every change is checked before any is written, by both counter adapters.
    """
    counter, op, node_id = change.counter, change.op, change.node_id
    if node_id is not None and counter is not Counter.NODE_RETRIES:
        raise ValueError(f"counter {counter.value!r} is per execution, not per node")
    if counter is Counter.ALL_NODE_RETRIES:
        if op is not CounterOp.RESET:
            raise ValueError("every node counter at once can only be reset")
        return "delprefix", NODE_RETRY_PREFIX
    if counter is Counter.NODE_RETRIES:
        field = f"{NODE_RETRY_PREFIX}{node_id or ''}"
    else:
        field = counter.value
    return ("incr" if op is CounterOp.INCREMENT else "del"), field


def counters_from_fields(fields: Mapping[str, int | str]) -> Counters:
    """The stored counter fields as ``Counters``; the node id None reads back as ``""``."""
    return Counters(
        node_retries={
            name.removeprefix(NODE_RETRY_PREFIX): int(value)
            for name, value in fields.items()
            if name.startswith(NODE_RETRY_PREFIX)
        },
        total_retries=int(fields.get(Counter.TOTAL_RETRIES.value, 0)),
        wakeups=int(fields.get(Counter.WAKEUPS.value, 0)),
        no_fail=int(fields.get(Counter.NO_FAIL.value, 0)),
    )
