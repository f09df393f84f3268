"""Task envelopes ("carriers"): what travels on the task stream (W1, W11)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.domain.errors import SchemaVersionError

JSON = Any

#: The envelope schema this build writes and the newest it understands (W11).
CURRENT_SCHEMA_VERSION = 1


class CarrierKind(enum.StrEnum):
    START = "start"
    RESUME = "resume"


class ResumeType(enum.StrEnum):
    CONTINUE = "continue"
    RETRY = "retry"
    EVENT = "event"
    TIMEOUT = "timeout"
    CANCEL = "cancel"


@attrs.frozen
class TaskEnvelope:
    kind: CarrierKind
    execution_id: str
    flow_id: str
    timestamp_ms: int
    version: str | None = None
    params: Mapping[str, JSON] = attrs.field(factory=dict)
    resume_type: ResumeType | None = None
    event: Mapping[str, JSON] | None = None
    subscription_id: str | None = None
    tenant_id: str = "default"
    dedup_key: str | None = None
    schema_version: int = CURRENT_SCHEMA_VERSION

    def __attrs_post_init__(self) -> None:
        if (self.kind is CarrierKind.RESUME) != (self.resume_type is not None):
            raise ValueError("a resume carrier needs a resume_type and a start carrier has none")

    @classmethod
    def start(
        cls,
        *,
        execution_id: str,
        flow_id: str,
        version: str | None,
        params: Mapping[str, JSON],
        now_ms: int,
        tenant_id: str = "default",
        dedup_key: str | None = None,
    ) -> TaskEnvelope:
        return cls(
            kind=CarrierKind.START,
            execution_id=execution_id,
            flow_id=flow_id,
            version=version,
            params=dict(params),
            timestamp_ms=now_ms,
            tenant_id=tenant_id,
            dedup_key=dedup_key,
        )

    @classmethod
    def resume(
        cls,
        *,
        execution_id: str,
        flow_id: str,
        resume_type: ResumeType,
        now_ms: int,
        event: Mapping[str, JSON] | None = None,
        subscription_id: str | None = None,
        tenant_id: str = "default",
    ) -> TaskEnvelope:
        return cls(
            kind=CarrierKind.RESUME,
            execution_id=execution_id,
            flow_id=flow_id,
            resume_type=resume_type,
            event=None if event is None else dict(event),
            subscription_id=subscription_id,
            timestamp_ms=now_ms,
            tenant_id=tenant_id,
        )


def check_schema_version(version: int) -> None:
    """Raise ``SchemaVersionError`` for an envelope newer than this build understands (W11)."""
    if version > CURRENT_SCHEMA_VERSION:
        raise SchemaVersionError(
            f"envelope schema_version {version} is newer than {CURRENT_SCHEMA_VERSION}, "
            "the newest this worker understands; upgrade the worker to process it"
        )
    if version < 1:
        raise SchemaVersionError(f"envelope schema_version {version} is not a valid version")
