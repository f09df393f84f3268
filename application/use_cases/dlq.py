"""Operator requests on the dead-letter queue: list, show and replay an entry (W10).

Replay is the one way a dead letter goes back to work. It claims a one-time marker per
(dlq_key, dlq_id) first, asks ``decide_replay`` what to do, and only then enqueues the entry's
own carrier; the DLQ entry is kept as evidence. Every attempt leaves one audit line
``event=dlq.replay outcome=…`` on the ``plaita.audit`` logger.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.application.codec import (
    ENVELOPE_FIELD,
    SCHEMA_FIELD,
    decode_envelope,
    envelope_document,
)
from plaita.application.ports import (
    Clock,
    DeadLetter,
    ExecutionRepository,
    IdGenerator,
    RawBase64,
    ReplayMarkerStore,
    TaskQueue,
)
from plaita.application.tenancy import tenant_scope
from plaita.domain.dead_letter import (
    REPLAY_MARKER_TTL_SECONDS,
    DlqEntry,
    ReplayDecision,
    ReplayOutcome,
    decide_replay,
    target_execution_id,
)
from plaita.domain.envelope import (
    CarrierKind,
    ResumeType,
    SchemaVerdict,
    TaskEnvelope,
    copy_envelope,
    decide_schema_version,
)
from plaita.domain.errors import (
    InvalidEnvelopeError,
    InvalidTenantIdError,
    PlaitaError,
    SchemaVersionError,
)
from plaita.domain.tenancy import DEFAULT_TENANT, validate_tenant_id

JSON = Any
audit = logging.getLogger("plaita.audit")

REPLAY_MARKER_TTL_MS = REPLAY_MARKER_TTL_SECONDS * 1000
#: How many of the newest entries ``show`` and ``replay`` search for an id: the TaskQueue port
#: reads the DLQ newest first only, so an older entry is out of reach until the port can read
#: one entry by id.
DEFAULT_SEARCH_WINDOW = 10_000


class UnknownDeadLetterError(PlaitaError):
    """No dead letter with this id among the newest entries of the DLQ (never there, or
    dropped by the DLQ length cap)."""


class UnreadableDeadLetterError(PlaitaError):
    """A dead letter holds no carrier this build can rebuild; it stays in the DLQ as evidence."""


@attrs.frozen
class DeadLetterView:
    """A dead letter as an operator reads it: why it was dead-lettered, what it carried."""

    dlq_id: str
    message_id: str
    reason: str
    kind: str | None
    execution_id: str | None
    flow_id: str | None
    resume_type: str | None
    tenant_id: str | None
    schema_version: str | None
    replayed: Mapping[str, JSON] | None
    raw: Mapping[str, str]
    #: The carrier's exact bytes when they were not UTF-8: (name, value) pairs, base64.
    raw_base64: RawBase64 | None = None

    def to_json(self) -> dict[str, JSON]:
        view = attrs.asdict(self)
        view["raw"] = dict(self.raw)
        view["replayed"] = None if self.replayed is None else dict(self.replayed)
        view["raw_base64"] = (
            None if self.raw_base64 is None else [list(pair) for pair in self.raw_base64]
        )
        return view


@attrs.frozen
class ReplayResult:
    dlq_id: str
    outcome: ReplayOutcome
    execution_id: str | None = None
    #: The replayed carrier's id on the task stream.
    message_id: str | None = None
    detail: str = ""

    def to_json(self) -> dict[str, JSON]:
        return {**attrs.asdict(self), "outcome": self.outcome.value}


class ListDeadLetters:
    def __init__(self, *, queue: TaskQueue, markers: ReplayMarkerStore, dlq_key: str) -> None:
        self._queue = queue
        self._markers = markers
        self._dlq_key = dlq_key

    async def __call__(self, *, count: int = 20) -> list[DeadLetterView]:
        """The newest ``count`` dead letters, newest first, each with its replay marker."""
        letters = await self._queue.dead_letters(count=count)
        return [await _view(letter, self._markers, self._dlq_key) for letter in letters]


class ShowDeadLetter:
    def __init__(
        self,
        *,
        queue: TaskQueue,
        markers: ReplayMarkerStore,
        dlq_key: str,
        search_window: int = DEFAULT_SEARCH_WINDOW,
    ) -> None:
        self._queue = queue
        self._markers = markers
        self._dlq_key = dlq_key
        self._search_window = search_window

    async def __call__(self, dlq_id: str) -> DeadLetterView:
        letter = await _find(self._queue, dlq_id, self._search_window)
        return await _view(letter, self._markers, self._dlq_key)


class ReplayDeadLetter:
    def __init__(
        self,
        *,
        queue: TaskQueue,
        markers: ReplayMarkerStore,
        executions: ExecutionRepository,
        clock: Clock,
        ids: IdGenerator,
        dlq_key: str,
        search_window: int = DEFAULT_SEARCH_WINDOW,
    ) -> None:
        self._queue = queue
        self._markers = markers
        self._executions = executions
        self._clock = clock
        self._ids = ids
        self._dlq_key = dlq_key
        self._search_window = search_window

    async def __call__(self, dlq_id: str, *, tenant_id: str | None = None) -> ReplayResult:
        letter = await _find(self._queue, dlq_id, self._search_window)
        try:
            entry = _entry(self._dlq_key, letter)
        except UnreadableDeadLetterError as exc:
            _audit_refusal(dlq_id, "unreadable", None, str(exc))
            raise
        execution_id = target_execution_id(entry)
        try:
            entry_tenant = validate_tenant_id(entry.tenant_id or DEFAULT_TENANT)
        except InvalidTenantIdError as exc:
            _audit_refusal(dlq_id, "unreadable", execution_id, str(exc))
            raise UnreadableDeadLetterError(
                f"dead letter {dlq_id} names an invalid tenant: {exc}; it cannot be replayed"
            ) from None
        marker = json.dumps(
            {
                "execution_id": execution_id,
                "replayed_at_ms": self._clock.now_ms(),
                "attempt_id": self._ids.new_id(),
            },
            separators=(",", ":"),
            sort_keys=True,
        )
        # Claimed before anything else: of two racing replays only one gets past this line.
        claimed = await self._markers.claim(
            self._dlq_key, dlq_id, marker, ttl_ms=REPLAY_MARKER_TTL_MS
        )
        tombstone = None
        stored = None
        if claimed:
            # The tombstone and the state live in the entry's tenant (W24).
            with tenant_scope(entry_tenant):
                tombstone = await self._executions.tombstone(execution_id)
                stored = await self._executions.load(execution_id)
        decision = decide_replay(
            entry,
            marker_set=not claimed,
            tombstone=tombstone,
            requested_tenant=tenant_id,
            status=None if stored is None else stored.status,
        )
        if decision.outcome is not ReplayOutcome.REPLAYED:
            if claimed:
                # A refused replay must not use up the entry's one replay.
                await self._markers.release(self._dlq_key, dlq_id, marker)
            if decision.outcome is ReplayOutcome.SCHEMA_TOO_NEW:
                # Nothing but the version was read: an id minted for it would mislead.
                return self._refused(dlq_id, decision, entry.execution_id)
            return self._refused(dlq_id, decision, execution_id)
        try:
            message_id = await self._queue.enqueue(_carrier(letter, entry, decision))
        except UnreadableDeadLetterError as exc:
            await self._markers.release(self._dlq_key, dlq_id, marker)
            _audit_refusal(dlq_id, "unreadable", execution_id, str(exc))
            raise
        except Exception as exc:
            # Nothing was replayed, so the entry keeps its one replay for the next try.
            await self._markers.release(self._dlq_key, dlq_id, marker)
            _audit_refusal(dlq_id, "enqueue_failed", execution_id, repr(exc))
            raise
        audit.info(
            "event=dlq.replay outcome=replayed dlq_id=%s execution_id=%s tenant=%s "
            "message_id=%s dedup_key=%s",
            dlq_id,
            decision.execution_id,
            decision.tenant_id,
            message_id,
            decision.dedup_key,
        )
        return ReplayResult(dlq_id, ReplayOutcome.REPLAYED, decision.execution_id, message_id)

    def _refused(
        self, dlq_id: str, decision: ReplayDecision, execution_id: str | None
    ) -> ReplayResult:
        detail = decision.detail or _REFUSAL_ADVICE.get(decision.outcome, "")
        _audit_refusal(dlq_id, decision.outcome.value, execution_id, detail)
        return ReplayResult(dlq_id, decision.outcome, execution_id, detail=detail)


_REFUSAL_ADVICE = {
    ReplayOutcome.ALREADY_REPLAYED: (
        "this entry was replayed before (the marker lasts 7 days); check the execution instead"
    ),
    ReplayOutcome.EXECUTION_DELETED: (
        "the execution was deleted (tombstone); start a new execution if the work is needed"
    ),
}


def _audit_refusal(dlq_id: str, outcome: str, execution_id: str | None, detail: str) -> None:
    audit.warning(
        "event=dlq.replay outcome=%s dlq_id=%s execution_id=%s detail=%r",
        outcome,
        dlq_id,
        execution_id,
        detail,
    )


async def _find(queue: TaskQueue, dlq_id: str, window: int) -> DeadLetter:
    for letter in await queue.dead_letters(count=window):
        if letter.dlq_id == dlq_id:
            return letter
    raise UnknownDeadLetterError(
        f"no dead letter {dlq_id!r} among the newest {window} entries of the DLQ: it never "
        "was one, or the DLQ length cap (PLAITA_DLQ_MAX_LEN) dropped it as the DLQ filled "
        "up (list what is there with `plaita dlq list`)"
    )


async def _view(letter: DeadLetter, markers: ReplayMarkerStore, dlq_key: str) -> DeadLetterView:
    document = _document(letter.raw) or {}
    marker = await markers.get(dlq_key, letter.dlq_id)
    return DeadLetterView(
        dlq_id=letter.dlq_id,
        message_id=letter.message_id,
        reason=letter.reason,
        kind=_text(document.get("kind")),
        execution_id=_text(document.get("execution_id")),
        flow_id=_text(document.get("flow_id")),
        resume_type=_text(document.get("resume_type")),
        tenant_id=_text(document.get("tenant_id")),
        schema_version=letter.raw.get(SCHEMA_FIELD),
        replayed=None if marker is None else _marker(marker),
        raw=letter.raw,
        raw_base64=letter.raw_base64,
    )


def _resume_type(value: object) -> ResumeType | None:
    try:
        return ResumeType(value) if isinstance(value, str) else None
    except ValueError:
        return None  # a type this build does not know: decided as any other resume


def _entry(dlq_key: str, letter: DeadLetter) -> DlqEntry:
    """What ``decide_replay`` needs, read from the carrier's raw fields.

    A too-new schema is decided on its version alone: this build may not understand the rest
    of such an envelope, and it is refused before anything of it is used.
    """
    schema = decide_schema_version(letter.raw.get(SCHEMA_FIELD))
    if schema.verdict is SchemaVerdict.INVALID:
        raise UnreadableDeadLetterError(f"dead letter {letter.dlq_id}: {schema.reason}")
    version = None if schema.raw is None else schema.version
    document = _document(letter.raw)
    if schema.verdict is SchemaVerdict.TOO_NEW:
        execution_id = None if document is None else _text(document.get("execution_id"))
        return DlqEntry(dlq_key, letter.dlq_id, CarrierKind.START, execution_id, version, None)
    if document is None or document.get("kind") not in ("start", "resume"):
        raise UnreadableDeadLetterError(
            f"dead letter {letter.dlq_id} holds no task envelope (reason {letter.reason!r}); "
            "it stays in the DLQ as evidence: fix the producer and start the work anew"
        )
    try:
        return DlqEntry(
            dlq_key=dlq_key,
            dlq_id=letter.dlq_id,
            kind=CarrierKind(document["kind"]),
            execution_id=_text(document.get("execution_id")),
            schema_version=version,
            tenant_id=_text(document.get("tenant_id")),
            dedup_key=_text(document.get("dedup_key")),
            resume_type=_resume_type(document.get("resume_type")),
        )
    except ValueError as exc:
        raise UnreadableDeadLetterError(f"dead letter {letter.dlq_id}: {exc}") from None


def _carrier(letter: DeadLetter, entry: DlqEntry, decision: ReplayDecision) -> TaskEnvelope:
    """The entry's own carrier, under the id, tenant and dedup key the decision names.

    A copy keeps the source's timestamp and schema version (W11, W14): a replay must not make
    an old carrier look young to the age gate.
    """
    document = _document(letter.raw) or {}
    # The envelope document requires an id; a start that had none runs under the minted one.
    document["execution_id"] = decision.execution_id
    fields = {**letter.raw, ENVELOPE_FIELD: json.dumps(document, separators=(",", ":"))}
    try:
        envelope = decode_envelope(fields)
    except (InvalidEnvelopeError, SchemaVersionError) as exc:
        raise UnreadableDeadLetterError(f"dead letter {entry.dlq_id}: {exc}") from None
    return copy_envelope(
        envelope,
        execution_id=decision.execution_id,
        tenant_id=decision.tenant_id,
        dedup_key=decision.dedup_key,
    )


def _document(raw: Mapping[str, str]) -> dict[str, JSON] | None:
    return envelope_document(raw)


def _marker(value: str) -> dict[str, JSON]:
    try:
        parsed = json.loads(value)
    except ValueError:
        return {"value": value}
    return parsed if isinstance(parsed, dict) else {"value": value}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
