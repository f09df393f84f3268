"""The one place that wires plaita together (dependency-injector).

``backend`` selects the adapter family; only the selected branch is ever built, so the memory
backend never opens a Redis connection. Tests override providers here instead of patching.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis
from dependency_injector import containers, providers
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from plaita.adapters.memory.controls import MemoryExecutionControls
from plaita.adapters.memory.counters import MemoryCounterStore
from plaita.adapters.memory.dedup import MemoryDedupStore
from plaita.adapters.memory.delay_queue import MemoryDelayQueue
from plaita.adapters.memory.events import MemoryEventLog
from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.adapters.memory.inbox import MemoryInbox
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.reconciler_cursor import MemoryReconcilerCursor
from plaita.adapters.memory.registry import MemoryWorkerRegistry
from plaita.adapters.memory.replay_markers import MemoryReplayMarkerStore
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.memory.subscriptions import MemorySubscriptionStore
from plaita.adapters.prometheus.console import PrometheusConsoleMetrics
from plaita.adapters.prometheus.exporter import PrometheusExporter
from plaita.adapters.prometheus.worker import PrometheusWorkerMetrics
from plaita.adapters.redis.controls import RedisExecutionControls
from plaita.adapters.redis.counters import RedisCounterStore
from plaita.adapters.redis.dedup import RedisDedupStore
from plaita.adapters.redis.delay_queue import RedisDelayQueue
from plaita.adapters.redis.events import RedisEventLog
from plaita.adapters.redis.flows import RedisFlowRepository
from plaita.adapters.redis.inbox import RedisInbox
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.adapters.redis.reconciler_cursor import RedisReconcilerCursor
from plaita.adapters.redis.registry import RedisWorkerRegistry
from plaita.adapters.redis.replay_markers import RedisReplayMarkerStore
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.adapters.redis.subscriptions import RedisSubscriptionStore
from plaita.adapters.system import SystemClock, UuidGenerator
from plaita.adapters.webhook.alerts import WebhookAlertSink
from plaita.application.handlers import HandlerRegistry
from plaita.application.null_objects import NoMetrics, NoMetricsExporter
from plaita.application.use_cases.dead_letter_guard import GuardDeadLetter
from plaita.application.use_cases.dedup_claims import DedupClaims
from plaita.application.use_cases.delete_execution import DeleteExecution
from plaita.application.use_cases.dlq import ListDeadLetters, ReplayDeadLetter, ShowDeadLetter
from plaita.application.use_cases.events import FilterEvent, PublishEvent
from plaita.application.use_cases.executions import GetExecution, ResumeExecution
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.index_janitor import IndexJanitorService
from plaita.application.use_cases.operator_controls import (
    BulkAction,
    CancelExecution,
    ContinueExecution,
    ListExecutions,
    PauseExecution,
    RetryExecution,
    UnpauseExecution,
)
from plaita.application.use_cases.reap import ReapZombies
from plaita.application.use_cases.reconcile_events import ReconcileEvents
from plaita.application.use_cases.recover import RecoverAfterRestart
from plaita.application.use_cases.start_execution import StartExecution
from plaita.application.use_cases.step import ProcessTask, StepSettings
from plaita.domain.config_generations import RuntimeConfig, generations_of
from plaita.domain.janitor import plan_janitor
from plaita.entrypoints.disk_guard import DiskGuard
from plaita.entrypoints.outages import store_outages
from plaita.entrypoints.settings import Settings
from plaita.entrypoints.worker import Worker
from plaita.entrypoints.worker_registry import Presence


def _redis_client(url: str, concurrency: int) -> redis.Redis:
    # A pool that waits for a free connection instead of failing: every in-flight dispatch
    # holds at most one at a time, plus the loop's reads, timers, heartbeats and metrics.
    pool = redis.BlockingConnectionPool.from_url(
        url,
        decode_responses=True,
        health_check_interval=30,
        max_connections=concurrency + 16,
        timeout=30,
        # After Redis restarts, every pooled connection is dead: without one immediate retry
        # on a fresh connection, the first command on each fails after the store is back
        # (a dispatch crashes and waits for reclaim, a loop reports a second outage).
        retry=Retry(NoBackoff(), 1),
    )
    return redis.Redis(connection_pool=pool)


def _sql_engine(database_url: str, concurrency: int) -> Any:
    from plaita.adapters.sqlalchemy.engine import create_engine

    # Every step's transaction holds a pooled connection: size the pool from the concurrency.
    return create_engine(database_url, pool_size=5, max_overflow=max(10, concurrency))


def _sql_executions(
    engine: Any, clock: SystemClock, counters: Any, controls: Any, retention_ms: int
) -> Any:
    from plaita.adapters.sqlalchemy.storage import SqlExecutionRepository

    # The database keeps no budget counters and no operator flags: a delete forgets the
    # memory twin's counters and the backend's flags, and a terminal checkpoint lets the
    # flags expire with the retention (S5).
    return SqlExecutionRepository(
        engine, clock=clock, counters=counters, controls=controls, retention_ms=retention_ms
    )


def _sql_leases(engine: Any, clock: SystemClock) -> Any:
    from plaita.adapters.sqlalchemy.lease import SqlLeaseManager

    return SqlLeaseManager(engine, clock)


def _sql_flows(engine: Any) -> Any:
    from plaita.adapters.sqlalchemy.flows import SqlFlowRepository

    return SqlFlowRepository(engine)


def _dlq_key(configured: str | None, keys: RedisKeys, queue_name: str) -> str:
    return configured or keys.queue_dead_letters(queue_name)


def _runtime_config(
    *,
    namespace: str,
    queue_name: str,
    consumer_group: str,
    dlq_key: str,
    dlq_max_len: int,
    max_deliveries: int,
    lease_ttl_ms: int,
    max_carrier_age_ms: int,
    retention_ms: int,
    claim_min_idle_ms: int,
    execution_deadline_ms: int,
    default_retries: int,
    disable_holder_liveness: bool,
    registry_enabled: bool,
    handler_modules: Sequence[str],
) -> RuntimeConfig:
    """What this process's generations are computed from (W12); no names, ports or secrets.

    ``other`` holds the rules a worker applies beyond family and budget. Per-process tunings
    that change no rule — concurrency, read block, metrics port, disk guard, drain timeout,
    log level — are left out, so the console, the CLI and the event filter of a pool compute
    the workers' config_generation from the same environment.
    """
    other: dict[str, Any] = {
        "retention_ms": retention_ms,
        "claim_min_idle_ms": claim_min_idle_ms,
        "execution_deadline_ms": execution_deadline_ms,
        "default_retries": default_retries,
        "disable_holder_liveness": disable_holder_liveness,
        "registry_enabled": registry_enabled,
        "handler_modules": sorted(handler_modules),
    }
    return RuntimeConfig(
        namespace=namespace,
        queue_name=queue_name,
        consumer_group=consumer_group,
        dlq_key=dlq_key,
        max_deliveries=max_deliveries,
        lease_ttl_ms=lease_ttl_ms,
        max_carrier_age_ms=max_carrier_age_ms,
        dlq_max_len=dlq_max_len,
        other=other,
    )


def _registry_switch(enabled: bool) -> str:
    return "on" if enabled else "off"


def _metrics_switch(port: int) -> str:
    return "on" if port else "off"


def _alert_sink(url: str | None, queue_size: int) -> WebhookAlertSink | None:
    return WebhookAlertSink(url, max_queue=queue_size) if url else None


class Container(containers.DeclarativeContainer):
    config = providers.Configuration(strict=True)

    clock = providers.Singleton(SystemClock)
    ids = providers.Singleton(UuidGenerator)
    #: One store's outages for every background loop of this process: one WARNING when it
    #: begins, one INFO when it ends.
    outages = providers.Singleton(store_outages, config.backend)

    redis_client = providers.Singleton(_redis_client, config.redis_url, config.concurrency)
    redis_keys = providers.Singleton(RedisKeys, config.namespace)
    memory_leases = providers.Singleton(MemoryLeaseManager, clock)
    memory_counters = providers.Singleton(MemoryCounterStore, clock)
    #: Operator flags and parked carriers, beside the checkpoint (ADR 0008).
    controls = providers.Selector(
        config.backend,
        memory=providers.Singleton(MemoryExecutionControls, clock),
        redis=providers.Singleton(RedisExecutionControls, redis_client, redis_keys),
    )

    #: S4: with ``storage=sql`` state, leases and flows live in the database; the engine is
    #: built only then (the SQL adapters are imported lazily, like the Redis client).
    sql_engine = providers.Singleton(_sql_engine, config.database_url, config.concurrency)
    leases = providers.Selector(
        config.storage,
        auto=providers.Selector(
            config.backend,
            memory=memory_leases,
            redis=providers.Singleton(RedisLeaseManager, redis_client, redis_keys),
        ),
        sql=providers.Singleton(_sql_leases, sql_engine, clock),
    )
    executions = providers.Selector(
        config.storage,
        auto=providers.Selector(
            config.backend,
            memory=providers.Singleton(
                MemoryExecutionRepository,
                memory_leases,
                memory_counters,
                controls=controls,
                retention_ms=config.retention_ms,
            ),
            redis=providers.Singleton(
                RedisExecutionRepository,
                redis_client,
                redis_keys,
                retention_ms=config.retention_ms,
            ),
        ),
        sql=providers.Singleton(
            _sql_executions,
            sql_engine,
            clock,
            # Redis counters expire on their own; the memory twin's are forgotten on delete.
            providers.Selector(
                config.backend, memory=memory_counters, redis=providers.Object(None)
            ),
            controls,
            config.retention_ms,
        ),
    )
    queue = providers.Selector(
        config.backend,
        memory=providers.Singleton(MemoryTaskQueue, clock, dead_letter_max_len=config.dlq_max_len),
        redis=providers.Singleton(
            RedisTaskQueue,
            redis_client,
            redis_keys,
            queue_name=config.queue_name,
            group=config.consumer_group,
            dead_letter_key=config.dlq_key,
            dead_letter_max_len=config.dlq_max_len,
        ),
    )
    flow_repository = providers.Selector(
        config.storage,
        auto=providers.Selector(
            config.backend,
            memory=providers.Singleton(MemoryFlowRepository),
            redis=providers.Singleton(RedisFlowRepository, redis_client, redis_keys),
        ),
        sql=providers.Singleton(_sql_flows, sql_engine),
    )
    subscriptions = providers.Selector(
        config.backend,
        memory=providers.Singleton(MemorySubscriptionStore),
        redis=providers.Singleton(RedisSubscriptionStore, redis_client, redis_keys),
    )
    events = providers.Selector(
        config.backend,
        memory=providers.Singleton(MemoryEventLog, clock),
        redis=providers.Singleton(RedisEventLog, redis_client, redis_keys),
    )
    dedup = providers.Selector(
        config.backend,
        memory=providers.Singleton(MemoryDedupStore, clock),
        redis=providers.Singleton(RedisDedupStore, redis_client, redis_keys),
    )
    inbox = providers.Selector(
        config.backend,
        memory=providers.Singleton(MemoryInbox, clock),
        redis=providers.Singleton(RedisInbox, redis_client, redis_keys),
    )

    #: Lifecycle listeners for each dispatch; entrypoints override it (logs, demo timeline).
    listeners = providers.Object(list)

    counters = providers.Selector(
        config.backend,
        memory=memory_counters,
        redis=providers.Singleton(RedisCounterStore, redis_client, redis_keys),
    )
    delay_queue = providers.Selector(
        config.backend,
        memory=providers.Singleton(MemoryDelayQueue, clock, queue),
        redis=providers.Singleton(
            RedisDelayQueue, redis_client, redis_keys, queue_name=config.queue_name
        ),
    )
    registry = providers.Selector(
        config.backend,
        memory=providers.Singleton(MemoryWorkerRegistry, clock),
        redis=providers.Singleton(RedisWorkerRegistry, redis_client, redis_keys),
    )

    #: None with ``--no-registry``: no record, and a lease conflict never acks (W5, W16).
    dlq_key = providers.Callable(_dlq_key, config.dlq_key, redis_keys, config.queue_name)
    runtime_config = providers.Singleton(
        _runtime_config,
        namespace=config.namespace,
        queue_name=config.queue_name,
        consumer_group=config.consumer_group,
        dlq_key=dlq_key,
        dlq_max_len=config.dlq_max_len,
        max_deliveries=config.max_deliveries,
        lease_ttl_ms=config.lease_ttl_ms,
        max_carrier_age_ms=config.max_carrier_age_ms,
        retention_ms=config.retention_ms,
        claim_min_idle_ms=config.claim_min_idle_ms,
        execution_deadline_ms=config.execution_deadline_ms,
        default_retries=config.default_retries,
        disable_holder_liveness=config.disable_holder_liveness,
        registry_enabled=config.registry_enabled,
        handler_modules=config.handler_modules,
    )
    #: This worker's config family and generations (W12): logged, registered, and compared
    #: with every carrier's.
    generations = providers.Singleton(generations_of, runtime_config)

    handlers = providers.Singleton(HandlerRegistry, config.handler_modules)
    #: W20: the flow cache of every process that serves executions (worker, console, dev).
    flows = providers.Singleton(
        FlowCatalog,
        flow_repository,
        handlers,
        clock=clock,
        cache_size=config.flow_cache_size,
        cache_ttl_ms=config.flow_cache_ttl_ms,
    )

    step_settings = providers.Singleton(
        StepSettings,
        holder_id=config.consumer_name,
        lease_ttl_ms=config.lease_ttl_ms,
        default_deadline_ms=config.execution_deadline_ms,
        default_retries=config.default_retries,
        max_deliveries=config.max_deliveries,
        max_carrier_age_ms=config.max_carrier_age_ms,
        holder_liveness_disabled=config.disable_holder_liveness,
        registry_enabled=config.registry_enabled,
        generations=generations,
    )
    process_task = providers.Singleton(
        ProcessTask,
        executions=executions,
        leases=leases,
        flows=flows,
        queue=queue,
        subscriptions=subscriptions,
        handlers=handlers,
        clock=clock,
        ids=ids,
        settings=step_settings,
        counters=counters,
        delay=delay_queue,
        registry=registry,
        dedup=dedup,
        inbox=inbox,
        controls=controls,
        listeners=listeners,
    )
    dead_letter_guard = providers.Factory(
        GuardDeadLetter,
        executions=executions,
        leases=leases,
        queue=queue,
        clock=clock,
        holder_id=config.consumer_name,
        lease_ttl_ms=config.lease_ttl_ms,
        counters=counters,
        max_deliveries=config.max_deliveries,
    )
    dedup_claims = providers.Factory(DedupClaims, dedup=dedup, executions=executions)
    # Every use case that writes new carriers stamps them with ``generations`` (W12).
    start_execution = providers.Factory(
        StartExecution,
        flows=flows,
        queue=queue,
        claims=dedup_claims,
        clock=clock,
        ids=ids,
        generations=generations,
    )
    resume_execution = providers.Factory(
        ResumeExecution, executions=executions, queue=queue, clock=clock, generations=generations
    )
    get_execution = providers.Factory(GetExecution, executions)
    #: `plaita dev --db`: carriers, timers and subscriptions back after a restart (S4).
    recover_after_restart = providers.Factory(
        RecoverAfterRestart,
        executions=executions,
        queue=queue,
        delay=delay_queue,
        subscriptions=subscriptions,
        flows=flows,
        clock=clock,
        generations=generations,
    )
    publish_event = providers.Factory(
        PublishEvent, events=events, clock=clock, ids=ids, inbox=inbox
    )
    filter_event = providers.Factory(
        FilterEvent,
        events=events,
        subscriptions=subscriptions,
        executions=executions,
        queue=queue,
        clock=clock,
        generations=generations,
    )
    reconciler_cursor = providers.Selector(
        config.backend,
        memory=providers.Singleton(MemoryReconcilerCursor),
        redis=providers.Singleton(RedisReconcilerCursor, redis_client, redis_keys),
    )
    #: One round per call (V5); the event-filter command passes ``settings`` (its flags).
    reconcile_events = providers.Factory(
        ReconcileEvents,
        events=events,
        subscriptions=subscriptions,
        executions=executions,
        queue=queue,
        cursor=reconciler_cursor,
        clock=clock,
        generations=generations,
    )

    #: The index janitor (V7): prunes dead members of the event and subscription indexes.
    janitor_plan = providers.Singleton(
        plan_janitor,
        enabled=config.janitor_enabled,
        interval_seconds=config.janitor_interval_seconds,
        budget=config.janitor_budget,
    )
    index_janitor = providers.Singleton(
        IndexJanitorService,
        # The executions index too (S1); SQL listings are queries, its rows are swept.
        stores=providers.Selector(
            config.storage,
            auto=providers.Dict(subscriptions=subscriptions, events=events, executions=executions),
            sql=providers.Dict(subscriptions=subscriptions, events=events),
        ),
        plan=janitor_plan,
        clock=clock,
        outages=outages,
    )

    # --- operator use cases: the console (C1) and the CLI ---------------------------------
    replay_markers = providers.Selector(
        config.backend,
        memory=providers.Singleton(MemoryReplayMarkerStore, clock),
        redis=providers.Singleton(RedisReplayMarkerStore, redis_client, redis_keys),
    )
    list_dead_letters = providers.Factory(
        ListDeadLetters, queue=queue, markers=replay_markers, dlq_key=dlq_key
    )
    show_dead_letter = providers.Factory(
        ShowDeadLetter, queue=queue, markers=replay_markers, dlq_key=dlq_key
    )
    replay_dead_letter = providers.Factory(
        ReplayDeadLetter,
        queue=queue,
        markers=replay_markers,
        executions=executions,
        clock=clock,
        ids=ids,
        dlq_key=dlq_key,
    )
    #: An operator delete (W13): revokes whoever holds the lease, as ``operator:<name>``.
    delete_execution = providers.Factory(
        DeleteExecution,
        executions=executions,
        leases=leases,
        subscriptions=subscriptions,
        clock=clock,
        holder_id=providers.Callable("operator:{}".format, config.consumer_name),
        lease_ttl_ms=config.lease_ttl_ms,
        carrier_max_age_ms=config.max_carrier_age_ms,
        retention_ms=config.retention_ms,
        dedup=dedup,
    )

    # --- operator controls (W23) and the execution listing (C1) ---------------------------
    pause_execution = providers.Factory(
        PauseExecution, executions=executions, controls=controls, clock=clock
    )
    unpause_execution = providers.Factory(
        UnpauseExecution,
        executions=executions,
        controls=controls,
        queue=queue,
        delay=delay_queue,
        clock=clock,
        generations=generations,
    )
    cancel_execution = providers.Factory(
        CancelExecution,
        executions=executions,
        controls=controls,
        queue=queue,
        clock=clock,
        generations=generations,
    )
    continue_execution = providers.Factory(
        ContinueExecution,
        executions=executions,
        controls=controls,
        queue=queue,
        clock=clock,
        generations=generations,
    )
    #: Restarts under the lease as ``operator:<name>``, like an operator delete.
    retry_execution = providers.Factory(
        RetryExecution,
        executions=executions,
        controls=controls,
        queue=queue,
        clock=clock,
        generations=generations,
        flows=flows,
        leases=leases,
        counters=counters,
        subscriptions=subscriptions,
        holder_id=providers.Callable("operator:{}".format, config.consumer_name),
        lease_ttl_ms=config.lease_ttl_ms,
    )
    bulk_action = providers.Factory(
        BulkAction,
        executions=executions,
        pause=pause_execution,
        unpause=unpause_execution,
        cancel=cancel_execution,
        resume=continue_execution,
        retry=retry_execution,
    )
    list_executions = providers.Factory(ListExecutions, executions=executions, controls=controls)
    #: The zombie reaper (W19): re-enqueues running executions that lost their carrier.
    reap_zombies = providers.Factory(
        ReapZombies,
        executions=executions,
        leases=leases,
        queue=queue,
        flows=flows,
        counters=counters,
        clock=clock,
        holder_id=providers.Callable("reaper:{}".format, config.consumer_name),
        lease_ttl_ms=config.lease_ttl_ms,
        generations=generations,
        controls=controls,  # a paused execution is skipped (W23)
    )
    #: The console's /metrics (C5): a registry of its own for each console app.
    console_metrics = providers.Factory(PrometheusConsoleMetrics)
    # --- the worker process (W1-W18, C5) ---------------------------------------------------
    #: C5: recorded in a registry of their own; ``--metrics-port 0`` records nothing.
    prometheus_metrics = providers.Singleton(PrometheusWorkerMetrics)
    metrics = providers.Selector(
        providers.Callable(_metrics_switch, config.metrics_port),
        on=prometheus_metrics,
        off=providers.Singleton(NoMetrics),
    )
    #: Served by the worker command, which owns the port.
    metrics_exporter = providers.Selector(
        providers.Callable(_metrics_switch, config.metrics_port),
        on=providers.Singleton(
            PrometheusExporter, prometheus_metrics.provided.registry, port=config.metrics_port
        ),
        off=providers.Singleton(NoMetricsExporter),
    )
    #: This worker's registry record (W16); none with ``--no-registry``.
    presence = providers.Selector(
        providers.Callable(_registry_switch, config.registry_enabled),
        on=providers.Singleton(
            Presence,
            registry,
            instance_id=config.consumer_name,
            clock=clock,
            lease_ttl_ms=config.lease_ttl_ms,
            generations=generations,
            metrics=metrics,
            outages=outages,
        ),
        off=providers.Object(None),
    )
    disk_guard = providers.Singleton(
        DiskGuard,
        min_free_gib=config.min_free_disk_gib,
        path=config.disk_guard_path,
        poll_seconds=config.disk_guard_poll_seconds,
        metrics=metrics,
    )
    #: C5: a webhook for every dead letter; none without ``alert_webhook_url``.
    alerts = providers.Singleton(_alert_sink, config.alert_webhook_url, config.alert_queue_size)
    worker = providers.Singleton(
        Worker,
        queue=queue,
        process=process_task,
        consumer=config.consumer_name,
        delay=delay_queue,
        clock=clock,
        concurrency=config.concurrency,
        read_block_ms=config.read_block_ms,
        claim_min_idle_ms=config.claim_min_idle_ms,
        guard=dead_letter_guard,
        presence=presence,
        metrics=metrics,
        disk_guard=disk_guard,
        drain_timeout_seconds=config.drain_timeout_seconds,
        alerts=alerts,
        outages=outages,
        trim_every_seconds=config.stream_trim_interval_seconds,
    )


def build_container(settings: Settings) -> Container:
    """A container configured from a validated ``Settings``."""
    container = Container()
    container.config.from_pydantic(settings)
    return container
