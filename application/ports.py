"""Ports: what the application needs from the outside world, as async Protocols.

Every port has one contract suite in ``tests/contract/`` that each adapter family (memory,
fakeredis, real Redis, later SQL) must pass; the memory twin raises the same named errors as
the real store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from plaita.domain.budgets import CounterChange, attempt_number
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.events import (
    Event,
    EventQuery,
    EventSubscription,
    InboxEntry,
    SubscriptionQuery,
)
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import FlowOwner
from plaita.domain.lease import Lease
from plaita.domain.operator_controls import ControlFlags
from plaita.domain.tombstone import Tombstone


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch (for records and ages)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards (for deadlines)."""
        ...


class IdGenerator(Protocol):
    def new_id(self) -> str:
        """A fresh, globally unique id."""
        ...


# --- task queue (W1, W2) -----------------------------------------------------------------

#: A stream entry's fields exactly as they were written: (name, value) pairs, base64.
RawBase64 = tuple[tuple[str, str], ...]


@attrs.frozen
class Delivery:
    """One carrier as read from the queue.

    ``envelope`` is None when the entry could not be decoded; ``problem`` then says why and
    ``raw`` keeps the fields as evidence for the dead-letter queue (R4). An entry that is not
    UTF-8 shows its bytes ``\\x``-escaped in ``raw`` and keeps them losslessly in
    ``raw_base64``: every (field name, value) pair, in order, each base64-encoded.
    """

    message_id: str
    envelope: TaskEnvelope | None
    raw: dict[str, str]
    delivery_count: int
    reclaimed: bool = False
    problem: str | None = None
    raw_base64: RawBase64 | None = None


@attrs.frozen
class QueueStats:
    length: int
    pending: int
    #: The stream-id time (ms) of the oldest carrier no worker has read yet; None when every
    #: carrier was read. ``now - oldest_unread_ms`` is how far the workers lag behind.
    oldest_unread_ms: int | None = None


@attrs.frozen
class DeadLetter:
    dlq_id: str
    message_id: str
    reason: str
    raw: dict[str, str]
    #: The carrier's exact bytes when it was not UTF-8 (see ``Delivery``), else None.
    raw_base64: RawBase64 | None = None


class TaskQueue(Protocol):
    async def ensure_group(self) -> None:
        """Create the stream and its consumer group if missing (group starts at id 0)."""
        ...

    async def enqueue(self, envelope: TaskEnvelope) -> str:
        """Append a carrier; return its message id."""
        ...

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[Delivery]:
        """New carriers for ``consumer``; waits up to ``block_ms`` when there are none."""
        ...

    async def ack(self, message_id: str) -> None:
        """Mark a carrier done; only after its dispatch returned (W1)."""
        ...

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int) -> list[Delivery]:
        """Take over carriers pending on other consumers longer than ``min_idle_ms`` (W2)."""
        ...

    async def touch(self, consumer: str, message_ids: Sequence[str]) -> int:
        """Reset the idle time of carriers this consumer holds (XCLAIM … 0 JUSTID to itself).

        So a live holder's carrier is not reclaimed (W5, I0); returns how many were still
        pending. Never increments the delivery count; ids no longer pending are ignored.
        """
        ...

    async def stats(self) -> QueueStats:
        """Stream length and number of pending (delivered, not acked) carriers."""
        ...

    async def dead_letter(self, delivery: Delivery, reason: str) -> str:
        """Copy the carrier's raw fields and ``reason`` to the DLQ, then ack it; the DLQ id.

        The DLQ is a lossy FIFO (W10, S5): the same atomic step trims it to its length cap,
        dropping the oldest entries; ``dead_letters_dropped`` counts them.
        """
        ...

    async def dead_letters_dropped(self) -> int:
        """How many dead letters the length cap has dropped through this queue object since
        it was made (a running total: each worker counts what its own writes dropped)."""
        ...

    async def dead_letters(self, *, count: int = 100) -> list[DeadLetter]:
        """The newest dead letters, newest first."""
        ...

    async def trim_acknowledged(self) -> int:
        """Remove the stream's entries below the oldest one the group still needs (S5); how
        many were removed.

        What the group needs is every pending entry and every entry not yet delivered: none
        of them, and nothing after them, is ever removed, whatever runs meanwhile (one
        atomic step on Redis). Acked entries behind them stay until those are acked.
        """
        ...


# --- storage (S1, S2, W4) ---------------------------------------------------------------


@attrs.frozen
class NodeHeartbeat:
    """The running node's progress as the lease holder last recorded it (W15, W19)."""

    node_id: str
    #: Wall-clock time of the record, in milliseconds since the epoch.
    last_update_ms: int


class ExecutionRepository(Protocol):
    async def load(self, execution_id: str) -> ExecutionState | None:
        """The stored checkpoint, or None (one round trip on Redis)."""
        ...

    async def save(
        self, state: ExecutionState, *, fence: int, previous: ExecutionState | None = None
    ) -> None:
        """Store ``state`` if ``fence`` is the execution's current lease generation.

        ``previous`` is the state this holder last saved or loaded: only what changed since
        is written (S3), so a step's write does not grow with the run. Without it the whole
        state is written and replaces whatever was stored. Raises ``ExecutionLeaseError``
        (nothing written) when the fence is not current or the execution was deleted (W4,
        W13).

        Retention (S5): a terminal ``state`` makes every record of the execution (state,
        node results, variables, counters, heartbeat, operator flags, parked carriers)
        expire within the store's retention, in the same atomic write where the store allows
        it; a live one over a terminal one keeps them until the end again. The generation
        counter never expires (W4).
        """
        ...

    async def delete(
        self,
        execution_id: str,
        *,
        fence: int | None,
        tombstone: Tombstone,
        tombstone_ttl_ms: int,
    ) -> Tombstone:
        """Remove state, index entry, lease, counters, heartbeat, operator flags and parked
        carriers and leave a tombstone, atomically (W13).

        The generation counter stays. ``fence`` is the deleting holder's generation
        (``ExecutionLeaseError``, nothing removed, when it is not current); None is an
        operator delete that revokes whoever holds the lease: the generation moves on, so the
        holder's later writes fail. A second delete keeps the first tombstone (and its
        ``deleted_at``), only ever extending its TTL, and removes again whatever was written
        for the execution since; the stored tombstone is returned. A store whose counters or
        flags live in another store (SQL) removes those right after its own transaction.
        """
        ...

    async def heartbeat(self, execution_id: str, *, fence: int, node_id: str, now_ms: int) -> None:
        """Record that ``node_id`` is still running at ``now_ms`` (W15), under the fence.

        Written only if ``fence`` is the execution's current lease generation and the
        execution was not deleted; otherwise raises ``ExecutionLeaseError`` and writes
        nothing, like ``save``. The record expires on its own; ``delete`` removes it.
        """
        ...

    async def last_heartbeat(self, execution_id: str) -> NodeHeartbeat | None:
        """The last recorded heartbeat while it lasts, or None (W19)."""
        ...

    async def tombstone(self, execution_id: str) -> Tombstone | None:
        """The execution's tombstone while it lasts, or None (also ``TombstoneStore.get``)."""
        ...

    async def list(
        self, *, flow_id: str | None = None, status: ExecutionStatus | None = None, limit: int = 100
    ) -> Sequence[ExecutionState]:
        """Executions, newest first, filtered by flow and status."""
        ...

    async def page(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ExecutionPage:
        """One page of the current tenant's executions, newest first (index score, then id).

        ``cursor`` is a previous page's ``next_cursor`` (opaque; ``InvalidOperatorRequestError``
        when it is not one). Filters are applied to candidates read from the index in batches,
        until ``limit`` matched or the index ends; a page may stop early (fewer items, even
        none) after ``PAGE_SCAN_BUDGET`` candidates, with a cursor to go on from. Executions
        written while paging move to the front and do not shift later pages. ``next_cursor``
        is None once the index is exhausted.
        """
        ...


class LeaseManager(Protocol):
    async def acquire(self, execution_id: str, holder_id: str, *, ttl_ms: int) -> Lease | None:
        """Take the lease with a new fence generation; None if another holder has it (W3)."""
        ...

    async def renew(self, lease: Lease, *, ttl_ms: int) -> bool:
        """Extend the lease if it is still ours; False when it was lost."""
        ...

    async def release(self, lease: Lease) -> bool:
        """Give the lease up if it is still ours; False when it was already gone."""
        ...

    async def holder(self, execution_id: str) -> Lease | None:
        """Who holds the lease now, or None."""
        ...

    async def current_generation(self, execution_id: str) -> int | None:
        """The last generation handed out (never reset), or None if never acquired."""
        ...


class FlowRepository(Protocol):
    """Definitions by (owner, flow_id, version) with a latest pointer per owner and flow.

    The owner is a tenant or the deployment (``SHARED``); owners never see each other's
    definitions here — which owner a tenant's lookup asks is the catalog's rule.
    """

    async def put_if_absent(self, flow: Flow, *, owner: FlowOwner) -> Flow | None:
        """Store ``flow`` under ``owner`` and make it the owner's latest, in one atomic step,
        unless that (flow_id, version) is already stored: then nothing is written and the
        stored definition is returned. Of concurrent puts of one version exactly one stores."""
        ...

    async def get(
        self, flow_id: str, version: str | None = None, *, owner: FlowOwner
    ) -> Flow | None:
        """``owner``'s definition by id and version (its latest when version is None), or None."""
        ...

    async def list_ids(self, *, owner: FlowOwner) -> Sequence[str]:
        """Ids of every flow ``owner`` has registered, sorted."""
        ...


class DelayQueue(Protocol):
    async def schedule(self, envelope: TaskEnvelope, *, due_ms: int) -> str:
        """Hold ``envelope`` until ``due_ms``; a timer id (W8 retries, V8 timeouts and sleeps)."""
        ...

    async def move_due(self, *, now_ms: int, limit: int = 500) -> int:
        """Move up to ``limit`` due carriers into the task stream atomically; how many moved.

        A carrier is never in both places and never in neither: the move is one Lua script on
        Redis, so a crash between "remove from the delay set" and "add to the stream" cannot
        happen.
        """
        ...

    async def pending(self) -> int:
        """How many carriers wait for their due time."""
        ...


@attrs.frozen
class Counters:
    """An execution's budget counters (W2, W7, W8); absent counters read as 0."""

    node_retries: dict[str, int] = attrs.field(factory=dict)
    total_retries: int = 0
    wakeups: int = 0
    no_fail: int = 0
    #: Attempts of each node that crashed their worker (W2).
    node_crashes: dict[str, int] = attrs.field(factory=dict)
    #: The lease generation of a dispatch that began and has not ended, if any (W2).
    open_attempt: int | None = None

    def attempt(self, node_id: str | None) -> int:
        """The attempt number of ``node_id``'s next attempt, across deliveries (E15)."""
        key = node_id or ""
        return attempt_number(
            node_retries=self.node_retries.get(key, 0),
            node_crashes=self.node_crashes.get(key, 0),
        )

    def attempts(self) -> dict[str, int]:
        """The next attempt's number of every node that has had a failed or crashed one."""
        return {node: self.attempt(node) for node in {*self.node_retries, *self.node_crashes}}


class CounterStore(Protocol):
    async def read(self, execution_id: str) -> Counters:
        """The execution's counters (0 for those never written)."""
        ...

    async def begin_attempt(self, execution_id: str, generation: int, *, ttl_ms: int) -> Counters:
        """Record that a dispatch under lease ``generation`` began, atomically with reading the
        counters as they were before (W2): their ``open_attempt`` names an earlier dispatch
        that began and never ended. Refreshes the TTL like ``apply``."""
        ...

    async def end_attempt(self, execution_id: str, generation: int) -> bool:
        """Clear the open attempt if it is still ``generation``'s; False when it was not."""
        ...

    async def apply(
        self, execution_id: str, changes: Sequence[CounterChange], *, ttl_ms: int
    ) -> Counters:
        """Apply increments and resets atomically, refresh the TTL; the counters after."""
        ...


class TombstoneStore(Protocol):
    async def get(self, execution_id: str) -> Tombstone | None:
        """The execution's tombstone, if it was deleted (W13)."""
        ...


@attrs.frozen
class WorkerInstance:
    instance_id: str
    status: str
    heartbeat_ms: int
    started_ms: int
    config_family: str = ""
    config_generation: str = ""
    budget_generation: str = ""


class WorkerRegistry(Protocol):
    async def put(self, instance: WorkerInstance, *, ttl_ms: int) -> None:
        """Write the instance record (status + heartbeat) with a TTL (W16)."""
        ...

    async def get(self, instance_id: str) -> WorkerInstance | None:
        """One instance, or None when it never registered or its record expired."""
        ...

    async def list(self) -> Sequence[WorkerInstance]:
        """Every registered instance."""
        ...

    async def remove(self, instance_id: str) -> None:
        """Delete the record (a closed worker)."""
        ...


@attrs.frozen
class DedupClaim:
    """The execution a start dedup key already names, and what is known of its start (W6)."""

    execution_id: str
    #: How long ago the key was claimed (from its remaining TTL), None when unknown.
    age_ms: int | None
    #: The claimer confirmed that the start carrier was enqueued (``confirm``).
    carrier_enqueued: bool


class DedupStore(Protocol):
    async def claim(
        self, key: str, execution_id: str, *, tenant_id: str, ttl_ms: int
    ) -> DedupClaim | None:
        """Claim ``key`` for ``execution_id`` (SET NX); None when claimed now, else who holds
        it. ``age_ms`` is measured against ``ttl_ms``: every claim of a key uses one TTL."""
        ...

    async def confirm(self, key: str, execution_id: str, *, tenant_id: str) -> bool:
        """Record that ``execution_id``'s start carrier exists (after its enqueue); False when
        the key no longer names it. An unconfirmed claim is an orphan once it is old (W6)."""
        ...

    async def release(self, key: str, execution_id: str, *, tenant_id: str) -> bool:
        """Drop the claim if ``execution_id`` still holds it (an orphan, a deleted execution)."""
        ...


# --- events (V1-V4) ---------------------------------------------------------------------


class SubscriptionStore(Protocol):
    async def add(self, subscription: EventSubscription) -> None:
        """Store a subscription and index it by event type and execution."""
        ...

    async def remove(self, subscription_id: str) -> bool:
        """Delete a subscription and its index entries; False if it did not exist."""
        ...

    async def get(self, subscription_id: str) -> EventSubscription | None:
        """A subscription by id, or None."""
        ...

    async def find(self, event_type: str) -> Sequence[EventSubscription]:
        """Every subscription for ``event_type`` (matching beyond the type is the domain's)."""
        ...

    async def find_for_event(
        self, event_type: str, correlation_id: str | None
    ) -> Sequence[EventSubscription]:
        """The only subscriptions an event can match: of ``event_type`` and either waiting
        on ``correlation_id`` or on no correlation at all, oldest first (V4).

        Read through the correlation index and a per-type index of uncorrelated
        subscriptions, so the cost does not grow with the type's other waits.
        """
        ...

    async def list(self, query: SubscriptionQuery) -> Sequence[EventSubscription]:
        """Subscriptions matching every field the query names (AND), oldest first (V7).

        Candidates come from the most selective index the query names
        (``choose_subscription_index``), fetched in one round trip; every filter is then
        applied to them. At most ``query.limit``.
        """
        ...


class Inbox(Protocol):
    """Events kept per (tenant, correlation id) for waits that begin later (V6)."""

    async def add(self, event: Event) -> None:
        """Keep ``event`` in its correlation's inbox (TTL only extends); no-op without one."""
        ...

    async def entries(
        self, tenant_id: str, correlation_id: str, execution_id: str
    ) -> Sequence[InboxEntry]:
        """The events in the inbox, each with the subscription of ``execution_id`` that took
        it (or None), in one round trip."""
        ...

    async def take(
        self,
        tenant_id: str,
        correlation_id: str,
        execution_id: str,
        event_id: str,
        subscription_id: str,
    ) -> str:
        """Record that ``subscription_id`` takes ``event_id`` for ``execution_id``, unless a
        subscription took it already (set-if-absent, atomic); the subscription that holds it."""
        ...


class EventWaiter(Protocol):
    async def wait_for_event(
        self, subscription: EventSubscription, timeout_ms: int | None
    ) -> Event | None:
        """Wait in-process for an event matching ``subscription``; None once the timeout passed.

        An event published before the wait began, with the subscription's correlation id,
        counts (V6).
        """
        ...


@attrs.frozen
class EventNotification:
    notification_id: str
    event_id: str


class EventLog(Protocol):
    async def append(self, event: Event) -> None:
        """Store the event record and notify event filters, atomically."""
        ...

    async def get(self, event_id: str) -> Event | None:
        """An event by id, or None."""
        ...

    async def ensure_group(self) -> None:
        """Create the notification stream and the event-filter consumer group if missing."""
        ...

    async def read_notifications(
        self, consumer: str, *, count: int, block_ms: int
    ) -> list[EventNotification]:
        """New notifications for ``consumer`` (first its own pending ones after a restart)."""
        ...

    async def ack_notification(self, notification_id: str) -> None:
        """Mark a notification handled."""
        ...

    async def reclaim_notifications(
        self, consumer: str, *, min_idle_ms: int, count: int
    ) -> list[EventNotification]:
        """Take over notifications left pending by a crashed event filter."""
        ...

    async def trim_notifications(self, *, min_age_ms: int) -> int:
        """Remove notifications every event-filter group has acked and that are at least
        ``min_age_ms`` old (S5); how many were removed.

        Like ``TaskQueue.trim_acknowledged`` over every group of the stream: nothing pending
        and nothing undelivered is removed. ``min_age_ms`` is the grace of the readers without
        a group (every event bus reads the stream with plain reads): what the groups are done
        with stays that long for them.
        """
        ...

    async def list(self, query: EventQuery) -> Sequence[Event]:
        """Stored events matching every field the query names, oldest first (V5, V7).

        Candidates come from the type index when a type is named, else from the time index;
        at most ``query.limit``.
        """
        ...


class IndexJanitor(Protocol):
    """A store whose indexes keep members of expired records until they are pruned (V7)."""

    async def prune_indexes(self, *, budget: int) -> int:
        """Remove at most ``budget`` dead index members (in Lua batches of <= 500); how many."""
        ...


class ReconcilerCursor(Protocol):
    """Where the event reconciler stopped: the end of its last completely replayed window (V5)."""

    async def get(self) -> int | None:
        """The stored cursor in epoch milliseconds, or None before the first successful round."""
        ...

    async def set(self, cursor_ms: int) -> None:
        """Store ``cursor_ms`` unless the stored cursor is already later (never moves back)."""
        ...


# --- alerts (C5) --------------------------------------------------------------------------


@attrs.frozen
class DeadLetterAlert:
    """What an operator is told when a carrier lands in the dead-letter queue (C5)."""

    dlq_id: str | None
    message_id: str
    execution_id: str | None
    tenant_id: str | None
    reason: str
    at_ms: int

    def to_json(self) -> dict[str, object]:
        return {"event": "plaita.dead_letter", **attrs.asdict(self)}


class AlertSink(Protocol):
    def offer(self, alert: DeadLetterAlert) -> bool:
        """Queue ``alert`` for best-effort delivery without waiting; False when it was dropped
        (the queue is full). Never blocks and never raises: consuming must not wait on it."""
        ...


# --- operator controls (W23) and execution listing (C1) ---------------------------------

#: Index entries one ``page`` call looks at before it returns what it found (bounded work).
PAGE_SCAN_BUDGET = 2_000


@attrs.frozen
class ExecutionPage:
    items: tuple[ExecutionState, ...]
    #: Pass back as ``cursor`` for the next page; None when there is nothing after this one.
    next_cursor: str | None = None


@attrs.frozen
class ParkedCarrier:
    """A carrier of a paused execution, kept until the execution is unpaused (W23, I0)."""

    carrier_id: str
    envelope: TaskEnvelope


@attrs.frozen
class Admission:
    """What the pause gate found, and whether it parked the carrier (one atomic step)."""

    flags: ControlFlags
    parked: bool = False
    #: Carriers parked while the execution is no longer paused (an unpause that crashed
    #: half-way): the worker re-enqueues them. Empty unless that happened.
    stranded: tuple[ParkedCarrier, ...] = ()


class ExecutionControls(Protocol):
    """Operator flags of an execution, apart from its checkpoint, and its parked carriers (W23).

    Kept in the execution's tenant namespace and hash tag; written without the lease. They
    last while the execution is live, expire with it once it is terminal (``retain``, S5) and
    go with its delete (W13).
    """

    async def get(self, execution_id: str) -> ControlFlags:
        """The flags and the number of parked carriers (all false/0 when never set)."""
        ...

    async def get_many(self, execution_ids: Sequence[str]) -> Mapping[str, ControlFlags]:
        """``get`` for several executions of the current tenant, in one round trip."""
        ...

    async def set_flags(
        self,
        execution_id: str,
        *,
        paused: bool | None = None,
        cancel_requested: bool | None = None,
    ) -> ControlFlags:
        """Set or clear the given flags (None leaves one as it is); the flags after."""
        ...

    async def admit(self, envelope: TaskEnvelope, *, parkable: bool) -> Admission:
        """The worker's pause gate, atomic: park the carrier when ``should_park`` says so.

        Park = keep it among the execution's parked carriers (the same carrier once); the
        caller then acks it. When the execution is not paused but carriers are still parked,
        they are returned as ``stranded`` (and stay parked until ``unpark``).
        """
        ...

    async def parked(self, execution_id: str) -> Sequence[ParkedCarrier]:
        """The parked carriers, oldest carrier timestamp first."""
        ...

    async def unpark(self, execution_id: str, carrier_ids: Sequence[str]) -> int:
        """Forget these parked carriers (re-enqueued by the caller); how many were parked."""
        ...

    async def retain(self, execution_id: str, *, ttl_ms: int | None) -> None:
        """Let the flags and parked carriers expire ``ttl_ms`` from now (the execution ended,
        S5), or keep them until ``clear`` again (None: it is live again). A carrier parked
        after the end expires with the flags.

        The execution repository calls it with every checkpoint that changes the lifetime
        (on Redis storage inside the checkpoint's own script instead).
        """
        ...

    async def clear(self, execution_id: str) -> None:
        """Remove the flags and every parked carrier (the execution was deleted, W13)."""
        ...
