"""Every Redis key plaita uses, built in one place (the key schema; tenants: ADR 0005).

The part in braces is the Redis Cluster hash tag: all keys one execution's step touches share
``{<execution_id>}`` so a single Lua script may read the fence and write the state atomically.

Execution keys (state, node results, variables, fence, lease, counters, heartbeat, tombstone,
the executions index), dedup claims and a tenant's own flow definitions live in the namespace
of their tenant (W24): the base namespace for the default tenant, ``<base>:<tenant>``
otherwise. The execution keys take the tenant of the unit of work in progress
(``plaita.application.tenancy``) and refuse to be built outside one. Queues, the delay queue,
deployment-wide flows, workers, events and subscriptions are shared by the deployment;
events and subscriptions carry their tenant in the record.
"""

from __future__ import annotations

import hashlib

from plaita.application.tenancy import current_tenant
from plaita.domain.flow_owners import FlowOwner
from plaita.domain.priorities import Priority
from plaita.domain.slots import SlotTableId
from plaita.domain.tenancy import tenant_namespace

DEFAULT_NAMESPACE = "plaita"
_EXECUTIONS = ":executions"


def _execution_key(tenant_namespace: str, execution_id: str, suffix: str) -> str:
    return f"{tenant_namespace}:x:{{{execution_id}}}:{suffix}"


class RedisKeys:
    """Builds the keys of one namespace (``plaita`` for the default tenant)."""

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        if not namespace:
            raise ValueError("a Redis key namespace must not be empty")
        self.namespace = namespace

    def tenant_namespace(self, tenant_id: str) -> str:
        """The namespace of ``tenant_id``'s execution keys (W24)."""
        return tenant_namespace(self.namespace, tenant_id)

    # --- executions (routed to the current tenant's namespace) ----------------------

    def _execution(self, execution_id: str, suffix: str) -> str:
        return _execution_key(self.tenant_namespace(current_tenant()), execution_id, suffix)

    def execution_state(self, execution_id: str) -> str:
        return self._execution(execution_id, "state")

    def fence_generation(self, execution_id: str) -> str:
        return self._execution(execution_id, "fencegen")

    def lease(self, execution_id: str) -> str:
        return self._execution(execution_id, "lease")

    def execution_nodes(self, execution_id: str) -> str:
        """Hash of node id → result JSON: a step adds one field, never rewrites the others (S3)."""
        return self._execution(execution_id, "nodes")

    def execution_vars(self, execution_id: str) -> str:
        """Hash of variable name → JSON (S3)."""
        return self._execution(execution_id, "vars")

    def counters(self, execution_id: str) -> str:
        """Hash of the budget counters (W7, W8)."""
        return self._execution(execution_id, "counters")

    def tombstone(self, execution_id: str) -> str:
        return self._execution(execution_id, "tombstone")

    def execution_heartbeat(self, execution_id: str) -> str:
        """JSON of the running node's progress: node id and last update time (W15)."""
        return self._execution(execution_id, "heartbeat")

    def execution_history(self, execution_id: str) -> str:
        """List of the newest history entries (``plaita.domain.history``), oldest first."""
        return self._execution(execution_id, "history")

    def execution_history_total(self, execution_id: str) -> str:
        """How many history entries were ever appended: the seq of the newest."""
        return self._execution(execution_id, "history:n")

    def executions(self) -> str:
        return f"{self.tenant_namespace(current_tenant())}{_EXECUTIONS}"

    def execution_indexes(self) -> str:
        """Set of every tenant's ``…:executions`` index key, walked by the janitor (S1)."""
        return f"{self.namespace}:execution-indexes"

    @staticmethod
    def execution_state_in(index: str, execution_id: str) -> str:
        """The state key of ``execution_id`` in the tenant whose executions index is ``index``
        (the janitor walks every tenant's index outside any tenant's scope)."""
        return _execution_key(index.removesuffix(_EXECUTIONS), execution_id, "state")

    # --- slot tables (concurrency keys, tenant quotas; E1a) ---------------------------

    def _slot_table(self, table: SlotTableId, suffix: str) -> str:
        # The hash tag is a digest of the table's identity: a key value may hold any text.
        return f"{self.tenant_namespace(current_tenant())}:slots:{{{table.digest}}}:{suffix}"

    def slot_table(self, table: SlotTableId) -> str:
        """Hash: version, limit, holders and reservations of one table (one hash slot)."""
        return self._slot_table(table, "table")

    def slot_fifo(self, table: SlotTableId) -> str:
        """List of the table's waiting carriers, head first; same hash tag."""
        return self._slot_table(table, "fifo")

    def slot_parked(self, table: SlotTableId) -> str:
        """Hash of the waiting (and promoted) carriers' envelopes by carrier id; same tag."""
        return self._slot_table(table, "parked")

    def slot_tables(self) -> str:
        """Sorted set of every tenant's tables with holders or waiters, by last write (ms),
        walked by the sweeper; written before the table, so it may list idle ones."""
        return f"{self.namespace}:slot-tables"

    # --- task queues ----------------------------------------------------------------

    # One partition's stream, DLQ and delay set share the hash tag ``{<queue>:p<k>}`` (one
    # slot: the dead letter + ack MULTI and the delay move stay single-slot); ``partition``
    # None is the unpartitioned layout (``--partitions 1``), ``{<queue>}``, as it always was.

    @staticmethod
    def queue_tag(queue_name: str, partition: int | None = None) -> str:
        if partition is None:
            return f"{{{queue_name}}}"
        return f"{{{queue_name}:p{partition}}}"

    def queue_stream(
        self, queue_name: str, partition: int | None = None, priority: Priority = Priority.NORMAL
    ) -> str:
        """The partition's stream of ``priority``: the normal one is ``…:stream``, as it always
        was; high and low have their own, under the same hash tag, so one XREADGROUP reads
        all three and the delay move writes to any of them."""
        stream = f"{self.namespace}:q:{self.queue_tag(queue_name, partition)}:stream"
        return stream if priority is Priority.NORMAL else f"{stream}:{priority.value}"

    def queue_dead_letters(self, queue_name: str, partition: int | None = None) -> str:
        return f"{self.namespace}:q:{self.queue_tag(queue_name, partition)}:dlq"

    def queue_delayed(self, queue_name: str, partition: int | None = None) -> str:
        """Sorted set of carriers by due time, moved into the stream by one script (W8, V8)."""
        return f"{self.namespace}:q:{self.queue_tag(queue_name, partition)}:delayed"

    @classmethod
    def partition_key(cls, key: str, queue_name: str, partition: int | None) -> str:
        """``key`` (an operator's ``--dlq-key``, which carries ``{<queue>}``) for one
        partition: its queue hash tag becomes the partition's."""
        if partition is None:
            return key
        return key.replace(cls.queue_tag(queue_name), cls.queue_tag(queue_name, partition), 1)

    def queue_partitions(self, queue_name: str) -> str:
        """The partition count the queue's workers last started with (``--partitions``)."""
        return f"{self.namespace}:q:{{{queue_name}}}:partitions"

    def dlq_replayed(self, dlq_key: str, dlq_id: str) -> str:
        """One-time replay marker of a dead letter (W10)."""
        return f"{self.namespace}:dlq-replayed:{{{dlq_key}}}:{dlq_id}"

    # --- workers --------------------------------------------------------------------

    def worker(self, instance_id: str) -> str:
        return f"{self.namespace}:worker:{{{instance_id}}}"

    def workers(self) -> str:
        return f"{self.namespace}:workers"

    def dedup(self, tenant_id: str, dedup_key: str) -> str:
        return f"{self.tenant_namespace(tenant_id)}:dedup:{{{tenant_id}}}:{dedup_key}"

    # --- flows (per owner: the deployment's shared catalogue, or one tenant's) -------

    def _flow_catalog(self, owner: FlowOwner) -> str:
        # The shared catalogue keeps the keys every deployment had before tenants owned
        # flows. A tenant's lives in its namespace under another word: the default tenant's
        # namespace is the base one, and its keys must not be the shared ones.
        if owner.tenant_id is None:
            return f"{self.namespace}:flow"
        return f"{self.tenant_namespace(owner.tenant_id)}:tenant-flow"

    def flow_version(self, owner: FlowOwner, flow_id: str, version: str) -> str:
        return f"{self._flow_catalog(owner)}:{{{flow_id}}}:v:{version}"

    def flow_latest(self, owner: FlowOwner, flow_id: str) -> str:
        """The owner's latest version of the flow; same hash tag as its versions (one script)."""
        return f"{self._flow_catalog(owner)}:{{{flow_id}}}:latest"

    def flow_versions(self, owner: FlowOwner, flow_id: str) -> str:
        """Set of the owner's stored versions of the flow; same hash tag (``flow_put.lua``)."""
        return f"{self._flow_catalog(owner)}:{{{flow_id}}}:versions"

    def flows(self, owner: FlowOwner) -> str:
        """Set of the owner's flow ids, added to after the version (RedisFlowRepository)."""
        return f"{self._flow_catalog(owner)}s"

    # --- subscriptions and events ---------------------------------------------------

    def subscription(self, subscription_id: str) -> str:
        return f"{self.namespace}:sub:{{{subscription_id}}}"

    def subscriptions_by_type(self, event_type: str) -> str:
        """Sorted set of subscription ids of one event type, scored by created_at_ms (V7)."""
        return f"{self.namespace}:subs:type:{event_type}"

    def subscriptions_by_correlation(self, correlation_id: str) -> str:
        """Sorted set of subscription ids waiting on one correlation id (V7)."""
        return f"{self.namespace}:subs:corr:{correlation_id}"

    def subscriptions_uncorrelated(self, event_type: str) -> str:
        """Sorted set of the ids of one type's subscriptions without a correlation id: with
        the correlation index, the only candidates an event can match (V4, V7)."""
        return f"{self.namespace}:subs:nocorr:{event_type}"

    def subscriptions_by_flow(self, flow_id: str) -> str:
        """Sorted set of subscription ids of one flow's waits (V7)."""
        return f"{self.namespace}:subs:flow:{flow_id}"

    def subscriptions_by_node(self, node_id: str) -> str:
        """Sorted set of subscription ids registered by nodes of this id, any flow (V7)."""
        return f"{self.namespace}:subs:node:{node_id}"

    def subscriptions_all(self) -> str:
        """Sorted set of every subscription id: the candidates of a listing naming no index."""
        return f"{self.namespace}:subs:all"

    def subscription_indexes(self) -> str:
        """Set of the subscription index keys that exist, walked by the janitor (V7)."""
        return f"{self.namespace}:subs:indexes"

    def event(self, event_id: str) -> str:
        return f"{self.namespace}:ev:{{{event_id}}}"

    def events_by_type(self, event_type: str) -> str:
        """Sorted set of event ids of one type, scored by timestamp_ms (V7)."""
        return f"{self.namespace}:evidx:type:{event_type}"

    def events_by_time(self) -> str:
        """Sorted set of every event id, scored by timestamp_ms (V5, V7)."""
        return f"{self.namespace}:evidx:time"

    def event_indexes(self) -> str:
        """Set of the event index keys that exist, walked by the janitor (V7)."""
        return f"{self.namespace}:evidx:keys"

    def inbox(self, tenant_id: str, correlation_id: str) -> str:
        """List of event JSON kept for waits that begin later (V6), in the tenant's namespace."""
        return f"{self.tenant_namespace(tenant_id)}:inbox:{{{correlation_id}}}"

    def inbox_taken(self, tenant_id: str, correlation_id: str) -> str:
        """Hash ``<execution_id>\x1f<event_id>`` → the subscription that took the event."""
        return f"{self.tenant_namespace(tenant_id)}:inbox:{{{correlation_id}}}:taken"

    def end_notices(self, tenant_id: str) -> str:
        """The pub/sub channel (not a key: no slot) where ended executions of the tenant are
        announced, one message per end holding the execution id."""
        return f"{self.tenant_namespace(tenant_id)}:ended"

    def event_notifications(self, partition: int | None = None) -> str:
        """The notification stream (ADR 0002); with P > 1 partitions (``--partitions``),
        partition k is ``{ns}:events:{events:p<k>}:stream``, each under its own hash tag, and
        ``partition`` None is the one-partition stream ``{ns}:events:stream``. (The tag
        ``{events:p<k>}`` puts partitions 0, 1, 2 on three masters of the usual 3-way split.)
        """
        if partition is None:
            return f"{self.namespace}:events:stream"
        return f"{self.namespace}:events:{{events:p{partition}}}:stream"

    def reconciler_cursor(self) -> str:
        """Sorted set whose one member's score is the event reconciler's cursor (V5)."""
        return f"{self.namespace}:events:reconciler:cursor"

    def event_handled(self, event_id: str, handler_id: str) -> str:
        """Mark that ``handler_id`` succeeded for ``event_id`` (V3 publish dedup), with a TTL."""
        return f"{self.namespace}:evdone:{{{event_id}}}:{handler_id}"

    # --- inbound webhooks (V10; shared by the deployment, the tenant is in the record) ---

    def hooks(self) -> str:
        """Hash of hook name → definition JSON: one key, so every write is one command."""
        return f"{self.namespace}:hooks"

    def hook_seen(self, hook: str, signature: str) -> str:
        """Mark that ``hook`` accepted ``signature``, kept until its timestamp leaves the
        replay window (SET NX PX)."""
        return f"{self.namespace}:hook-seen:{{{hook}}}:{signature}"

    # --- operator controls (W23; routed to the current tenant, the execution's hash tag) ---

    def execution_control(self, execution_id: str) -> str:
        """Hash of the operator flags ``paused`` and ``cancel_requested`` (``"1"`` when set)."""
        return self._execution(execution_id, "control")

    def execution_waiting(self, execution_id: str) -> str:
        """JSON of why the execution waits for room to run (flow control), if it does."""
        return self._execution(execution_id, "waiting")

    def execution_parked(self, execution_id: str) -> str:
        """Hash carrier id → envelope fields JSON: carriers kept while the execution is paused."""
        return self._execution(execution_id, "parked")

    # --- cron schedules (W22; the tenant's namespace, the schedule id as hash tag) -------

    def schedule(self, tenant_id: str, schedule_id: str) -> str:
        """Hash of one schedule: its definition JSON and its state fields."""
        return f"{self.tenant_namespace(tenant_id)}:sched:{{{schedule_id}}}"

    def schedule_claim(self, tenant_id: str, schedule_id: str, due_ms: int) -> str:
        """The claim of one due of a schedule (holder id, with a TTL); same hash tag, so the
        claim and the check that the due still waits are one script."""
        return f"{self.schedule(tenant_id, schedule_id)}:claim:{due_ms}"

    def schedules(self) -> str:
        """Set of every tenant's schedules as ``<tenant>:<schedule id>`` (a tenant id has no
        ':'), added to before a schedule is stored and removed from after it is deleted."""
        return f"{self.namespace}:schedules"

    # --- tenants' status records (W24; the deployment's root namespace, the tenant as tag) --

    def tenant_record(self, tenant_id: str) -> str:
        """Hash of a tenant's status: status, max_running, epoch, updated_at_ms, version."""
        return f"{self.namespace}:tenant:{{{tenant_id}}}"

    def tenant_parked(self, tenant_id: str) -> str:
        """Sorted set of the carrier ids parked while the tenant is suspended, scored by the
        carrier's timestamp; same hash tag as the record (the park checks its version)."""
        return f"{self.tenant_record(tenant_id)}:parked"

    def tenant_parked_carriers(self, tenant_id: str) -> str:
        """Hash carrier id → envelope fields JSON of the tenant's parked carriers."""
        return f"{self.tenant_record(tenant_id)}:parked:carriers"

    def tenants(self) -> str:
        """Set of the tenant ids with a record, added to after the record is written."""
        return f"{self.namespace}:tenants"

    # --- rate limits (W23; the current tenant's namespace, a hash of the key as hash tag) --

    def rate_bucket(self, key: str) -> str:
        """One rate limit bucket: its TAT (µs) as a string, expiring once the TAT has passed.
        The hash tag is a digest of the key, so any key (long, with braces) is one slot."""
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"{self.tenant_namespace(current_tenant())}:rate:{{{digest}}}"
