"""Every port's store, chosen by ``backend`` (memory | redis) and ``storage`` (auto | sql).

Only the selected branch is ever built, so the memory backend never opens a Redis
connection and never loads SQLAlchemy. The families live one to a module beside this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dependency_injector import containers, providers

from plaita.adapters.http.client import HttpxClient
from plaita.adapters.otel.environment import tracer_from_environment
from plaita.adapters.secrets import EnvironmentSecrets
from plaita.adapters.system import SystemClock, UuidGenerator
from plaita.application.end_notices import AnnouncingExecutions
from plaita.application.handlers import HandlerAllowlist, HandlerRegistry
from plaita.application.leased_load import SequentialLeasedLoad
from plaita.application.ports import Clock
from plaita.application.use_cases.children import ChildLinks
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.operator_controls import CancelExecution
from plaita.domain.config_generations import RuntimeConfig, generations_of
from plaita.domain.http_calls import HttpPolicy
from plaita.entrypoints.container import redis as redis_family
from plaita.entrypoints.container import sql as sql_family
from plaita.entrypoints.container.memory import MemoryStores
from plaita.entrypoints.outages import store_outages


def system_clock() -> Clock:
    """This machine's clock, for a process that reads a container it does not hold (a
    command sent to plaita dev)."""
    return SystemClock()


def _runtime_config(
    *,
    namespace: str,
    queue_name: str,
    consumer_group: str,
    dlq_key: str,
    partitions: int,
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
        partitions=partitions,
        other=other,
    )


def _handler_checks(
    handlers: providers.Provider[HandlerRegistry], config: providers.Configuration
) -> dict[str, providers.Provider[Any]]:
    """The handler checks by ``handler_check`` value (``import`` is a keyword, no argument)."""
    return {
        "import": handlers,
        "names": providers.Singleton(HandlerAllowlist, config.handler_modules),
    }


class Stores(containers.DeclarativeContainer):
    config = providers.Configuration(strict=True)

    clock = providers.Singleton(SystemClock)
    ids = providers.Singleton(UuidGenerator)
    #: Traces (C6): the OpenTelemetry SDK's when the OTEL_* variables ask for them and the
    #: extra is installed, the null tracer otherwise (OpenTelemetry is then never imported).
    tracer = providers.Singleton(tracer_from_environment)
    #: One store's outages for every background loop of this process: one WARNING when it
    #: begins, one INFO when it ends.
    outages = providers.Singleton(store_outages, config.backend)

    redis_client = providers.Singleton(
        redis_family.redis_client,
        config.redis_url,
        config.concurrency,
        config.redis_cluster,
        config.partitions,
    )
    redis_keys = providers.Singleton(redis_family.redis_keys, config.namespace)
    sql_engine = providers.Singleton(sql_family.sql_engine, config.database_url, config.concurrency)

    memory_stores = providers.Container(MemoryStores, config=config, clock=clock)
    redis_stores = providers.Container(
        redis_family.RedisStores, config=config, client=redis_client, keys=redis_keys
    )
    controls = providers.Selector(
        config.backend, memory=memory_stores.controls, redis=redis_stores.controls
    )
    counters = providers.Selector(
        config.backend, memory=memory_stores.counters, redis=redis_stores.counters
    )
    #: Slot tables (E1a concurrency keys, tenant quotas): on the queue's side, whatever the
    #: storage.
    slot_tables = providers.Selector(
        config.backend, memory=memory_stores.slot_tables, redis=redis_stores.slot_tables
    )
    waiting_notes = providers.Selector(
        config.backend, memory=memory_stores.waiting_notes, redis=redis_stores.waiting_notes
    )
    sql_stores = providers.Container(
        sql_family.SqlStores,
        config=config,
        clock=clock,
        engine=sql_engine,
        # Redis counters expire on their own; the memory twin's are forgotten on delete.
        counters=providers.Selector(
            config.backend, memory=memory_stores.counters, redis=providers.Object(None)
        ),
        controls=controls,
    )

    leases = providers.Selector(
        config.storage,
        auto=providers.Selector(
            config.backend, memory=memory_stores.leases, redis=redis_stores.leases
        ),
        sql=sql_stores.leases,
    )
    #: The configured store of executions; ``executions`` is what every use case gets.
    execution_store = providers.Selector(
        config.storage,
        auto=providers.Selector(
            config.backend, memory=memory_stores.executions, redis=redis_stores.executions
        ),
        sql=sql_stores.executions,
    )
    #: ``result()`` waiters are woken through the backend, whatever the storage.
    end_notices = providers.Selector(
        config.backend, memory=memory_stores.end_notices, redis=redis_stores.end_notices
    )
    flow_repository = providers.Selector(
        config.storage,
        auto=providers.Selector(
            config.backend, memory=memory_stores.flows, redis=redis_stores.flows
        ),
        sql=sql_stores.flows,
    )
    #: Cron schedules (W22): where the flows are (the backend's, or the database).
    schedules = providers.Selector(
        config.storage,
        auto=providers.Selector(
            config.backend, memory=memory_stores.schedules, redis=redis_stores.schedules
        ),
        sql=sql_stores.schedules,
    )
    queue = providers.Selector(config.backend, memory=memory_stores.queue, redis=redis_stores.queue)
    subscriptions = providers.Selector(
        config.backend, memory=memory_stores.subscriptions, redis=redis_stores.subscriptions
    )
    events = providers.Selector(
        config.backend, memory=memory_stores.events, redis=redis_stores.events
    )
    dedup = providers.Selector(config.backend, memory=memory_stores.dedup, redis=redis_stores.dedup)
    inbox = providers.Selector(config.backend, memory=memory_stores.inbox, redis=redis_stores.inbox)
    delay_queue = providers.Selector(
        config.backend, memory=memory_stores.delay_queue, redis=redis_stores.delay_queue
    )
    registry = providers.Selector(
        config.backend, memory=memory_stores.registry, redis=redis_stores.registry
    )
    reconciler_cursor = providers.Selector(
        config.backend,
        memory=memory_stores.reconciler_cursor,
        redis=redis_stores.reconciler_cursor,
    )
    replay_markers = providers.Selector(
        config.backend, memory=memory_stores.replay_markers, redis=redis_stores.replay_markers
    )
    #: Inbound webhooks (V10): hooks are kept where flows are; seen signatures expire on
    #: the backend; secrets are read from this process's environment and files.
    hooks = providers.Selector(
        config.storage,
        auto=providers.Selector(
            config.backend, memory=memory_stores.hooks, redis=redis_stores.hooks
        ),
        sql=sql_stores.hooks,
    )
    seen_signatures = providers.Selector(
        config.backend, memory=memory_stores.seen_signatures, redis=redis_stores.seen_signatures
    )
    hook_secrets = providers.Singleton(EnvironmentSecrets)
    #: Tenants' status records and the carriers parked while a tenant is suspended (W24):
    #: on the queue's side, whatever the storage.
    tenants = providers.Selector(
        config.backend, memory=memory_stores.tenants, redis=redis_stores.tenants
    )
    #: Rate limits of task and http nodes (W23): on the backend, like the queue.
    rate_buckets = providers.Selector(
        config.backend, memory=memory_stores.rate_buckets, redis=redis_stores.rate_buckets
    )
    #: ``plaita run``: a run in this process takes its tokens from buckets of its own.
    in_process_rate_buckets = memory_stores.rate_buckets
    #: ``plaita run`` (Normal mode): the events of its command line, in this process.
    closed_event_bus = memory_stores.closed_event_bus

    dlq_key = providers.Callable(
        redis_family.dlq_key, config.dlq_key, redis_keys, config.queue_name
    )
    runtime_config = providers.Singleton(
        _runtime_config,
        namespace=config.namespace,
        queue_name=config.queue_name,
        consumer_group=config.consumer_group,
        dlq_key=dlq_key,
        partitions=config.partitions,
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
    #: This process's config family and generations (W12): logged, registered, and compared
    #: with every carrier's.
    generations = providers.Singleton(generations_of, runtime_config)

    #: What an execution's end or delete does to its parent and children (E13, E14); its
    #: cancels are an operator's (W23), made on the configured store itself.
    child_links = providers.Singleton(
        ChildLinks,
        queue=queue,
        cancel=providers.Singleton(
            CancelExecution,
            executions=execution_store,
            controls=controls,
            queue=queue,
            clock=clock,
            generations=generations,
        ),
        clock=clock,
        generations=generations,
    )
    #: The store, announcing each save that ends an execution (and each delete).
    executions = providers.Singleton(
        AnnouncingExecutions, execution_store, end_notices, child_links
    )
    #: The step's lease and the checkpoint read under it: one script when both are Redis's,
    #: else the lease manager and then the store.
    sequential_leased_load = providers.Singleton(SequentialLeasedLoad, leases, executions)
    leased_load = providers.Selector(
        config.storage,
        auto=providers.Selector(
            config.backend, memory=sequential_leased_load, redis=redis_stores.leased_load
        ),
        sql=sequential_leased_load,
    )

    #: http nodes (E11): the deployment's policy and the client that sends their requests.
    http_policy = providers.Singleton(
        HttpPolicy,
        block_private=config.http_block_private,
        max_response_bytes=config.http_max_response_bytes,
    )
    http_client = providers.Singleton(HttpxClient)

    #: The handlers the engine runs: imports the allowlisted modules when a node needs one.
    handlers = providers.Singleton(HandlerRegistry, config.handler_modules)
    #: How the catalog checks a flow's handlers (``handler_check``): ``import`` finds every
    #: function (the registry above); ``names`` compares module names and imports nothing
    #: (``plaita console``, which never runs handler code).
    handler_check = providers.Selector(config.handler_check, **_handler_checks(handlers, config))
    #: W20: the flow cache of every process that serves executions (worker, console, dev).
    flows = providers.Singleton(
        FlowCatalog,
        flow_repository,
        handler_check,
        clock=clock,
        cache_size=config.flow_cache_size,
        cache_ttl_ms=config.flow_cache_ttl_ms,
    )
    #: ``plaita flows register``: the catalog of the allowlist the command was given, without
    #: a cache (it registers and exits).
    flow_registration = providers.Factory(FlowCatalog, flow_repository, clock=clock, cache_size=0)
