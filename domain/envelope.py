"""Task envelopes ("carriers"): what travels on the task stream (W1, W11, W12, W14, W25)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.domain.errors import (
    InvalidHandoverCountError,
    InvalidTargetInstanceError,
    SchemaVersionError,
)
from plaita.domain.ids import id_problem
from plaita.domain.priorities import Priority
from plaita.domain.tenancy import validate_tenant_id

JSON = Any

#: The envelope schema this build writes and the newest it understands (W11).
CURRENT_SCHEMA_VERSION = 1
#: What an envelope without a ``schema_version`` field is: written before the field existed.
LEGACY_SCHEMA_VERSION = 1


class CarrierKind(enum.StrEnum):
    START = "start"
    RESUME = "resume"


class ResumeType(enum.StrEnum):
    CONTINUE = "continue"
    RETRY = "retry"
    EVENT = "event"
    TIMEOUT = "timeout"
    CANCEL = "cancel"
    #: A child execution ended (E13, E14): its parent counts it; ``subscription_id`` names it.
    CHILD = "child"


@attrs.frozen
class CarrierGenerations:
    """The configuration generations a carrier was written under (W12); ``None`` = legacy."""

    config_family: str | None = None
    config_generation: str | None = None
    budget_generation: str | None = None

    @property
    def is_legacy(self) -> bool:
        return self.config_family is None and self.budget_generation is None


#: What a carrier written before generations existed names: nothing (W12 rule 4, executable).
LEGACY_GENERATIONS = CarrierGenerations()


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
    #: For an event's resume: the path that routed the event to its wait (an ``EventPath``
    #: value), recorded in the history; ``rate_limit`` on the continue copy of a node held
    #: back by its rate limit (W23); None on every other carrier and on older ones.
    origin: str | None = None
    #: W25: the worker instance (its ``--consumer-name``) this carrier asks to run on; None:
    #: any worker. Older carriers have none. Copies keep it; a stripped copy names none.
    target_instance_id: str | None = None
    #: W25: how often workers have passed this carrier on towards its target (0 on a new
    #: carrier and on older ones); a copy handed over counts one more.
    handovers: int = 0
    #: Required, so no carrier is ever built without saying whose rules it was written under
    #: (W12): a producer passes its own generations, the wire decoder what it read, a copy
    #: (``copy_envelope``) its source's; ``LEGACY_GENERATIONS`` only for a legacy carrier.
    generations: CarrierGenerations = attrs.field(kw_only=True)
    #: The trace context of the span that wrote this carrier when it continues another trace
    #: than its execution's (an event's resume: the event filter's span), which the resumed
    #: step links to (C6); None on every other carrier and on older ones.
    traceparent: str | None = None
    #: Which of its queue's streams the carrier travels on (``plaita.domain.priorities``); a
    #: start's is the one asked for, a copy keeps its source's, older carriers are normal.
    priority: Priority = Priority.NORMAL

    def __attrs_post_init__(self) -> None:
        validate_tenant_id(self.tenant_id)  # W24: a carrier always names a valid tenant
        if self.target_instance_id is not None:
            validate_target_instance_id(self.target_instance_id)
        check_handovers(self.handovers)
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
        generations: CarrierGenerations,
        tenant_id: str = "default",
        dedup_key: str | None = None,
        target_instance_id: str | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> TaskEnvelope:
        """A new start carrier, stamped with its producer's current ``generations`` (W12);
        ``target_instance_id`` asks for one worker instance (W25), ``priority`` its stream."""
        return cls(
            kind=CarrierKind.START,
            execution_id=execution_id,
            flow_id=flow_id,
            version=version,
            params=dict(params),
            timestamp_ms=now_ms,
            tenant_id=tenant_id,
            dedup_key=dedup_key,
            generations=generations,
            target_instance_id=target_instance_id,
            priority=priority,
        )

    @classmethod
    def resume(
        cls,
        *,
        execution_id: str,
        flow_id: str,
        resume_type: ResumeType,
        now_ms: int,
        generations: CarrierGenerations,
        event: Mapping[str, JSON] | None = None,
        subscription_id: str | None = None,
        tenant_id: str = "default",
        origin: str | None = None,
        traceparent: str | None = None,
        target_instance_id: str | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> TaskEnvelope:
        """A new resume carrier, stamped with its producer's current ``generations`` (W12);
        ``target_instance_id`` only for the continuation of a dispatch that had one (W25),
        ``priority`` likewise (any other resume is normal)."""
        return cls(
            kind=CarrierKind.RESUME,
            execution_id=execution_id,
            flow_id=flow_id,
            resume_type=resume_type,
            event=None if event is None else dict(event),
            subscription_id=subscription_id,
            timestamp_ms=now_ms,
            tenant_id=tenant_id,
            generations=generations,
            origin=origin,
            traceparent=traceparent,
            target_instance_id=target_instance_id,
            priority=priority,
        )


def validate_target_instance_id(value: object) -> str:
    """``value`` unchanged, or ``InvalidTargetInstanceError`` saying why it is no instance id.

    A worker's instance id is its ``--consumer-name``; a target must obey the id rule (it is
    written to the carrier, the history and log lines).
    """
    problem = id_problem(value, "target instance id")
    if problem is not None:
        raise InvalidTargetInstanceError(
            f"{problem}; name a worker by its instance id (its --consumer-name, as "
            "`plaita workers list` shows it)"
        )
    assert isinstance(value, str)
    return value


def check_handovers(value: object) -> int:
    """``value`` unchanged when it is a whole number of at least 0; otherwise
    ``InvalidHandoverCountError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidHandoverCountError(
            f"a carrier's hand-over count must be a whole number of at least 0, got {value!r}"
        )
    return value


class EventPath(enum.StrEnum):
    """How an event reached the wait that took it (the history's ``event_received.via``)."""

    #: The event filter routed it when it was published (V4).
    FILTER = "filter"
    #: A re-scan of stored events found it after its notification was lost (V10).
    RECONCILER = "reconciler"
    #: It was in the execution's inbox before the wait, which took it at once (V6).
    INBOX = "inbox"


class SchemaVerdict(enum.StrEnum):
    """What a worker does with an envelope's ``schema_version`` (W11); values name DLQ reasons."""

    ACCEPT = "accept"
    TOO_NEW = "schema_too_new"
    INVALID = "schema_invalid"


@attrs.frozen
class SchemaDecision:
    verdict: SchemaVerdict
    #: The version as understood; ``None`` when the field could not be read as an integer.
    version: int | None
    #: The field exactly as it arrived; ``None`` when it was absent (a legacy envelope).
    raw: str | None
    reason: str = ""

    @property
    def accepted(self) -> bool:
        return self.verdict is SchemaVerdict.ACCEPT

    @property
    def evidence(self) -> dict[str, str]:
        """Fields a dead letter keeps so audit and replay never have to guess (W9, W11)."""
        return {
            "schema_version": "<absent>" if self.raw is None else self.raw,
            "max_schema_version": str(CURRENT_SCHEMA_VERSION),
            "schema_verdict": self.verdict.value,
            "schema_reason": self.reason,
        }


def decide_schema_version(raw: object) -> SchemaDecision:
    """Accept, or reject as too new / invalid, the ``schema_version`` field of an envelope (W11).

    The same decision serves a first read and a reclaim: a worker that crashed before it
    dead-lettered a too-new envelope must not run it under old semantics after a restart.
    An absent field is a legacy envelope, version 1.
    """
    if raw is None:
        return SchemaDecision(SchemaVerdict.ACCEPT, LEGACY_SCHEMA_VERSION, None)
    text = str(raw)
    version = _as_version(raw)
    if version is None:
        return SchemaDecision(
            SchemaVerdict.INVALID,
            None,
            text,
            f"envelope schema_version {text!r} is not an integer",
        )
    if version > CURRENT_SCHEMA_VERSION:
        return SchemaDecision(
            SchemaVerdict.TOO_NEW,
            version,
            text,
            f"envelope schema_version {version} is newer than {CURRENT_SCHEMA_VERSION}, "
            "the newest this worker understands; upgrade the worker to process it",
        )
    if version < 1:
        return SchemaDecision(
            SchemaVerdict.INVALID,
            version,
            text,
            f"envelope schema_version {version} is not a valid version",
        )
    return SchemaDecision(SchemaVerdict.ACCEPT, version, text)


def _as_version(raw: object) -> int | None:
    # bool is an int subclass: `true` on the wire is not version 1.
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        try:
            return int(raw)
        except ValueError:
            return None
    return None


def check_schema_version(version: int) -> None:
    """Raise ``SchemaVersionError`` for an envelope newer than this build understands (W11)."""
    decision = decide_schema_version(int(version))
    if not decision.accepted:
        raise SchemaVersionError(decision.reason)


def copy_envelope(source: TaskEnvelope, /, **changes: Any) -> TaskEnvelope:
    """A carrier the worker writes in place of ``source``: a retry, hand-over or recovery copy.

    It keeps the source's ``schema_version`` (W11: a copy written by a newer worker in a mixed
    pool must stay readable by the older ones, and a too-new source must not be laundered into
    a current one), its ``timestamp_ms`` (W14: a copy is as old as its source, or re-enqueueing
    would reset the carrier-age gate), its tenant and its generations (W12: a copy is never
    re-stamped with this worker's rules) and its priority (a retry of an urgent start stays
    urgent). ``changes`` override fields explicitly — e.g.
    ``timestamp_ms=tombstone.copy_timestamp_ms(...)`` when the source's stream-id time is older
    than its payload stamp. Never build a copy with ``TaskEnvelope.start``/``resume``: they
    stamp this build's version and the current time.
    """
    return attrs.evolve(source, **changes)


def continue_copy(source: TaskEnvelope, /, **changes: Any) -> TaskEnvelope:
    """``source`` as a continue resume of its execution (a copy, see ``copy_envelope``): what
    a node's retry and a rate-limited node's next try are scheduled as. It carries no event,
    wait or dedup key of its source; ``changes`` override fields as ``copy_envelope``'s do."""
    return copy_envelope(
        source,
        kind=CarrierKind.RESUME,
        resume_type=ResumeType.CONTINUE,
        event=None,
        subscription_id=None,
        dedup_key=None,
        **changes,
    )
