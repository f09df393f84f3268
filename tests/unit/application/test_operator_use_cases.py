"""Operator use cases on the memory twin: DLQ replay (W10), delete (W13), the reaper (W19)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest

from plaita.adapters.memory.controls import MemoryExecutionControls
from plaita.adapters.memory.counters import MemoryCounterStore
from plaita.adapters.memory.dedup import MemoryDedupStore
from plaita.adapters.memory.delay_queue import MemoryDelayQueue
from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.adapters.memory.inbox import MemoryInbox
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.rate_buckets import MemoryRateBuckets
from plaita.adapters.memory.registry import MemoryWorkerRegistry
from plaita.adapters.memory.replay_markers import MemoryReplayMarkerStore
from plaita.adapters.memory.slot_tables import MemorySlotTables
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.memory.subscriptions import MemorySubscriptionStore
from plaita.adapters.memory.tenants import MemoryTenantDirectory
from plaita.adapters.memory.waiting_notes import MemoryWaitingNotes
from plaita.application.codec import encode_envelope
from plaita.application.leased_load import SequentialLeasedLoad
from plaita.application.use_cases.delete_execution import DeleteExecution
from plaita.application.use_cases.dlq import (
    ListDeadLetters,
    ReplayDeadLetter,
    ShowDeadLetter,
    UnknownDeadLetterError,
    UnreadableDeadLetterError,
)
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.reap import ReapAction, ReapZombies
from plaita.application.use_cases.step import Disposition, ProcessTask, StepSettings
from plaita.domain.dead_letter import ReplayOutcome, replay_execution_id
from plaita.domain.envelope import LEGACY_GENERATIONS, CarrierKind, ResumeType, TaskEnvelope
from plaita.domain.errors import ExecutionLeaseError, UnknownExecutionError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.tombstone import DEFAULT_TOMBSTONE_TTL_SECONDS, Tombstone

from .conftest import FakeClock, SequentialIds, handler_registry

DLQ_KEY = "plaita:q:{default}:dlq"
LEASE_TTL_MS = 120_000
WAITING = {
    "flow_id": "waiting",
    "start": "prepare",
    "nodes": [
        {"id": "prepare", "type": "task", "handler": "t:prepare", "next": "wait"},
        {"id": "wait", "type": "event", "event_type": "go", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}


@attrs.define
class Ops:
    clock: FakeClock
    ids: SequentialIds
    leases: MemoryLeaseManager
    executions: MemoryExecutionRepository
    queue: MemoryTaskQueue
    subscriptions: MemorySubscriptionStore
    flows: MemoryFlowRepository
    markers: MemoryReplayMarkerStore
    counters: MemoryCounterStore

    def replay(self, queue: Any = None) -> ReplayDeadLetter:
        return ReplayDeadLetter(
            queue=queue or self.queue,
            markers=self.markers,
            executions=self.executions,
            clock=self.clock,
            ids=self.ids,
            dlq_key=DLQ_KEY,
        )

    def delete(self) -> DeleteExecution:
        return self.delete_with(MemoryDedupStore(self.clock))

    def delete_with(self, dedup: MemoryDedupStore) -> DeleteExecution:
        return DeleteExecution(
            executions=self.executions,
            leases=self.leases,
            subscriptions=self.subscriptions,
            clock=self.clock,
            holder_id="operator",
            lease_ttl_ms=LEASE_TTL_MS,
            dedup=dedup,
        )

    def reaper(self, sleep: Callable[[float], Awaitable[None]] | None = None) -> ReapZombies:
        return ReapZombies(
            executions=self.executions,
            leases=self.leases,
            queue=self.queue,
            flows=FlowCatalog(self.flows, None, clock=self.clock),
            counters=self.counters,
            clock=self.clock,
            holder_id="reaper",
            lease_ttl_ms=LEASE_TTL_MS,
            sleep=sleep or self.clock.sleep,
            generations=LEGACY_GENERATIONS,
            controls=MemoryExecutionControls(self.clock),
            tenants=MemoryTenantDirectory(),
        )

    def process(self) -> ProcessTask:
        """The worker step with its tombstone gate wired to this repository."""
        counters = self.counters
        handlers = handler_registry(prepare=lambda params, ctx: "prepared")
        return ProcessTask(
            executions=self.executions,
            leases=self.leases,
            leased_load=SequentialLeasedLoad(self.leases, self.executions),
            flows=FlowCatalog(self.flows, handlers, clock=self.clock),
            queue=self.queue,
            subscriptions=self.subscriptions,
            handlers=handlers,
            clock=self.clock,
            ids=self.ids,
            settings=StepSettings(
                holder_id="worker-a", lease_ttl_ms=LEASE_TTL_MS, generations=LEGACY_GENERATIONS
            ),
            counters=counters,
            delay=MemoryDelayQueue(self.clock, self.queue),
            registry=MemoryWorkerRegistry(self.clock),
            dedup=MemoryDedupStore(self.clock),
            inbox=MemoryInbox(self.clock),
            controls=MemoryExecutionControls(self.clock),
            slots=MemorySlotTables(),
            waiting=MemoryWaitingNotes(self.clock),
            tenants=MemoryTenantDirectory(),
            rate_buckets=MemoryRateBuckets(),
        )

    def start(self, execution_id: str = "x-1", tenant_id: str = "default") -> TaskEnvelope:
        return TaskEnvelope.start(
            execution_id=execution_id,
            flow_id="waiting",
            version="1",
            params={},
            now_ms=self.clock.now_ms(),
            tenant_id=tenant_id,
            generations=LEGACY_GENERATIONS,
        )

    async def dead_letter(self, fields: dict[str, str], reason: str = "boom") -> str:
        await self.queue.enqueue_raw(fields)
        [delivery] = await self.queue.read("test", count=1, block_ms=1)
        return await self.queue.dead_letter(delivery, reason)

    async def carriers(self) -> list[TaskEnvelope]:
        """Every carrier waiting on the task stream (read and acked)."""
        found = []
        for delivery in await self.queue.read("probe", count=100, block_ms=1):
            assert delivery.envelope is not None
            found.append(delivery.envelope)
            await self.queue.ack(delivery.message_id)
        return found

    async def running(self, execution_id: str, *, idle_ms: int, flow_id: str = "waiting") -> None:
        """A running execution last checkpointed ``idle_ms`` ago, with no lease and no carrier."""
        flow = Flow.from_document(WAITING)
        state = ExecutionState.new(
            execution_id=execution_id,
            flow_id=flow_id,
            flow_version="1",
            fingerprint=flow.fingerprint,
            start_node_id="prepare",
            input={},
            now_ms=self.clock.now_ms() - idle_ms,
        )
        state = attrs.evolve(state, subgraph_fingerprint=flow.subgraph_fingerprint("prepare"))
        lease = await self.leases.acquire(execution_id, "gone-worker", ttl_ms=LEASE_TTL_MS)
        assert lease is not None
        await self.executions.save(state, fence=lease.generation)
        await self.leases.release(lease)


@pytest.fixture
async def ops(clock: FakeClock, ids: SequentialIds) -> Ops:
    leases = MemoryLeaseManager(clock)
    flows = MemoryFlowRepository()
    await flows.put_if_absent(Flow.from_document(WAITING), owner=SHARED)
    return Ops(
        clock,
        ids,
        leases,
        MemoryExecutionRepository(leases),
        MemoryTaskQueue(clock),
        MemorySubscriptionStore(),
        flows,
        MemoryReplayMarkerStore(clock),
        MemoryCounterStore(clock),
    )


def without_field(envelope: TaskEnvelope, name: str) -> dict[str, str]:
    fields = encode_envelope(envelope)
    document = json.loads(fields["envelope"])
    del document[name]
    return {**fields, "envelope": json.dumps(document)}


# --- replay (W10): one test per outcome ----------------------------------------------


async def test_replay_enqueues_the_entrys_own_carrier_and_keeps_the_entry(ops: Ops) -> None:
    start = ops.start()
    dlq_id = await ops.dead_letter(encode_envelope(start))
    ops.clock.advance(60)
    result = await ops.replay()(dlq_id)
    assert (result.outcome, result.execution_id) == (ReplayOutcome.REPLAYED, "x-1")
    [carrier] = await ops.carriers()
    # W14: the copy keeps its source's age, or replay would launder it past the age gate.
    assert carrier == start
    [letter] = await ops.queue.dead_letters()
    assert letter.dlq_id == dlq_id, "the DLQ entry is kept as evidence"


async def test_a_second_replay_is_already_replayed_and_enqueues_nothing(ops: Ops) -> None:
    dlq_id = await ops.dead_letter(encode_envelope(ops.start()))
    await ops.replay()(dlq_id)
    again = await ops.replay()(dlq_id)
    assert again.outcome is ReplayOutcome.ALREADY_REPLAYED
    assert len(await ops.carriers()) == 1


async def test_a_replay_that_lost_the_marker_race_is_already_replayed(ops: Ops) -> None:
    dlq_id = await ops.dead_letter(encode_envelope(ops.start()))
    assert await ops.markers.claim(DLQ_KEY, dlq_id, "the other replay", ttl_ms=60_000)
    result = await ops.replay()(dlq_id)
    assert result.outcome is ReplayOutcome.ALREADY_REPLAYED
    assert await ops.carriers() == []
    assert await ops.markers.get(DLQ_KEY, dlq_id) == "the other replay"


async def test_a_too_new_schema_is_refused_before_any_enqueue(ops: Ops) -> None:
    fields = {**encode_envelope(ops.start()), "schema_version": "99", "envelope": "{future"}
    dlq_id = await ops.dead_letter(fields)
    result = await ops.replay()(dlq_id)
    assert result.outcome is ReplayOutcome.SCHEMA_TOO_NEW
    assert await ops.carriers() == []
    assert await ops.markers.get(DLQ_KEY, dlq_id) is None, "a refusal keeps the one replay"


async def test_a_start_without_an_id_runs_under_the_minted_uuid5_with_a_dedup_key(
    ops: Ops,
) -> None:
    dlq_id = await ops.dead_letter(without_field(ops.start(), "execution_id"))
    result = await ops.replay()(dlq_id)
    minted = replay_execution_id(DLQ_KEY, dlq_id)
    assert (result.outcome, result.execution_id) == (ReplayOutcome.REPLAYED, minted)
    [carrier] = await ops.carriers()
    assert (carrier.kind, carrier.execution_id) == (CarrierKind.START, minted)
    assert carrier.dedup_key == f"dlq-replay:{DLQ_KEY}:{dlq_id}"


async def test_a_replay_into_a_deleted_execution_is_execution_deleted(ops: Ops) -> None:
    await ops.process()(ops.start())
    dlq_id = await ops.dead_letter(encode_envelope(ops.start()))
    await ops.delete()("x-1")
    result = await ops.replay()(dlq_id)
    assert (result.outcome, result.execution_id) == (ReplayOutcome.EXECUTION_DELETED, "x-1")
    assert await ops.carriers() == []


async def test_a_replay_for_another_tenant_is_tenant_mismatch(ops: Ops) -> None:
    dlq_id = await ops.dead_letter(encode_envelope(ops.start(tenant_id="acme")))
    result = await ops.replay()(dlq_id, tenant_id="globex")
    assert result.outcome is ReplayOutcome.TENANT_MISMATCH
    assert "acme" in result.detail
    assert await ops.carriers() == []
    assert (await ops.replay()(dlq_id, tenant_id="acme")).outcome is ReplayOutcome.REPLAYED


async def test_an_entry_naming_no_tenant_needs_one_given_explicitly(ops: Ops) -> None:
    """W24: a write never defaults its tenant."""
    dlq_id = await ops.dead_letter(without_field(ops.start(), "tenant_id"))
    refused = await ops.replay()(dlq_id)
    assert refused.outcome is ReplayOutcome.TENANT_MISMATCH
    replayed = await ops.replay()(dlq_id, tenant_id="acme")
    assert replayed.outcome is ReplayOutcome.REPLAYED
    [carrier] = await ops.carriers()
    assert carrier.tenant_id == "acme"


async def test_a_failed_enqueue_releases_the_marker_for_the_next_try(ops: Ops) -> None:
    class BrokenQueue:
        async def dead_letters(self, *, count: int = 100) -> Any:
            return await ops.queue.dead_letters(count=count)

        async def enqueue(self, envelope: TaskEnvelope) -> str:
            raise ConnectionError("stream unavailable")

    dlq_id = await ops.dead_letter(encode_envelope(ops.start()))
    with pytest.raises(ConnectionError):
        await ops.replay(BrokenQueue())(dlq_id)
    assert await ops.markers.get(DLQ_KEY, dlq_id) is None
    assert (await ops.replay()(dlq_id)).outcome is ReplayOutcome.REPLAYED


async def test_an_entry_without_a_carrier_is_refused_by_name_and_keeps_its_replay(
    ops: Ops,
) -> None:
    dlq_id = await ops.dead_letter({"garbage": "1"}, reason="malformed task envelope")
    with pytest.raises(UnreadableDeadLetterError, match="holds no task envelope"):
        await ops.replay()(dlq_id)
    assert await ops.markers.get(DLQ_KEY, dlq_id) is None


async def test_an_unknown_dlq_id_is_refused_by_name(ops: Ops) -> None:
    with pytest.raises(UnknownDeadLetterError, match="plaita dlq list"):
        await ops.replay()("1-0")


async def test_every_replay_attempt_leaves_one_audit_line(
    ops: Ops, caplog: pytest.LogCaptureFixture
) -> None:
    dlq_id = await ops.dead_letter(encode_envelope(ops.start()))
    with caplog.at_level(logging.INFO, logger="plaita.audit"):
        await ops.replay()(dlq_id)
        await ops.replay()(dlq_id)
    lines = [r.getMessage() for r in caplog.records if r.name == "plaita.audit"]
    assert [line.split()[1] for line in lines] == [
        "outcome=replayed",
        "outcome=already_replayed",
    ]
    assert all("event=dlq.replay" in line and f"dlq_id={dlq_id}" in line for line in lines)
    assert all("execution_id=x-1" in line for line in lines)


async def test_list_and_show_read_the_carrier_and_the_replay_marker(ops: Ops) -> None:
    first = await ops.dead_letter(encode_envelope(ops.start("x-1")), reason="unknown_flow")
    second = await ops.dead_letter(encode_envelope(ops.start("x-2")))
    await ops.replay()(first)
    views = await ListDeadLetters(queue=ops.queue, markers=ops.markers, dlq_key=DLQ_KEY)()
    assert [v.dlq_id for v in views] == [second, first]
    shown = await ShowDeadLetter(queue=ops.queue, markers=ops.markers, dlq_key=DLQ_KEY)(first)
    assert (shown.kind, shown.execution_id, shown.flow_id) == ("start", "x-1", "waiting")
    assert shown.reason == "unknown_flow"
    assert shown.replayed is not None and shown.replayed["execution_id"] == "x-1"
    assert views[0].replayed is None


# --- delete (W13) ----------------------------------------------------------------------


async def test_delete_removes_state_and_subscription_and_leaves_a_tombstone(ops: Ops) -> None:
    await ops.process()(ops.start())
    state = await ops.executions.load("x-1")
    assert state is not None and state.suspension is not None
    subscription_id = state.suspension.subscription_id
    deleted = await ops.delete()("x-1", reason="customer asked")
    assert deleted.tombstone == Tombstone("default", ops.clock.now_ms(), "customer asked")
    assert deleted.deleted_now and deleted.removed_subscription == subscription_id
    assert deleted.tombstone_ttl_seconds == DEFAULT_TOMBSTONE_TTL_SECONDS
    assert await ops.executions.load("x-1") is None
    assert await ops.executions.tombstone("x-1") == deleted.tombstone
    assert await ops.subscriptions.get(subscription_id or "") is None


async def test_a_second_delete_keeps_the_first_deleted_at(ops: Ops) -> None:
    await ops.process()(ops.start())
    first = await ops.delete()("x-1", reason="first")
    ops.clock.advance(3600)
    second = await ops.delete()("x-1", reason="second")
    assert second.tombstone == first.tombstone
    assert not second.deleted_now


async def test_delete_revokes_a_live_holder_whose_later_writes_are_fenced_off(ops: Ops) -> None:
    await ops.running("x-1", idle_ms=0)
    holder = await ops.leases.acquire("x-1", "worker-a", ttl_ms=LEASE_TTL_MS)
    assert holder is not None
    state = await ops.executions.load("x-1")
    assert state is not None
    deleted = await ops.delete()("x-1")
    assert deleted.revoked_holder == "worker-a"
    with pytest.raises(ExecutionLeaseError):
        await ops.executions.save(state, fence=holder.generation)
    assert await ops.executions.load("x-1") is None


async def test_deleting_an_unknown_execution_is_refused_by_name(ops: Ops) -> None:
    with pytest.raises(UnknownExecutionError, match="'nope'"):
        await ops.delete()("nope")


async def test_deleting_a_deleted_execution_reports_its_tombstone(ops: Ops) -> None:
    await ops.running("x-1", idle_ms=0)
    first = await ops.delete()("x-1")
    again = await ops.delete()("x-1")
    assert (again.tombstone, again.deleted_now) == (first.tombstone, False)


async def test_delete_blocks_carriers_that_arrive_later(ops: Ops) -> None:
    """W13: a redelivered start or a late resume never brings a deleted execution back."""
    process = ops.process()
    await process(ops.start())
    await ops.delete()("x-1")
    assert await ops.executions.tombstone("x-1") is not None
    late_start = await process(ops.start())
    late_event = await process(
        TaskEnvelope.resume(
            execution_id="x-1",
            flow_id="waiting",
            resume_type=ResumeType.EVENT,
            now_ms=ops.clock.now_ms(),
            generations=LEGACY_GENERATIONS,
        )
    )
    for result in (late_start, late_event):
        assert (result.disposition, result.outcome) == (Disposition.ACK, "execution_deleted")
    assert await ops.executions.load("x-1") is None


# --- reap (W19) ------------------------------------------------------------------------


async def test_reap_requeues_only_running_executions_that_lost_their_carrier(ops: Ops) -> None:
    stale = 3 * LEASE_TTL_MS + 1
    await ops.running("orphan", idle_ms=stale)
    await ops.running("recent", idle_ms=1000)
    await ops.running("held", idle_ms=stale)
    lease = await ops.leases.acquire("held", "worker-b", ttl_ms=LEASE_TTL_MS)
    assert lease is not None
    # worker-b's dispatch is live: it recorded its attempt under the lease (W2).
    await ops.counters.begin_attempt("held", lease.generation, ttl_ms=LEASE_TTL_MS)
    await ops.process()(ops.start("suspended"))
    report = await ops.reaper()()
    actions = {item.execution_id: item.action for item in report.items}
    assert actions == {
        "orphan": ReapAction.REQUEUE,
        "recent": ReapAction.SKIP_RECENT,
        "held": ReapAction.SKIP_LEASE_HELD,
    }
    [carrier] = await ops.carriers()
    assert (carrier.execution_id, carrier.resume_type) == ("orphan", ResumeType.CONTINUE)


async def test_reap_revokes_a_lease_no_dispatch_holds_and_the_execution_moves_again(
    ops: Ops,
) -> None:
    """A watchdog that outlived its dispatch renews a suspended execution's lease for ever;
    its timer carrier meets the "live" lease at every redelivery. The reaper sees the lease
    has no open attempt (twice, a moment apart), revokes it, and the timer runs."""
    await ops.process()(ops.start("asleep"))
    leaked = await ops.leases.acquire("asleep", "worker-b", ttl_ms=LEASE_TTL_MS)
    assert leaked is not None
    await ops.running("stuck", idle_ms=1000)
    stuck = await ops.leases.acquire("stuck", "worker-b", ttl_ms=LEASE_TTL_MS)
    assert stuck is not None

    report = await ops.reaper()()

    actions = {item.execution_id: item.action for item in report.items}
    assert actions == {"asleep": ReapAction.REVOKE_LEASE, "stuck": ReapAction.REVOKE_LEASE}
    assert await ops.leases.holder("asleep") is None
    assert await ops.leases.holder("stuck") is None
    # The running one gets a carrier; the suspended one keeps waiting for its own.
    [carrier] = await ops.carriers()
    assert (carrier.execution_id, carrier.resume_type) == ("stuck", ResumeType.CONTINUE)


async def test_reap_leaves_a_lease_whose_dispatch_begins_while_it_looks(ops: Ops) -> None:
    """The acquire-then-record window: a dispatch seen without its attempt at the first look
    has recorded it by the second; its lease is left alone."""
    await ops.running("starting", idle_ms=1000)
    lease = await ops.leases.acquire("starting", "worker-b", ttl_ms=LEASE_TTL_MS)
    assert lease is not None

    async def the_dispatch_records_its_attempt(seconds: float) -> None:
        await ops.counters.begin_attempt("starting", lease.generation, ttl_ms=LEASE_TTL_MS)

    report = await ops.reaper(sleep=the_dispatch_records_its_attempt)()

    [item] = report.items
    assert item.action is ReapAction.SKIP_LEASE_HELD
    assert await ops.leases.holder("starting") == lease


async def test_reap_dry_run_only_names_a_leaked_lease(ops: Ops) -> None:
    await ops.running("stuck", idle_ms=1000)
    lease = await ops.leases.acquire("stuck", "worker-b", ttl_ms=LEASE_TTL_MS)

    report = await ops.reaper()(dry_run=True)

    assert [item.action for item in report.orphans] == [ReapAction.REVOKE_LEASE]
    assert await ops.leases.holder("stuck") == lease
    assert await ops.carriers() == []


async def test_a_requeued_orphan_is_advanced_by_the_worker(ops: Ops) -> None:
    await ops.running("orphan", idle_ms=3 * LEASE_TTL_MS + 1)
    await ops.reaper()()
    [carrier] = await ops.carriers()
    result = await ops.process()(carrier)
    assert result.outcome == "suspended"


async def test_reap_skips_an_execution_whose_node_heartbeat_is_fresh(ops: Ops) -> None:
    """W19: alive = an open node whose last update is within three heartbeats (one lease TTL
    at a renewal every third of it), even with an old checkpoint and no lease right now."""
    stale = 3 * LEASE_TTL_MS + 1
    for execution_id, heartbeat_age_ms in (("alive", LEASE_TTL_MS - 1), ("silent", LEASE_TTL_MS)):
        await ops.running(execution_id, idle_ms=stale)
        lease = await ops.leases.acquire(execution_id, "gone-worker", ttl_ms=LEASE_TTL_MS)
        assert lease is not None
        await ops.executions.heartbeat(
            execution_id,
            fence=lease.generation,
            node_id="prepare",
            now_ms=ops.clock.now_ms() - heartbeat_age_ms,
        )
        await ops.leases.release(lease)
    report = await ops.reaper()()
    actions = {item.execution_id: item.action for item in report.items}
    assert actions == {"alive": ReapAction.SKIP_NODE_ALIVE, "silent": ReapAction.REQUEUE}
    [carrier] = await ops.carriers()
    assert carrier.execution_id == "silent"


async def test_reap_dry_run_changes_nothing(ops: Ops) -> None:
    await ops.running("orphan", idle_ms=3 * LEASE_TTL_MS + 1)
    report = await ops.reaper()(dry_run=True)
    assert [item.execution_id for item in report.orphans] == ["orphan"]
    assert report.dry_run and await ops.carriers() == []


async def test_reap_ends_an_orphan_whose_flow_is_gone_under_the_lease(ops: Ops) -> None:
    await ops.running("lost", idle_ms=3 * LEASE_TTL_MS + 1, flow_id="unregistered")
    report = await ops.reaper()()
    assert [item.action for item in report.items] == [ReapAction.TERMINALISE]
    state = await ops.executions.load("lost")
    assert state is not None and state.status is ExecutionStatus.ERROR
    assert state.error is not None and "not registered" in state.error.message
    assert await ops.carriers() == []
    assert await ops.leases.holder("lost") is None


async def test_reap_ends_an_orphan_even_when_giving_its_lease_back_fails(
    ops: Ops, caplog: pytest.LogCaptureFixture
) -> None:
    """W19: the terminal write is done; a failed release is logged, the lease lapses within
    its TTL, and the rest of the pass goes on."""
    await ops.running("lost", idle_ms=3 * LEASE_TTL_MS + 1, flow_id="unregistered")
    await ops.running("orphan", idle_ms=3 * LEASE_TTL_MS + 1)

    async def release_fails(lease: Any) -> bool:
        raise ConnectionError("Connection closed by server")

    ops.leases.release = release_fails  # type: ignore[method-assign]

    with caplog.at_level(logging.WARNING):
        report = await ops.reaper()()

    actions = {item.execution_id: item.action for item in report.items}
    assert actions == {"lost": ReapAction.TERMINALISE, "orphan": ReapAction.REQUEUE}
    state = await ops.executions.load("lost")
    assert state is not None and state.status is ExecutionStatus.ERROR
    assert "event=lease.borrow_release_failed execution_id=lost holder=reaper" in caplog.text
    ops.clock.advance(LEASE_TTL_MS / 1000)
    assert await ops.leases.holder("lost") is None


async def test_delete_releases_the_starts_dedup_key(ops: Ops) -> None:
    """W6 + W13: once deleted, the dedup key may start a new execution."""
    dedup = MemoryDedupStore(ops.clock)
    assert await dedup.claim("order-7", "x-1", tenant_id="default", ttl_ms=60_000) is None
    await ops.process()(attrs.evolve(ops.start(), dedup_key="order-7"))
    state = await ops.executions.load("x-1")
    assert state is not None and state.dedup_key == "order-7"

    deleted = await ops.delete_with(dedup)("x-1")

    assert deleted.released_dedup_key == "order-7"
    assert deleted.to_json()["released_dedup_key"] == "order-7"
    assert await dedup.claim("order-7", "x-2", tenant_id="default", ttl_ms=60_000) is None


async def test_delete_leaves_a_dedup_key_that_moved_on_alone(ops: Ops) -> None:
    dedup = MemoryDedupStore(ops.clock)
    await ops.process()(attrs.evolve(ops.start(), dedup_key="order-7"))
    # The claim expired and another start took the key meanwhile.
    assert await dedup.claim("order-7", "x-9", tenant_id="default", ttl_ms=60_000) is None

    deleted = await ops.delete_with(dedup)("x-1")

    assert deleted.released_dedup_key is None
    holder = await dedup.claim("order-7", "x-2", tenant_id="default", ttl_ms=60_000)
    assert holder is not None and holder.execution_id == "x-9"
