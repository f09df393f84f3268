"""Claiming a start's dedup key, orphans included (W6).

Asked by the start use case before a start carrier exists and by the worker before a start
writes its first row; both follow ``decide_dedup_claim``. A key whose holder never got a
row and whose claim was never confirmed (the claimer died between claiming and enqueueing)
is an orphan once it is older than the grace: it is released — only if it still names that
holder — and claimed again, so a lost start never swallows its key for seven days.
"""

from __future__ import annotations

import logging

import attrs

from plaita.application.ports import DedupClaim, DedupStore, ExecutionRepository
from plaita.domain.dedup import (
    DEDUP_TTL_MS,
    DedupHolder,
    HolderCarrier,
    StartDecision,
    StartKind,
    StartRequest,
    StoredExecution,
    decide_dedup_claim,
)

log = logging.getLogger("plaita.dedup")

#: Claim, find an orphan, release it, claim again: a second orphan in a row means another
#: caller is racing for the key, and that caller's claim is young, so two rounds suffice.
MAX_CLAIM_ROUNDS = 3


@attrs.frozen
class ClaimOutcome:
    decision: StartDecision
    #: The flow of the execution the key names, when it has a row.
    holder_flow_id: str | None = None


class DedupClaims:
    def __init__(self, *, dedup: DedupStore, executions: ExecutionRepository) -> None:
        self._dedup = dedup
        self._executions = executions

    async def claim(self, request: StartRequest, *, tenant_id: str) -> ClaimOutcome:
        """Claim ``request.dedup_key`` for ``request.execution_id``; the domain's answer.

        Never RECLAIM: an orphan is released and claimed again here. Call inside the tenant's
        scope: the holder's row is read to tell a finished start from a lost one.
        """
        key = request.dedup_key
        assert key is not None, "only a start with a dedup key is claimed"
        decision = None
        for _ in range(MAX_CLAIM_ROUNDS):
            claim = await self._dedup.claim(
                key, request.execution_id, tenant_id=tenant_id, ttl_ms=DEDUP_TTL_MS
            )
            holder = None if claim is None else await self._holder(claim)
            decision = decide_dedup_claim(request, holder)
            if decision.kind is not StartKind.RECLAIM:
                stored = None if holder is None else holder.stored
                return ClaimOutcome(decision, None if stored is None else stored.flow_id)
            assert claim is not None
            released = await self._dedup.release(key, claim.execution_id, tenant_id=tenant_id)
            log.warning(
                "event=dedup.orphan_released tenant_id=%s dedup_key=%r holder=%s released=%s "
                "age_ms=%s: the key named an execution whose start never reached the queue; "
                "it is claimed again for %s",
                tenant_id,
                key,
                claim.execution_id,
                released,
                claim.age_ms,
                request.execution_id,
            )
        assert decision is not None
        # Still an orphan after every round: answer as if its start were on its way (never
        # start twice on a guess); the next start with this key tries again.
        return ClaimOutcome(
            StartDecision(StartKind.IN_FLIGHT, decision.execution_id, decision.detail)
        )

    async def confirm(self, request: StartRequest, *, tenant_id: str) -> None:
        """The start carrier of ``request`` is enqueued: its claim is no orphan any more."""
        assert request.dedup_key is not None
        await self._dedup.confirm(request.dedup_key, request.execution_id, tenant_id=tenant_id)

    async def _holder(self, claim: DedupClaim) -> DedupHolder:
        state = await self._executions.load(claim.execution_id)
        stored = None if state is None else StoredExecution(state.flow_id, state.status)
        carrier = HolderCarrier.PRESENT if claim.carrier_enqueued else HolderCarrier.UNKNOWN
        return DedupHolder(claim.execution_id, stored, carrier, claim.age_ms)
