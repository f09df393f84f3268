"""Start policy: a start never runs an execution twice (W6).

Two total functions, asked in this order by the worker with a start carrier:

``decide_start`` (the carrier's own execution row, loaded under its lease):

 #  own row                     -> kind             why
 S1 none, no dedup key          -> NEW_START
 S2 none, dedup key             -> CLAIM_DEDUP_KEY  claim before any row is written
 S3 row of another flow         -> ID_CONFLICT      a new row would
                                                    overwrite the other flow's checkpoint
 S4 row of this flow            -> RESUME_CONTINUE  #91: never replay from the first node

``decide_dedup_claim`` (after SET NX; X = the execution the key maps to):

 D1 claimed now                                 -> NEW_START
 D2 X is this execution, no row                 -> NEW_START         our claim, crash before row
 D3 X is this execution, row                    -> as decide_start (S3/S4)
 D4 X terminal                                  -> ALREADY           "already" result, no start
 D5 X running                                   -> ENQUEUE_CONTINUE  stranded by a crash
 D5a X pending (accepted, ADR 0022)             -> IN_FLIGHT         its start carrier is queued
 D6 X suspended                                 -> CURRENT_STATE     its own wake-ups resume it
 D7 X no row, carrier present                   -> IN_FLIGHT         X's start is on its way
 D8 X no row, carrier absent                    -> RECLAIM           orphan mapping
 D9 X no row, carrier unknown, claim >= grace   -> RECLAIM           orphan mapping
 D10 X no row, carrier unknown, young or ageless -> IN_FLIGHT        never start twice on a guess

RESUME_CONTINUE hands the carrier to ``decide_resume`` as a continue; RECLAIM releases the
mapping (only if it still names X) and claims again, then asks again.
"""

from __future__ import annotations

import enum

import attrs

from plaita.domain.errors import ExecutionIdConflictError, InvalidDedupKeyError
from plaita.domain.execution import ExecutionStatus

#: How long a dedup key keeps pointing at its execution (W6).
DEDUP_TTL_MS = 7 * 24 * 60 * 60 * 1000
#: An unconfirmed mapping without a row this old is an orphan. A claim is taken before its start
#: carrier is enqueued and confirmed right after (carrier PRESENT), so an unconfirmed one is a
#: start call that has not finished — or never will: its caller got no answer. The grace is far
#: above any call's duration; a confirmed claim is never an orphan, however long the backlog.
DEDUP_ORPHAN_GRACE_MS = 60_000 + 120_000


def dedup_claim_key(tenant_id: str, dedup_key: str) -> str:
    """The tenant-scoped name of a claim; a store prefixes it with its namespace (W6, W24)."""
    _check_dedup_key(dedup_key)
    if not tenant_id:
        raise InvalidDedupKeyError("a dedup key needs an explicit tenant; the tenant is empty")
    return f"dedup:{{{tenant_id}}}:{dedup_key}"


def _check_dedup_key(key: str | None) -> None:
    if key is not None and not key:
        raise InvalidDedupKeyError(
            "dedup_key is empty: leave it out to start without deduplication, or name the request"
        )


class StartKind(enum.StrEnum):
    NEW_START = "new_start"
    CLAIM_DEDUP_KEY = "claim_dedup_key"
    RESUME_CONTINUE = "resume_continue"
    ID_CONFLICT = "execution_id_conflict"
    ALREADY = "already"
    ENQUEUE_CONTINUE = "enqueue_continue"
    CURRENT_STATE = "current_state"
    IN_FLIGHT = "in_flight"
    RECLAIM = "reclaim"


class HolderCarrier(enum.StrEnum):
    PRESENT = "present"
    ABSENT = "absent"
    UNKNOWN = "unknown"


@attrs.frozen
class StartRequest:
    execution_id: str
    flow_id: str
    dedup_key: str | None = attrs.field(default=None)

    @dedup_key.validator
    def _named(self, _attribute: object, key: str | None) -> None:
        _check_dedup_key(key)


@attrs.frozen
class StoredExecution:
    flow_id: str
    status: ExecutionStatus


@attrs.frozen
class DedupHolder:
    """The execution a claimed key maps to, and what is known of it."""

    execution_id: str
    stored: StoredExecution | None
    carrier: HolderCarrier = HolderCarrier.UNKNOWN
    claim_age_ms: int | None = None


_K = StartKind
_ACKED = frozenset(
    {_K.ID_CONFLICT, _K.ALREADY, _K.CURRENT_STATE, _K.IN_FLIGHT, _K.ENQUEUE_CONTINUE}
)


@attrs.frozen
class StartDecision:
    """``execution_id`` is the execution the outcome is about: this one, or the key's holder."""

    kind: StartKind
    execution_id: str
    detail: str
    error: ExecutionIdConflictError | None = attrs.field(default=None, eq=False)

    @property
    def ack(self) -> bool:
        """Ack the start carrier with no node run for it (after the enqueue, for a continue)."""
        return self.kind in _ACKED

    @property
    def poison(self) -> bool:
        return self.kind is StartKind.ID_CONFLICT


def decide_start(request: StartRequest, stored: StoredExecution | None) -> StartDecision:
    xid = request.execution_id
    if stored is None:
        if request.dedup_key is None:
            return StartDecision(StartKind.NEW_START, xid, f"start {xid}")
        return StartDecision(StartKind.CLAIM_DEDUP_KEY, xid, f"claim {request.dedup_key!r}")
    if stored.flow_id != request.flow_id:
        message = (
            f"execution {xid} belongs to flow {stored.flow_id!r}; a start for flow "
            f"{request.flow_id!r} cannot reuse its id: the carrier is acked as poison and the "
            "execution left untouched; start the other flow under a new id"
        )
        error = ExecutionIdConflictError(message)
        return StartDecision(StartKind.ID_CONFLICT, xid, message, error=error)
    return StartDecision(StartKind.RESUME_CONTINUE, xid, f"{xid} exists: continue it")


def decide_dedup_claim(
    request: StartRequest,
    holder: DedupHolder | None,
    *,
    orphan_grace_ms: int = DEDUP_ORPHAN_GRACE_MS,
) -> StartDecision:
    xid = request.execution_id
    if holder is None:
        return StartDecision(StartKind.NEW_START, xid, f"{request.dedup_key!r} claimed for {xid}")
    if holder.execution_id == xid:
        if holder.stored is None:
            return StartDecision(StartKind.NEW_START, xid, f"{xid} already holds its key")
        return decide_start(request, holder.stored)
    x, stored = holder.execution_id, holder.stored
    if stored is not None:
        if stored.status.is_terminal:
            return StartDecision(StartKind.ALREADY, x, f"key held by {x}, {stored.status}")
        if stored.status is ExecutionStatus.RUNNING:
            return StartDecision(StartKind.ENQUEUE_CONTINUE, x, f"key held by running {x}")
        if stored.status is ExecutionStatus.PENDING:
            # Accepted moments ago, most likely: its start carrier is queued. Were it lost (a
            # crash between the acceptance and the enqueue), the zombie reaper gives it one.
            return StartDecision(StartKind.IN_FLIGHT, x, f"key held by {x}, accepted, not started")
        return StartDecision(StartKind.CURRENT_STATE, x, f"key held by {x}, {stored.status}")
    if _is_orphan(holder, orphan_grace_ms):
        return StartDecision(StartKind.RECLAIM, x, f"key held by {x}, which never started")
    return StartDecision(StartKind.IN_FLIGHT, x, f"key held by {x}, whose start is on its way")


def _is_orphan(holder: DedupHolder, grace_ms: int) -> bool:
    if holder.carrier is not HolderCarrier.UNKNOWN:
        return holder.carrier is HolderCarrier.ABSENT
    return holder.claim_age_ms is not None and holder.claim_age_ms >= grace_ms
