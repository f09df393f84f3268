"""The zombie reaper: give a carrier back to running executions that lost theirs (W19).

A ``running`` execution whose carrier is gone (a breach of invariant I0: a Redis restart
without persistence, a hand-edited stream, a bug) never moves again. The reaper finds them and
enqueues a resume-continue carrier, which advances the execution from its checkpoint.

The TaskQueue port cannot list which executions have a queued or pending carrier, so "no
carrier" is inferred: no live lease and no checkpoint for ``stale_after_ms`` (default three
lease TTLs). A crashed holder's carrier is reclaimed after claim_min_idle_ms and its lease
expires after one TTL, so by then a carrier that still existed would have moved the
execution. A carrier stuck behind a backlog longer than that gets a duplicate: harmless, as a
second continue either meets the lease or finds the step already done.

An execution whose holder recorded a node heartbeat within the last three heartbeat intervals
(W15) is alive, like one with a live lease, and is skipped. So is a paused one (W23): its
carriers are parked on purpose, and unpause gives them back.

A lease can also outlive its dispatch: a watchdog that kept renewing after the dispatch it
belonged to had ended (a store client that swallowed the cancellation) holds a running or
suspended execution's lease with nobody advancing it, and every carrier of the execution
meets that "live" lease for ever. Every dispatch records its attempt under its lease
generation before it runs and clears it when it returns (W2), so a held lease whose
generation has no open attempt has no live dispatch. The reaper looks twice, a moment apart
(an attempt is recorded within milliseconds of the acquisition), and then revokes the lease
— only if it is still the one it saw — so the execution's own carriers run again.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from plaita.application.ports import (
    Clock,
    CounterStore,
    ExecutionControls,
    ExecutionRepository,
    LeaseManager,
    TaskQueue,
    TenantDirectory,
)
from plaita.application.tenancy import current_tenant
from plaita.application.use_cases.borrowed_lease import BorrowedLease, BorrowOutcome
from plaita.application.use_cases.flows import FlowCatalog
from plaita.domain.envelope import CarrierGenerations, ResumeType, TaskEnvelope
from plaita.domain.errors import ExecutionLeaseError, UnknownFlowError
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus
from plaita.domain.failures import CODE_FLOW_ERROR
from plaita.domain.lease import Lease
from plaita.domain.tenant_status import decide_tenant_gate

JSON = Any
log = logging.getLogger("plaita.reaper")

STALE_AFTER_LEASE_TTLS = 3
#: W19: "alive" = an open node whose last update is within this many heartbeats.
ALIVE_WITHIN_HEARTBEATS = 3
DEFAULT_LIMIT = 1000
#: Between the two looks at a lease without an open attempt: far above the time from an
#: acquisition to the attempt's record (one round trip), far below a dispatch's life.
LEAK_CONFIRM_SECONDS = 2.0


class ReapAction(enum.StrEnum):
    REQUEUE = "requeue"
    #: The flow definition is gone: no carrier could ever advance it (W19).
    TERMINALISE = "terminalise"
    #: A lease no dispatch holds (its attempt is not open): revoked so the execution's own
    #: carriers run again; a running one also gets a resume-continue carrier.
    REVOKE_LEASE = "revoke_lease"
    SKIP_LEASE_HELD = "skip_lease_held"
    #: A node heartbeat fresher than three heartbeat intervals: its holder is alive (W19).
    SKIP_NODE_ALIVE = "skip_node_alive"
    #: An operator paused it (W23): it is meant to stand still.
    SKIP_PAUSED = "skip_paused"
    #: Its tenant's carriers are parked (suspended) or held (a status of another deployment
    #: epoch) by the workers (W24): a new carrier would only wait beside the others.
    SKIP_TENANT_WAITS = "skip_tenant_waits"
    SKIP_RECENT = "skip_recent"
    #: It moved on (or another holder took it) while the reaper looked.
    SKIP_CHANGED = "skip_changed"


@attrs.frozen
class ReapItem:
    execution_id: str
    flow_id: str
    tenant_id: str
    idle_ms: int
    action: ReapAction
    detail: str = ""

    @property
    def orphan(self) -> bool:
        return self.action in (ReapAction.REQUEUE, ReapAction.TERMINALISE, ReapAction.REVOKE_LEASE)

    def to_json(self) -> dict[str, JSON]:
        return {**attrs.asdict(self), "action": self.action.value}


@attrs.frozen
class ReapReport:
    items: tuple[ReapItem, ...]
    dry_run: bool
    stale_after_ms: int

    @property
    def orphans(self) -> tuple[ReapItem, ...]:
        return tuple(item for item in self.items if item.orphan)

    def counts(self) -> dict[str, int]:
        return {action.value: sum(i.action is action for i in self.items) for action in ReapAction}

    def to_json(self) -> dict[str, JSON]:
        return {
            "dry_run": self.dry_run,
            "stale_after_ms": self.stale_after_ms,
            "counts": self.counts(),
            "items": [item.to_json() for item in self.items],
        }


class ReapZombies:
    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        leases: LeaseManager,
        queue: TaskQueue,
        flows: FlowCatalog,
        counters: CounterStore,
        clock: Clock,
        holder_id: str,
        lease_ttl_ms: int,
        stale_after_ms: int | None = None,
        generations: CarrierGenerations,
        heartbeat_interval_ms: int | None = None,
        controls: ExecutionControls,
        tenants: TenantDirectory,
        deployment_epoch: int | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._generations = generations
        self._controls = controls
        self._tenants = tenants
        self._epoch = deployment_epoch
        self._executions = executions
        self._leases = leases
        self._queue = queue
        self._flows = flows
        self._counters = counters
        self._clock = clock
        self._sleep = sleep
        self._borrow = BorrowedLease(executions, leases, holder_id, lease_ttl_ms)
        self._stale_after_ms = (
            STALE_AFTER_LEASE_TTLS * lease_ttl_ms if stale_after_ms is None else stale_after_ms
        )
        # The worker renews its lease, and records the heartbeat, every third of the TTL.
        interval = lease_ttl_ms // 3 if heartbeat_interval_ms is None else heartbeat_interval_ms
        self._alive_within_ms = ALIVE_WITHIN_HEARTBEATS * interval

    async def __call__(self, *, dry_run: bool = False, limit: int = DEFAULT_LIMIT) -> ReapReport:
        # A pending execution (accepted, ADR 0022) whose start carrier never reached the queue
        # is one more kind of running execution without a carrier.
        running = [
            *await self._executions.list(status=ExecutionStatus.RUNNING, limit=limit),
            *await self._executions.list(status=ExecutionStatus.PENDING, limit=limit),
        ]
        suspended = await self._executions.list(status=ExecutionStatus.SUSPENDED, limit=limit)
        flows_present: dict[tuple[str, str], bool] = {}
        tenant_waits = await self._tenant_waits() if running else None
        items: list[ReapItem] = []
        suspects: list[tuple[ExecutionState, Lease]] = []
        for state in suspended:
            holder = await self._leases.holder(state.execution_id)
            if holder is not None and await self._no_open_attempt(holder):
                suspects.append((state, holder))
        for state in running:
            idle_ms = max(0, self._clock.now_ms() - state.updated_at_ms)
            item = _item(state, idle_ms, ReapAction.SKIP_RECENT)
            holder = await self._leases.holder(state.execution_id)
            if holder is not None and await self._no_open_attempt(holder):
                suspects.append((state, holder))
                continue
            if idle_ms < self._stale_after_ms:
                items.append(item)
                continue
            if holder is not None:
                items.append(attrs.evolve(item, action=ReapAction.SKIP_LEASE_HELD))
                continue
            heartbeat = await self._executions.last_heartbeat(state.execution_id)
            if (
                heartbeat is not None
                and self._clock.now_ms() - heartbeat.last_update_ms < self._alive_within_ms
            ):
                detail = (
                    f"node {heartbeat.node_id!r} reported progress at {heartbeat.last_update_ms}"
                )
                items.append(attrs.evolve(item, action=ReapAction.SKIP_NODE_ALIVE, detail=detail))
                continue
            if (await self._controls.get(state.execution_id)).paused:
                detail = "paused by an operator; `plaita executions unpause` resumes it"
                items.append(attrs.evolve(item, action=ReapAction.SKIP_PAUSED, detail=detail))
                continue
            if tenant_waits is not None:
                items.append(
                    attrs.evolve(item, action=ReapAction.SKIP_TENANT_WAITS, detail=tenant_waits)
                )
                continue
            key = (state.flow_id, state.flow_version)
            if key not in flows_present:
                flows_present[key] = await self._flow_present(*key)
            action = ReapAction.REQUEUE if flows_present[key] else ReapAction.TERMINALISE
            item = attrs.evolve(item, action=action)
            if not dry_run:
                item = await self._act(item, state)
            items.append(item)
        items.extend(await self._leaked(suspects, dry_run=dry_run))
        return ReapReport(tuple(items), dry_run, self._stale_after_ms)

    async def _tenant_waits(self) -> str | None:
        """Why the workers do not run this tenant's carriers now, or None when they do."""
        tenant_id = current_tenant()
        record = await self._tenants.get(tenant_id)
        gate = decide_tenant_gate(record, tenant_id, self._epoch, parkable=True)
        return None if gate.runs else gate.detail

    async def _flow_present(self, flow_id: str, version: str) -> bool:
        try:
            await self._flows.get(flow_id, version)
        except UnknownFlowError:
            return False
        return True

    # --- leases no dispatch holds -------------------------------------------------------

    async def _no_open_attempt(self, lease: Lease) -> bool:
        counters = await self._counters.read(lease.execution_id)
        return counters.open_attempt != lease.generation

    async def _leaked(
        self, suspects: list[tuple[ExecutionState, Lease]], *, dry_run: bool
    ) -> list[ReapItem]:
        """Look again after a moment; revoke the leases that still have no dispatch."""
        if not suspects:
            return []
        await self._sleep(LEAK_CONFIRM_SECONDS)
        items = []
        for state, seen in suspects:
            idle_ms = max(0, self._clock.now_ms() - state.updated_at_ms)
            item = _item(state, idle_ms, ReapAction.SKIP_LEASE_HELD)
            now_held = await self._leases.holder(state.execution_id)
            if now_held != seen or not await self._no_open_attempt(seen):
                items.append(attrs.evolve(item, detail="a dispatch holds the lease"))
                continue
            detail = (
                f"lease generation {seen.generation} of {seen.holder_id!r} is held but no "
                "dispatch of it is open"
            )
            item = attrs.evolve(item, action=ReapAction.REVOKE_LEASE, detail=detail)
            if not dry_run:
                item = await self._revoke(item, state, seen)
            items.append(item)
        return items

    async def _revoke(self, item: ReapItem, state: ExecutionState, lease: Lease) -> ReapItem:
        if not await self._leases.release(lease):
            return attrs.evolve(item, action=ReapAction.SKIP_CHANGED, detail="the lease moved on")
        log.warning(
            "event=reap.lease_revoked execution_id=%s status=%s holder=%s generation=%s: the "
            "lease was held with no dispatch open under it (a watchdog that outlived its "
            "dispatch?); revoked so the execution's carriers run again. Check that worker's "
            "log for event=lease.keeper_slow_to_stop",
            state.execution_id,
            state.status.value,
            lease.holder_id,
            lease.generation,
        )
        if state.status.advances_on_continue:
            await self._queue.enqueue(
                _continue_carrier(state, self._clock.now_ms(), self._generations)
            )
        return item

    async def _act(self, item: ReapItem, state: ExecutionState) -> ReapItem:
        if item.action is ReapAction.TERMINALISE:
            return await self._terminalise(item, state)
        await self._queue.enqueue(_continue_carrier(state, self._clock.now_ms(), self._generations))
        log.warning(
            "event=reap.requeued execution_id=%s flow_id=%s idle_ms=%d: running with no lease "
            "and no step for %d ms; a resume-continue carrier was enqueued. A carrier was lost: "
            "check Redis persistence and the worker logs for event=worker.dispatch_crashed",
            state.execution_id,
            state.flow_id,
            item.idle_ms,
            item.idle_ms,
        )
        return item

    async def _terminalise(self, item: ReapItem, state: ExecutionState) -> ReapItem:
        detail = (
            f"flow {state.flow_id!r} version {state.flow_version!r} is not registered; "
            "ended by the zombie reaper (W19). Register the flow and retry the execution"
        )

        async def fail(current: ExecutionState | None) -> ExecutionState:
            return state.transition(
                ExecutionStatus.ERROR,
                now_ms=self._clock.now_ms(),
                error=ExecutionError(
                    CODE_FLOW_ERROR, detail, state.next_node_id, "UnknownFlowError"
                ),
            )

        # A conditional write: under the lease, and only if the checkpoint is the one we saw.
        try:
            borrowed = await self._borrow.write(state.execution_id, fail, expect=state)
        except ExecutionLeaseError:
            return attrs.evolve(item, action=ReapAction.SKIP_CHANGED)
        if borrowed.outcome is BorrowOutcome.LEASE_TAKEN:
            return attrs.evolve(item, action=ReapAction.SKIP_LEASE_HELD)
        if borrowed.outcome is BorrowOutcome.STATE_CHANGED:
            return attrs.evolve(item, action=ReapAction.SKIP_CHANGED)
        log.warning(
            "event=reap.terminalised execution_id=%s flow_id=%s version=%s: running with no "
            "carrier and its flow definition is gone; it ends in error. Register the flow and "
            "retry the execution to continue it",
            state.execution_id,
            state.flow_id,
            state.flow_version,
        )
        return attrs.evolve(item, detail=detail)


def _continue_carrier(
    state: ExecutionState, now_ms: int, generations: CarrierGenerations
) -> TaskEnvelope:
    return TaskEnvelope.resume(
        execution_id=state.execution_id,
        flow_id=state.flow_id,
        resume_type=ResumeType.CONTINUE,
        now_ms=now_ms,
        tenant_id=state.tenant_id,
        generations=generations,
    )


def _item(state: ExecutionState, idle_ms: int, action: ReapAction) -> ReapItem:
    return ReapItem(state.execution_id, state.flow_id, state.tenant_id, idle_ms, action)
