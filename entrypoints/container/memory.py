"""The memory family: every store as an in-process twin (``backend=memory``; ADR 0001)."""

from __future__ import annotations

from dependency_injector import containers, providers

from plaita.adapters.memory.controls import MemoryExecutionControls
from plaita.adapters.memory.counters import MemoryCounterStore
from plaita.adapters.memory.dedup import MemoryDedupStore
from plaita.adapters.memory.delay_queue import MemoryDelayQueue
from plaita.adapters.memory.end_notices import MemoryEndNotices
from plaita.adapters.memory.event_bus import MemoryEventBus
from plaita.adapters.memory.events import MemoryEventLog
from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.adapters.memory.hooks import MemoryHookStore, MemorySeenSignatures
from plaita.adapters.memory.inbox import MemoryInbox
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.rate_buckets import MemoryRateBuckets
from plaita.adapters.memory.reconciler_cursor import MemoryReconcilerCursor
from plaita.adapters.memory.registry import MemoryWorkerRegistry
from plaita.adapters.memory.replay_markers import MemoryReplayMarkerStore
from plaita.adapters.memory.schedules import MemoryScheduleStore
from plaita.adapters.memory.slot_tables import MemorySlotTables
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.memory.subscriptions import MemorySubscriptionStore
from plaita.adapters.memory.tenants import MemoryTenantDirectory
from plaita.adapters.memory.waiting_notes import MemoryWaitingNotes
from plaita.application.ports import Clock


class MemoryStores(containers.DeclarativeContainer):
    config = providers.Configuration()
    clock: providers.Dependency[Clock] = providers.Dependency()

    leases = providers.Singleton(MemoryLeaseManager, clock)
    counters = providers.Singleton(MemoryCounterStore, clock)
    #: Operator flags and parked carriers, beside the checkpoint (ADR 0008).
    controls = providers.Singleton(MemoryExecutionControls, clock)
    slot_tables = providers.Singleton(MemorySlotTables)
    #: Why an execution waits for room to run (flow control), beside the checkpoint.
    waiting_notes = providers.Singleton(MemoryWaitingNotes, clock)
    executions = providers.Singleton(
        MemoryExecutionRepository,
        leases,
        counters,
        controls=controls,
        retention_ms=config.retention_ms,
    )
    queue = providers.Singleton(MemoryTaskQueue, clock, dead_letter_max_len=config.dlq_max_len)
    flows = providers.Singleton(MemoryFlowRepository)
    #: ``result()`` waiters of this process, woken by its own workers.
    end_notices = providers.Singleton(MemoryEndNotices)
    subscriptions = providers.Singleton(MemorySubscriptionStore)
    events = providers.Singleton(MemoryEventLog, clock)
    dedup = providers.Singleton(MemoryDedupStore, clock)
    inbox = providers.Singleton(MemoryInbox, clock)
    delay_queue = providers.Singleton(MemoryDelayQueue, clock, queue)
    registry = providers.Singleton(MemoryWorkerRegistry, clock)
    reconciler_cursor = providers.Singleton(MemoryReconcilerCursor)
    replay_markers = providers.Singleton(MemoryReplayMarkerStore, clock)
    #: Cron schedules (W22).
    schedules = providers.Singleton(MemoryScheduleStore, clock)
    hooks = providers.Singleton(MemoryHookStore)
    seen_signatures = providers.Singleton(MemorySeenSignatures, clock)
    #: Tenants' status records and parked carriers (W24).
    tenants = providers.Singleton(MemoryTenantDirectory)
    #: Rate limit buckets of task and http nodes (W23), this process's alone.
    rate_buckets = providers.Singleton(MemoryRateBuckets)
    #: ``plaita run``: a flow run in this process reads the events given on its command line
    #: and never waits for more (E6).
    closed_event_bus = providers.Factory(MemoryEventBus, closed=True)
