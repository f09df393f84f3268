"""The Redis family: every store on one Redis (``backend=redis``); the client and its keys.

Only this module and the stores it builds import the Redis client library.
"""

from __future__ import annotations

from typing import cast

import redis.asyncio as redis
from dependency_injector import containers, providers
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from plaita.adapters.redis.controls import RedisExecutionControls
from plaita.adapters.redis.counters import RedisCounterStore
from plaita.adapters.redis.dedup import RedisDedupStore
from plaita.adapters.redis.delay_queue import RedisDelayQueue
from plaita.adapters.redis.end_notices import RedisEndNotices
from plaita.adapters.redis.events import RedisEventLog
from plaita.adapters.redis.flows import RedisFlowRepository
from plaita.adapters.redis.hooks import RedisHookStore, RedisSeenSignatures
from plaita.adapters.redis.inbox import RedisInbox
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.leased_load import RedisLeasedLoad
from plaita.adapters.redis.packing import use_hiredis_packing
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.adapters.redis.rate_buckets import RedisRateBuckets
from plaita.adapters.redis.reconciler_cursor import RedisReconcilerCursor
from plaita.adapters.redis.registry import RedisWorkerRegistry
from plaita.adapters.redis.replay_markers import RedisReplayMarkerStore
from plaita.adapters.redis.schedules import RedisScheduleStore
from plaita.adapters.redis.slot_tables import RedisSlotTables
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.adapters.redis.subscriptions import RedisSubscriptionStore
from plaita.adapters.redis.tenants import RedisTenantDirectory
from plaita.adapters.redis.waiting_notes import RedisWaitingNotes
from plaita.domain.startup import ConfigProblem
from plaita.entrypoints.settings import Settings


def redis_client(
    url: str, concurrency: int, cluster: bool = False, partitions: int = 1
) -> redis.Redis:
    """The one client every Redis store shares: a single node, or a Redis Cluster.

    With ``cluster`` (``--redis-cluster``, ``PLAITA_REDIS_CLUSTER=1``) ``url`` is a seed node:
    redis-py's ``RedisCluster`` discovers the others, keeps a pool per node and follows
    MOVED/ASK and failovers. The stores run the same code on both: every script and MULTI
    touches the keys of one hash tag (ADR 0019), so the cluster client serves the command
    surface the stores use, and it is handed to them as the ``redis.Redis`` they are typed with.

    With P > 1 partitions a worker holds one blocking read per task-queue partition open and
    an event filter one per notification partition: up to 2P more connections (per node on a
    cluster) than one partition needs, for a process that does both.

    Its connections pack commands with hiredis (``use_hiredis_packing``): the same bytes as
    redis-py's packer, in C.
    """
    reads = 0 if partitions == 1 else 2 * partitions
    if cluster:
        return use_hiredis_packing(
            cast(
                "redis.Redis",
                redis.RedisCluster.from_url(
                    url,
                    decode_responses=True,
                    health_check_interval=30,
                    # Per node: every in-flight dispatch holds at most one connection to a node.
                    max_connections=concurrency + 16 + reads,
                ),
            )
        )
    # A pool that waits for a free connection instead of failing: every in-flight dispatch
    # holds at most one at a time, plus the loop's reads, timers, heartbeats and metrics.
    pool = redis.BlockingConnectionPool.from_url(
        url,
        decode_responses=True,
        health_check_interval=30,
        max_connections=concurrency + 16 + reads,
        timeout=30,
        # After Redis restarts, every pooled connection is dead: without one immediate retry
        # on a fresh connection, the first command on each fails after the store is back
        # (a dispatch crashes and waits for reclaim, a loop reports a second outage).
        retry=Retry(NoBackoff(), 1),
    )
    return use_hiredis_packing(redis.Redis(connection_pool=pool))


def redis_keys(namespace: str) -> RedisKeys:
    return RedisKeys(namespace)


def dlq_key(configured: str | None, keys: RedisKeys, queue_name: str) -> str:
    """The DLQ stream: ``--dlq-key``, else the queue's own."""
    return configured or keys.queue_dead_letters(queue_name)


def dlq_key_problems(settings: Settings) -> list[ConfigProblem]:
    """``--dlq-key`` must carry the queue's hash tag as its first ``{...}``.

    The task queue dead-letters and acks in one MULTI/EXEC: on Redis Cluster both keys must
    hash to one slot, so the DLQ key's hash tag must be the queue's.
    """
    if settings.dlq_key is None:
        return []
    tag = "{" + settings.queue_name + "}"
    if tag in settings.dlq_key and settings.dlq_key.index("{") == settings.dlq_key.index(tag):
        return []
    own = RedisKeys(settings.namespace).queue_dead_letters(settings.queue_name)
    return [
        ConfigProblem(
            "dlq_key",
            f"{settings.dlq_key!r} does not carry the queue's hash tag {tag!r} as its first "
            "{...}; a dead letter and its ack are written in one atomic step, so both keys "
            f"must share it: use e.g. 'myapp:{tag}:dead', or leave --dlq-key unset for {own!r}",
        )
    ]


class RedisStores(containers.DeclarativeContainer):
    config = providers.Configuration()
    #: A ``redis.Redis`` or a ``RedisCluster`` (``redis_client``): no single class to check.
    client: providers.Dependency[redis.Redis] = providers.Dependency()
    keys = providers.Dependency(instance_of=RedisKeys)

    leases = providers.Singleton(RedisLeaseManager, client, keys)
    #: The step's lease and checkpoint read, one script (both live in the execution's slot).
    leased_load = providers.Singleton(RedisLeasedLoad, client, keys)
    counters = providers.Singleton(RedisCounterStore, client, keys)
    #: Operator flags and parked carriers, beside the checkpoint (ADR 0008).
    controls = providers.Singleton(RedisExecutionControls, client, keys)
    slot_tables = providers.Singleton(RedisSlotTables, client, keys)
    #: Why an execution waits for room to run (flow control), beside the checkpoint.
    waiting_notes = providers.Singleton(RedisWaitingNotes, client, keys)
    executions = providers.Singleton(
        RedisExecutionRepository, client, keys, retention_ms=config.retention_ms
    )
    queue = providers.Singleton(
        RedisTaskQueue,
        client,
        keys,
        queue_name=config.queue_name,
        group=config.consumer_group,
        dead_letter_key=config.dlq_key,
        dead_letter_max_len=config.dlq_max_len,
        partitions=config.partitions,
    )
    flows = providers.Singleton(RedisFlowRepository, client, keys)
    #: One subscription per process for its ``result()`` waiters; a PUBLISH per end.
    end_notices = providers.Singleton(RedisEndNotices, client, keys)
    subscriptions = providers.Singleton(RedisSubscriptionStore, client, keys)
    #: The notification stream is split into the task queue's partitions too.
    events = providers.Singleton(RedisEventLog, client, keys, partitions=config.partitions)
    dedup = providers.Singleton(RedisDedupStore, client, keys)
    inbox = providers.Singleton(RedisInbox, client, keys)
    delay_queue = providers.Singleton(
        RedisDelayQueue,
        client,
        keys,
        queue_name=config.queue_name,
        partitions=config.partitions,
    )
    registry = providers.Singleton(RedisWorkerRegistry, client, keys)
    reconciler_cursor = providers.Singleton(RedisReconcilerCursor, client, keys)
    replay_markers = providers.Singleton(RedisReplayMarkerStore, client, keys)
    #: Rate limit buckets of task and http nodes (W23), shared by every worker.
    rate_buckets = providers.Singleton(RedisRateBuckets, client, keys)
    #: Cron schedules (W22).
    schedules = providers.Singleton(RedisScheduleStore, client, keys)
    hooks = providers.Singleton(RedisHookStore, client, keys)
    seen_signatures = providers.Singleton(RedisSeenSignatures, client, keys)
    #: Tenants' status records and parked carriers (W24), in the root namespace.
    tenants = providers.Singleton(RedisTenantDirectory, client, keys)
