"""Dead letters: the one guard on every path to the DLQ (W9), replay (W10) and the cap.

The guard exists for invariant I0: a carrier may be the only one a non-terminal execution
has, so it reaches the DLQ only when nothing is lost by that (#242, #252).
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Mapping

import attrs

from plaita.domain.envelope import CURRENT_SCHEMA_VERSION, CarrierKind, ResumeType
from plaita.domain.execution import ExecutionStatus
from plaita.domain.tombstone import Tombstone, parse_stream_id_ms

REPLAY_MARKER_TTL_SECONDS = 7 * 24 * 60 * 60
#: Never change: replays of a start without an id must mint the same id forever.
REPLAY_NAMESPACE = uuid.UUID("1b7ee482-61d4-5b21-b6b0-219589215236")
DLQ_TRIMMED_METRIC = "dlq_trimmed"


class ExecutionLookup(enum.StrEnum):
    TERMINAL = "terminal"
    NON_TERMINAL = "non_terminal"
    MISSING = "missing"
    FAILED = "failed"


class LeaseLookup(enum.StrEnum):
    HELD = "held"
    FREE = "free"
    UNKNOWN = "unknown"  # the lease read failed


class GuardAction(enum.StrEnum):
    RELEASE = "release"
    KEEP_PENDING = "keep_pending"
    TERMINALISE_THEN_RELEASE = "terminalise_then_release"
    ENQUEUE_COPY_THEN_RELEASE = "enqueue_copy_then_release"
    RELEASE_ONCE_NO_COPY = "release_once_no_copy"


@attrs.frozen
class GuardDecision:
    action: GuardAction
    reason: str  # grep-able: event=dlq_guard.<reason>

    @property
    def releases(self) -> bool:
        return self.action is not GuardAction.KEEP_PENDING


def guard_dead_letter(
    *,
    execution: ExecutionLookup,
    lease: LeaseLookup,
    node_budget_exhausted: bool,
    schema_rejected: bool,
    start_carrier: bool = False,
) -> GuardDecision:
    """Decide a carrier's way to the DLQ; first matching row wins (W9).

    A terminal execution needs no carrier. A held lease means a live holder is still on it,
    and a failed lookup proves nothing, so both keep the carrier. A schema-rejected carrier is
    released once without a copy: the copy would inherit the same version and be rejected
    again, a loop that adds one DLQ entry per round (A49-01). With no execution there is
    nothing to recover. A spent node budget is made terminal first, because a recovery copy
    would only spend the budget again, for ever. Otherwise the holder is gone: a recovery copy
    goes out before the carrier is released. TERMINALISE and ENQUEUE_COPY must succeed before
    the release; if they fail the carrier stays pending. The copy passes the tombstone gate
    (GUARD_CLONE) first; a deleted execution gets no copy and the carrier is released.
    """
    if execution is ExecutionLookup.TERMINAL:
        return GuardDecision(GuardAction.RELEASE, "execution_terminal")
    if execution is ExecutionLookup.FAILED or lease is LeaseLookup.UNKNOWN:
        return GuardDecision(GuardAction.KEEP_PENDING, "lookup_failed")
    if lease is LeaseLookup.HELD:
        return GuardDecision(GuardAction.KEEP_PENDING, "lease_held")
    if schema_rejected:
        return GuardDecision(GuardAction.RELEASE_ONCE_NO_COPY, "schema_rejected")
    if execution is ExecutionLookup.MISSING and start_carrier:
        # A start whose first node kept killing its workers before any checkpoint: releasing
        # it would lose the execution its caller was promised. Record the failure instead,
        # visible and retryable (I0, "never lose an execution").
        return GuardDecision(GuardAction.TERMINALISE_THEN_RELEASE, "start_never_checkpointed")
    if execution is ExecutionLookup.MISSING:
        return GuardDecision(GuardAction.RELEASE, "execution_missing")
    if node_budget_exhausted:
        return GuardDecision(GuardAction.TERMINALISE_THEN_RELEASE, "node_budget_exhausted")
    return GuardDecision(GuardAction.ENQUEUE_COPY_THEN_RELEASE, "holder_gone")


def dead_letter_fields(
    *, reason: str, fields: Mapping[str, str], malformed: bool, now_ms: int
) -> dict[str, str]:
    """Evidence a DLQ entry carries besides the carrier: why, when, which schema (W9, W11).

    A missing version is the legacy v1; an unreadable one is kept verbatim with the raw fields
    rather than guessed, so audit and replay never depend on a guess (#252).
    """
    version = fields.get("schema_version", str(CURRENT_SCHEMA_VERSION))
    evidence = {"reason": reason, "schema_version": version, "dead_lettered_at": str(now_ms)}
    if malformed or not (version.isascii() and version.isdigit()):
        evidence["raw_fields"] = json.dumps(dict(fields), sort_keys=True, separators=(",", ":"))
    return evidence


def dlq_overflow(length: int, max_len: int) -> int:
    """How many of the oldest entries to trim; lossy FIFO, each drop counted in ``dlq_trimmed``.

    Trimming discards unprocessed evidence, so the caller also logs a WARNING. 0 = no cap.
    """
    return max(0, length - max_len) if max_len > 0 else 0


# --- replay (W10) -------------------------------------------------------------------------


class ReplayOutcome(enum.StrEnum):
    REPLAYED = "replayed"
    ALREADY_REPLAYED = "already_replayed"
    SCHEMA_TOO_NEW = "schema_too_new"
    EXECUTION_DELETED = "execution_deleted"
    EXECUTION_ENDED = "execution_ended"
    TENANT_MISMATCH = "tenant_mismatch"


@attrs.frozen
class DlqEntry:
    """What replay needs of a DLQ entry. ``None`` means the carrier lacked the field: pass
    ``tenant_id=None`` rather than the envelope's "default" when the raw carrier named none."""

    dlq_key: str
    dlq_id: str  # a stream id: "<ms>-<seq>"
    kind: CarrierKind
    execution_id: str | None
    schema_version: int | None  # None: legacy v1
    tenant_id: str | None
    dedup_key: str | None = None
    #: A resume carrier's type (None for a start, or a carrier that named none).
    resume_type: ResumeType | None = None

    def __attrs_post_init__(self) -> None:
        if self.kind is CarrierKind.RESUME and not self.execution_id:
            raise ValueError("a resume dead letter without an execution_id cannot be replayed")
        if self.schema_version is not None and self.schema_version < 1:
            raise ValueError(f"schema_version {self.schema_version} is not a valid version")


@attrs.frozen
class ReplayDecision:
    """Every decision is audited; a replay claims the marker (SET NX, lost race = already
    replayed) then enqueues, releasing the marker if the enqueue fails. The entry is kept."""

    outcome: ReplayOutcome
    execution_id: str | None = None
    tenant_id: str | None = None
    dedup_key: str | None = None
    schema_version: int | None = None
    detail: str = ""


def replay_execution_id(dlq_key: str, dlq_id: str) -> str:
    """Deterministic id for a start that has none: an expired marker still converges.

    Injective over (dlq_key, dlq_id) because a stream id never contains ':'.
    """
    return str(uuid.uuid5(REPLAY_NAMESPACE, f"{dlq_key}:{dlq_id}"))


def target_execution_id(entry: DlqEntry) -> str:
    """The id a replay of ``entry`` runs under; look its tombstone up before deciding."""
    return entry.execution_id or replay_execution_id(entry.dlq_key, entry.dlq_id)


def decide_replay(
    entry: DlqEntry,
    *,
    marker_set: bool,
    tombstone: Tombstone | None,
    requested_tenant: str | None,
    build_schema_version: int = CURRENT_SCHEMA_VERSION,
    status: ExecutionStatus | None = None,
) -> ReplayDecision:
    """Replay a DLQ entry at most once per marker lifetime, never into a deleted execution,
    and never into one that has ended, where the carrier would do nothing (``status`` is the
    stored execution's, None when there is none): only a retry carrier acts on an execution
    in ``error`` (it wakes it up, W7)."""
    if marker_set:
        return ReplayDecision(ReplayOutcome.ALREADY_REPLAYED)
    version = CURRENT_SCHEMA_VERSION if entry.schema_version is None else entry.schema_version
    if version > build_schema_version:
        # Refused before enqueue: a copy this build cannot read would be dead-lettered again.
        return ReplayDecision(ReplayOutcome.SCHEMA_TOO_NEW, detail=f"schema_version {version}")
    tenant = entry.tenant_id or requested_tenant
    if tenant is None or (requested_tenant and requested_tenant != tenant):
        # A tenant-less entry must be given one explicitly: writes never default (W24).
        detail = (
            "entry names no tenant; pass one explicitly"
            if tenant is None
            else f"entry tenant {tenant!r}, requested {requested_tenant!r}"
        )
        return ReplayDecision(ReplayOutcome.TENANT_MISMATCH, detail=detail)
    execution_id = target_execution_id(entry)
    if tombstone is not None and tombstone.blocks(tenant):
        return ReplayDecision(ReplayOutcome.EXECUTION_DELETED, execution_id=execution_id)
    if status is not None and status.is_terminal and not _wakes(entry, status):
        return ReplayDecision(
            ReplayOutcome.EXECUTION_ENDED,
            execution_id=execution_id,
            detail=(
                f"execution {execution_id} has already ended ({status}): its carrier would "
                "do nothing, so nothing was replayed"
                + (
                    f"; to run it again, retry it (plaita executions retry {execution_id})"
                    if status is not ExecutionStatus.COMPLETED
                    else "; start a new execution if the work is needed again"
                )
            ),
        )
    dedup_key = entry.dedup_key
    if entry.kind is CarrierKind.START and not entry.execution_id and dedup_key is None:
        dedup_key = f"dlq-replay:{entry.dlq_key}:{entry.dlq_id}"
    return ReplayDecision(ReplayOutcome.REPLAYED, execution_id, tenant, dedup_key, version)


def _wakes(entry: DlqEntry, status: ExecutionStatus) -> bool:
    return (
        status is ExecutionStatus.ERROR
        and entry.kind is CarrierKind.RESUME
        and entry.resume_type is ResumeType.RETRY
    )


def replay_timestamp_ms(
    *, payload_timestamp_ms: int | None, dead_lettered_at_ms: int | None, dlq_id: str
) -> int | None:
    """A replayed carrier keeps its age: payload stamp, else dead-lettered-at, else the DLQ
    stream id; never now, or replay would launder an old carrier past the age gate (W14)."""
    if payload_timestamp_ms is not None:
        return payload_timestamp_ms
    if dead_lettered_at_ms is not None:
        return dead_lettered_at_ms
    return parse_stream_id_ms(dlq_id)
