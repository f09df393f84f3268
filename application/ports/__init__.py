"""Ports: what the application needs from the outside world, one small Protocol a module.

Each module holds one port and the values it speaks in (``task_queue``: ``TaskQueue``,
``Delivery``, ``QueueStats`` …); every method's docstring opens with its contract in one
line. Every port has one contract suite in ``tests/contract/`` that each adapter family
(memory, fakeredis, real Redis, SQL where the port exists there) must pass; the memory twin
raises the same named errors as the real store. A feature that is off gets a null object
(``plaita.application.null_objects``), never a None the caller must test for.

Import from the package: ``from plaita.application.ports import TaskQueue``.
"""

from plaita.application.ports.alerts import AlertSink, DeadLetterAlert
from plaita.application.ports.clock import Clock
from plaita.application.ports.console_metrics import ClusterSnapshot, ConsoleMetrics
from plaita.application.ports.controls import Admission, ExecutionControls, ParkedCarrier
from plaita.application.ports.counter_store import Counters, CounterStore
from plaita.application.ports.dedup_store import DedupClaim, DedupStore
from plaita.application.ports.delay_queue import DelayQueue
from plaita.application.ports.end_notices import EndNotices, EndWatch
from plaita.application.ports.event_log import EventLog, EventNotification
from plaita.application.ports.event_waiter import EventWaiter
from plaita.application.ports.execution_repository import (
    PAGE_SCAN_BUDGET,
    ExecutionPage,
    ExecutionRepository,
    NodeHeartbeat,
)
from plaita.application.ports.flow_repository import FlowRepository
from plaita.application.ports.hook_secrets import HookSecrets
from plaita.application.ports.hook_store import HookStore
from plaita.application.ports.http_client import HttpClient
from plaita.application.ports.ids import IdGenerator
from plaita.application.ports.inbox import Inbox
from plaita.application.ports.index_janitor import IndexJanitor
from plaita.application.ports.lease_manager import LeaseManager
from plaita.application.ports.leased_load import LeasedLoad
from plaita.application.ports.metrics import WorkerMetrics
from plaita.application.ports.metrics_exporter import MetricsExporter
from plaita.application.ports.rate_buckets import RateBuckets
from plaita.application.ports.reconciler_cursor import ReconcilerCursor
from plaita.application.ports.replay_markers import ReplayMarkerStore
from plaita.application.ports.schedule_store import DueClaim, ScheduleStore, StoredSchedule
from plaita.application.ports.seen_signatures import SeenSignatures
from plaita.application.ports.slot_tables import ActiveTable, SlotRead, SlotTables
from plaita.application.ports.span import Span
from plaita.application.ports.subscription_store import SubscriptionStore
from plaita.application.ports.task_queue import (
    DeadLetter,
    Delivery,
    QueueStats,
    RawBase64,
    TaskQueue,
)
from plaita.application.ports.tenant_directory import TenantAdmission, TenantDirectory
from plaita.application.ports.tracer import NodeRun, Tracer
from plaita.application.ports.waiting_notes import WaitingNotes
from plaita.application.ports.worker_registry import WorkerInstance, WorkerRegistry

__all__ = [
    "PAGE_SCAN_BUDGET",
    "ActiveTable",
    "Admission",
    "AlertSink",
    "Clock",
    "ClusterSnapshot",
    "ConsoleMetrics",
    "CounterStore",
    "Counters",
    "DeadLetter",
    "DeadLetterAlert",
    "DedupClaim",
    "DedupStore",
    "DelayQueue",
    "Delivery",
    "DueClaim",
    "EndNotices",
    "EndWatch",
    "EventLog",
    "EventNotification",
    "EventWaiter",
    "ExecutionControls",
    "ExecutionPage",
    "ExecutionRepository",
    "FlowRepository",
    "HookSecrets",
    "HookStore",
    "HttpClient",
    "IdGenerator",
    "Inbox",
    "IndexJanitor",
    "LeaseManager",
    "LeasedLoad",
    "MetricsExporter",
    "NodeHeartbeat",
    "NodeRun",
    "ParkedCarrier",
    "QueueStats",
    "RateBuckets",
    "RawBase64",
    "ReconcilerCursor",
    "ReplayMarkerStore",
    "ScheduleStore",
    "SeenSignatures",
    "SlotRead",
    "SlotTables",
    "Span",
    "StoredSchedule",
    "SubscriptionStore",
    "TaskQueue",
    "TenantAdmission",
    "TenantDirectory",
    "Tracer",
    "WaitingNotes",
    "WorkerInstance",
    "WorkerMetrics",
    "WorkerRegistry",
]
