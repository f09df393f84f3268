"""Delete an execution: revoke whoever advances it, remove its state, leave a tombstone (W13).

The tombstone is what makes a delete final: carriers still queued, pending or delayed for
the execution meet it at the worker's dispatch gate and are dropped instead of bringing the
execution back. The repository's delete removes everything else of the execution (state,
counters, heartbeat, operator flags, parked carriers) in the same step; a second delete runs
it again, so whatever was written for the execution since is removed too, and the first
tombstone is kept.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from plaita.application.ports import (
    Clock,
    DedupStore,
    ExecutionRepository,
    LeaseManager,
    SubscriptionStore,
)
from plaita.application.use_cases.borrowed_lease import BorrowedLease
from plaita.domain.errors import UnknownExecutionError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.retention import DEFAULT_RETENTION_MS
from plaita.domain.tombstone import (
    DEFAULT_CARRIER_MAX_AGE_MS,
    Tombstone,
    record_delete,
    tombstone_ttl_seconds,
)

JSON = Any
audit = logging.getLogger("plaita.audit")
log = logging.getLogger("plaita.operator")


@attrs.frozen
class DeletedExecution:
    execution_id: str
    #: The stored tombstone: the first delete's, when the execution was deleted before.
    tombstone: Tombstone
    #: False when an earlier delete had already left the tombstone (and its deleted_at).
    deleted_now: bool
    #: The worker whose lease this delete revoked, if one held it.
    revoked_holder: str | None = None
    #: The subscription of a suspended execution that was removed with it.
    removed_subscription: str | None = None
    tombstone_ttl_seconds: int | None = None
    #: The start's dedup key, released so it may start a new execution (W6, W13).
    released_dedup_key: str | None = None

    def to_json(self) -> dict[str, JSON]:
        return {**attrs.asdict(self), "tombstone": self.tombstone.to_json()}


class DeleteExecution:
    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        leases: LeaseManager,
        subscriptions: SubscriptionStore,
        clock: Clock,
        holder_id: str,
        lease_ttl_ms: int,
        carrier_max_age_ms: int = DEFAULT_CARRIER_MAX_AGE_MS,
        tombstone_ttl_seconds: int | None = None,
        retention_ms: int = DEFAULT_RETENTION_MS,
        dedup: DedupStore,
    ) -> None:
        self._dedup = dedup
        self._executions = executions
        self._leases = leases
        self._subscriptions = subscriptions
        self._clock = clock
        self._borrow = BorrowedLease(executions, leases, holder_id, lease_ttl_ms)
        self._carrier_max_age_ms = carrier_max_age_ms
        self._tombstone_ttl_seconds = tombstone_ttl_seconds
        # W13: a tombstone outlives the state TTL, the retention of a terminal execution (S5).
        self._state_ttl_seconds = -(-retention_ms // 1000)

    async def __call__(
        self, execution_id: str, *, reason: str = "deleted by operator"
    ) -> DeletedExecution:
        state = await self._executions.load(execution_id)
        existing = await self._executions.tombstone(execution_id)
        if state is not None:
            tenant_id = state.tenant_id
        elif existing is not None:
            tenant_id = existing.tenant_id
        else:
            raise UnknownExecutionError(
                f"execution {execution_id!r} does not exist and was not deleted: nothing to "
                "delete (a start still queued for it runs when a worker reads it)"
            )
        tombstone = record_delete(
            existing, tenant_id=tenant_id, now_ms=self._clock.now_ms(), reason=reason
        )
        ttl_seconds = self._ttl_seconds(execution_id)
        # A free lease is taken so the delete is fenced like any write; a held one is revoked
        # (fence None): the generation moves on and the holder's next checkpoint is refused.
        # The delete removes the lease with the state, so the release after it finds nothing
        # to give back; it matters when the delete fails.
        async with self._borrow.held(execution_id) as lease:
            revoked = None if lease is not None else await self._leases.holder(execution_id)
            stored = await self._executions.delete(
                execution_id,
                fence=None if lease is None else lease.generation,
                tombstone=tombstone,
                tombstone_ttl_ms=ttl_seconds * 1000,
            )
        removed = await self._remove_subscription(state)
        released_dedup = await self._release_dedup(state)
        deleted = DeletedExecution(
            execution_id,
            stored,
            deleted_now=existing is None,
            revoked_holder=None if revoked is None else revoked.holder_id,
            removed_subscription=removed,
            tombstone_ttl_seconds=ttl_seconds,
            released_dedup_key=released_dedup,
        )
        audit.info(
            "event=execution.deleted execution_id=%s tenant=%s reason=%r deleted_at_ms=%d "
            "first_delete=%s revoked_holder=%s removed_subscription=%s released_dedup_key=%s",
            execution_id,
            stored.tenant_id,
            stored.reason,
            stored.deleted_at_ms,
            deleted.deleted_now,
            deleted.revoked_holder,
            removed,
            released_dedup,
        )
        return deleted

    async def _release_dedup(self, state: ExecutionState | None) -> str | None:
        """Free the start's dedup key: the key may start a new execution again (W6, W13).

        Only a claim that still names this execution is released (compare-and-delete), so a
        key that already moved on to another execution is left alone.
        """
        if state is None or state.dedup_key is None:
            return None
        key = state.dedup_key
        released = await self._dedup.release(key, state.execution_id, tenant_id=state.tenant_id)
        return key if released else None

    async def _remove_subscription(self, state: ExecutionState | None) -> str | None:
        # After the delete: an event arriving in between meets the tombstone, not the state.
        if state is None or state.status is not ExecutionStatus.SUSPENDED:
            return None
        suspension = state.suspension
        if suspension is None:
            return None
        subscription_id = suspension.subscription_id
        if subscription_id and await self._subscriptions.remove(subscription_id):
            return subscription_id
        return None

    def _ttl_seconds(self, execution_id: str) -> int:
        ttl = tombstone_ttl_seconds(
            configured_seconds=self._tombstone_ttl_seconds,
            state_ttl_seconds=self._state_ttl_seconds,
            carrier_max_age_ms=self._carrier_max_age_ms,
        )
        if ttl.fell_back_to_default:
            log.warning(
                "event=delete.tombstone_ttl_default execution_id=%s configured=%s: a tombstone "
                "TTL must be positive; using %d s. Fix the configured tombstone TTL",
                execution_id,
                self._tombstone_ttl_seconds,
                ttl.seconds,
            )
        if ttl.clamped_to_max_age:
            log.warning(
                "event=delete.tombstone_ttl_clamped execution_id=%s ttl_seconds=%d: the carrier "
                "max age is shorter than 30 days or the state TTL, so the tombstone lasts only "
                "as long as a carrier may; raise PLAITA_MAX_CARRIER_AGE_DAYS for a longer one",
                execution_id,
                ttl.seconds,
            )
        return ttl.seconds
