"""The dispatch's slots (E1a concurrency keys, tenant quotas; W2, W8, I0; ADR 0030).

Under the lease, after the checkpoint read and before the attempt is counted, the step takes
a slot of the tenant's quota table, then of the flow's concurrency-key table. No room → the
carrier is kept in the table's FIFO (written before the ack, I0), the quota slot is given
back, and the dispatch ends normally: no attempt is burnt (W2). A held slot is renewed with
the lease, kept while a retry or a hand-over is scheduled, and released after the lease once
the execution suspends or ends; the carriers that release promotes are enqueued after it
(W8). Every rule is ``plaita.domain.slots``'s; each table write is a compare-and-set retried
a bounded number of times.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs

from plaita.application.codec import encode_envelope
from plaita.application.engine.expressions import ExpressionEvaluationError, concurrency_key
from plaita.application.keyed_locks import KeyedLocks
from plaita.application.ports import Clock, SlotRead, SlotTables, WaitingNotes
from plaita.application.tenancy import current_tenant
from plaita.application.use_cases.step.dispatch import DispatchResult, Disposition
from plaita.domain import slots as rules
from plaita.domain.envelope import TaskEnvelope, copy_envelope
from plaita.domain.errors import ConcurrencyKeyError
from plaita.domain.execution import ExecutionState
from plaita.domain.flow import Flow
from plaita.domain.flow_control import Waiting, WaitReason
from plaita.domain.lease import Lease
from plaita.domain.operator_controls import carrier_parkable, parked_carrier_id
from plaita.domain.slots import SlotDecision, SlotTable, SlotTableId, TableKind, Verdict
from plaita.domain.tombstone import copy_timestamp_ms

log = logging.getLogger("plaita.worker.step")

#: How often a table write is tried when other writers keep winning the compare-and-set.
MAX_WRITE_ATTEMPTS = 5
#: The outcomes of a carrier that waits for a slot.
CONCURRENCY_WAIT = "concurrency_wait"
QUOTA_WAIT = "quota_wait"
SLOT_CONTENDED = "slot_contended"
#: How many holders a waiting note names.
MAX_NOTED_HOLDERS = 10


@attrs.frozen
class HeldSlots:
    """The slots one dispatch holds, under its lease's generation."""

    execution_id: str = ""
    generation: int = 0
    tables: tuple[SlotTableId, ...] = ()


NO_SLOTS = HeldSlots()


@attrs.frozen
class SlotAdmission:
    """The slot stage's answer: the slots held, or the result of a carrier that waits."""

    held: HeldSlots = NO_SLOTS
    waited: DispatchResult | None = None
    #: Carriers promoted meanwhile (a sweep inside the take): enqueued after the lease.
    promoted: tuple[TaskEnvelope, ...] = ()
    #: The flow's concurrency key failed on the input: the execution ends in this error.
    failed: ConcurrencyKeyError | None = None


class _LostRaces(Exception):
    """Other writers won the compare-and-set ``MAX_WRITE_ATTEMPTS`` times."""


@attrs.frozen
class _Written:
    decision: SlotDecision
    promoted: tuple[TaskEnvelope, ...]


class SlotGate:
    def __init__(
        self, *, slots: SlotTables, waiting: WaitingNotes, clock: Clock, hold_ms: int
    ) -> None:
        self._slots = slots
        self._waiting = waiting
        self._clock = clock
        # The dispatches of this process change a table one at a time: all reading it in the
        # same tick would all but one lose the compare-and-set, again and again (a hot key).
        self._locks = KeyedLocks()
        #: How long a slot outlives its last renewal: the lease's TTL.
        self._hold_ms = hold_ms

    def tables(
        self,
        flow: Flow | None,
        state: ExecutionState | None,
        envelope: TaskEnvelope,
        *,
        quota: int | None,
    ) -> list[tuple[SlotTableId, int]]:
        """The tables this carrier's execution takes a slot of, quota first, with limits;
        ``ExpressionEvaluationError`` when the concurrency key fails on the input."""
        wanted: list[tuple[SlotTableId, int]] = []
        if quota is not None:
            wanted.append((SlotTableId.quota(), quota))
        if flow is not None and flow.document.concurrency is not None:
            execution_input = state.input if state is not None else envelope.params
            key = concurrency_key(flow, execution_input)
            assert key is not None
            limit = rules.check_limit(flow.document.concurrency.limit, where=flow.flow_id)
            wanted.append((SlotTableId.concurrency(flow.flow_id, key), limit))
        return wanted

    async def take(
        self,
        envelope: TaskEnvelope,
        lease: Lease,
        flow: Flow | None,
        state: ExecutionState | None,
        *,
        message_id: str | None,
        quota: int | None,
    ) -> SlotAdmission:
        """Take every slot this execution needs, or keep the carrier in the FIFO of the
        first table without room (giving back those taken)."""
        if state is not None and state.status.is_terminal:
            return SlotAdmission()  # an ended execution runs nothing
        try:
            wanted = self.tables(flow, state, envelope, quota=quota)
        except ExpressionEvaluationError as exc:
            assert flow is not None
            return SlotAdmission(failed=_key_failed(flow, envelope, exc))
        if not wanted:
            return SlotAdmission()
        kept = _kept(envelope, message_id, self._clock.now_ms())
        carrier_id = parked_carrier_id(encode_envelope(kept))
        held: list[SlotTableId] = []
        promoted: list[TaskEnvelope] = []
        waited = False
        try:
            for table, limit in wanted:
                written = await self._acquire(table, limit, lease, kept, carrier_id)
                promoted.extend(written.promoted)
                waited = waited or written.decision.waited
                verdict = written.decision.verdict
                if verdict is Verdict.ADMITTED:
                    held.append(table)
                    continue
                if verdict is Verdict.PASSED:
                    continue  # a cancel: it runs without a slot, and never waits for one
                given_back = await self._give_back(lease, held)
                if verdict is Verdict.FENCED:
                    return SlotAdmission(waited=_fenced(lease, table), promoted=given_back)
                return SlotAdmission(
                    waited=await self._waited(table, written.decision, envelope, limit),
                    promoted=(*promoted, *given_back),
                )
        except _LostRaces:
            given_back = await self._give_back(lease, held)
            result = DispatchResult(
                Disposition.LEAVE_PENDING,
                SLOT_CONTENDED,
                f"other workers kept changing the slot table {MAX_WRITE_ATTEMPTS} times",
                enqueue=given_back,
            )
            return SlotAdmission(waited=result)
        if waited:
            await self._forget_note(lease.execution_id)
        return SlotAdmission(
            HeldSlots(lease.execution_id, lease.generation, tuple(held)), promoted=tuple(promoted)
        )

    async def renew(self, held: HeldSlots, *, expires_ms: int) -> bool:
        """Move the held slots' expiry to ``expires_ms``; False when one is not ours."""
        ours = True
        for table in held.tables:
            written = await self._change(
                table,
                lambda read, _now_ms: rules.renew(
                    read.table,
                    execution_id=held.execution_id,
                    generation=held.generation,
                    expires_ms=expires_ms,
                ),
            )
            ours = ours and written.decision.verdict is Verdict.RENEWED
        return ours

    async def let_go(self, held: HeldSlots, result: DispatchResult) -> tuple[TaskEnvelope, ...]:
        """After the lease's release: keep the slots while the execution runs on (a retry
        or hand-over carrier is out), else release them; the carriers to enqueue next."""
        if not held.tables or result.disposition is Disposition.LEAVE_PENDING:
            return ()  # left pending: they expire with the lease, or its redelivery takes them
        try:
            if result.continues:
                due_ms = max((due for _, due in result.schedule), default=self._clock.now_ms())
                await self.renew(held, expires_ms=due_ms + self._hold_ms)
                return ()
            return await self._release(held)
        except Exception as exc:  # the slots expire on their own; the sweep promotes then
            log.warning(
                "event=slots.release_failed execution_id=%s error=%r: its slots are freed "
                "when they expire (at most the lease TTL)",
                held.execution_id,
                exc,
            )
            return ()

    async def sweep(self, table: SlotTableId) -> tuple[TaskEnvelope, ...]:
        """Free expired slots of ``table`` and promote waiters into the room; nothing when
        the dispatches kept changing it meanwhile (they free and promote as they go)."""
        try:
            written = await self._change(
                table, lambda read, now_ms: rules.sweep(read.table, now_ms=now_ms)
            )
        except _LostRaces:
            return ()
        return written.promoted

    # --- one level down ----------------------------------------------------------------

    async def _acquire(
        self, table: SlotTableId, limit: int, lease: Lease, kept: TaskEnvelope, carrier_id: str
    ) -> _Written:
        return await self._change(
            table,
            lambda read, now_ms: rules.acquire(
                read.table,
                execution_id=lease.execution_id,
                carrier_id=carrier_id,
                generation=lease.generation,
                limit=limit,
                now_ms=now_ms,
                hold_ms=self._hold_ms,
                parked=read.carrier_parked,
                # A cancel never waits: cancelling must work whatever the limits (W23).
                may_wait=carrier_parkable(kept),
            ),
            carrier=(carrier_id, kept),
        )

    async def _release(self, held: HeldSlots) -> tuple[TaskEnvelope, ...]:
        promoted: list[TaskEnvelope] = []
        for table in reversed(held.tables):
            written = await self._change(
                table,
                lambda read, now_ms: rules.release(
                    read.table,
                    execution_id=held.execution_id,
                    generation=held.generation,
                    now_ms=now_ms,
                ),
            )
            promoted.extend(written.promoted)
        return tuple(promoted)

    async def _give_back(
        self, lease: Lease, taken: Sequence[SlotTableId]
    ) -> tuple[TaskEnvelope, ...]:
        if not taken:
            return ()
        held = HeldSlots(lease.execution_id, lease.generation, tuple(taken))
        try:
            return await self._release(held)
        except Exception as exc:
            log.warning(
                "event=slots.give_back_failed execution_id=%s error=%r: the slot taken is "
                "freed when it expires (at most the lease TTL)",
                lease.execution_id,
                exc,
            )
            return ()

    async def _change(
        self,
        table: SlotTableId,
        decide: Callable[[SlotRead, int], SlotDecision],
        *,
        carrier: tuple[str, TaskEnvelope] | None = None,
    ) -> _Written:
        """Read, decide, compare-and-set; again on a lost race, at most
        ``MAX_WRITE_ATTEMPTS`` times. The promoted carriers' envelopes are read after the
        write (they stay parked until their execution holds)."""
        carrier_id = None if carrier is None else carrier[0]
        async with self._locks.hold(f"{current_tenant()} {table.encode()}"):
            return await self._change_held(table, decide, carrier_id, carrier)

    async def _change_held(
        self,
        table: SlotTableId,
        decide: Callable[[SlotRead, int], SlotDecision],
        carrier_id: str | None,
        carrier: tuple[str, TaskEnvelope] | None,
    ) -> _Written:
        for _ in range(MAX_WRITE_ATTEMPTS):
            read = await self._slots.read(table, carrier_id=carrier_id)
            decision = decide(read, self._clock.now_ms())
            if not decision.changed:
                return _Written(decision, ())
            appended = None
            if carrier is not None and decision.change.append is not None:
                appended = carrier[1]
            written = await self._slots.write(
                table,
                decision.change,
                version=read.table.version,
                appended=appended,
                now_ms=self._clock.now_ms(),
            )
            if written:
                return _Written(decision, await self._promoted(table, decision))
        raise _LostRaces

    async def _promoted(
        self, table: SlotTableId, decision: SlotDecision
    ) -> tuple[TaskEnvelope, ...]:
        if not decision.promoted:
            return ()
        ids = [waiter.carrier_id for waiter in decision.promoted]
        envelopes = await self._slots.parked(table, ids)
        return tuple(envelopes[carrier_id] for carrier_id in ids if carrier_id in envelopes)

    async def _waited(
        self, table: SlotTableId, decision: SlotDecision, envelope: TaskEnvelope, limit: int
    ) -> DispatchResult:
        snapshot: SlotTable = decision.change.table
        holders = ", ".join(sorted(snapshot.holders)[:5]) or "none"
        quota = table.kind is TableKind.QUOTA
        outcome = QUOTA_WAIT if quota else CONCURRENCY_WAIT
        reason = WaitReason.TENANT_QUOTA if quota else WaitReason.CONCURRENCY
        note = Waiting(
            reason=reason,
            since_ms=self._clock.now_ms(),
            detail=f"{table.describe()} has {limit} running; it runs when one of them "
            "suspends or ends",
            key=envelope.tenant_id if quota else table.key,
            holders=tuple(sorted(snapshot.holders)[:MAX_NOTED_HOLDERS]),
            limit=limit,
        )
        try:
            await self._waiting.note(envelope.execution_id, note)
        except Exception as exc:  # the note only shows why; the carrier is kept already
            log.warning(
                "event=slots.note_failed execution_id=%s error=%r: the console will not say "
                "why it waits; it runs when a slot frees all the same",
                envelope.execution_id,
                exc,
            )
        log.info(
            "event=slots.waiting execution_id=%s table=%s limit=%d holders=%s waiting=%d: "
            "the carrier waits its turn and runs when a slot frees",
            envelope.execution_id,
            table.describe(),
            limit,
            holders,
            snapshot.waiting,
        )
        return DispatchResult(
            Disposition.ACK,
            outcome,
            f"{table.describe()} has {limit} running (held by {holders}); "
            f"{snapshot.waiting} waiting",
            waited=reason,
        )

    async def _forget_note(self, execution_id: str) -> None:
        """It waited and holds its slots now: the note would only mislead."""
        try:
            await self._waiting.clear(execution_id)
        except Exception as exc:
            log.warning(
                "event=slots.note_clear_failed execution_id=%s error=%r: the console may still "
                "say it waits until the note expires",
                execution_id,
                exc,
            )


def _fenced(lease: Lease, table: SlotTableId) -> DispatchResult:
    """A newer lease of the execution holds the slot: this dispatch was fenced off (W4)."""
    return DispatchResult(
        Disposition.LEAVE_PENDING,
        "fenced",
        f"{table.describe()} is held by a newer lease of execution {lease.execution_id} "
        f"than generation {lease.generation}",
    )


def _key_failed(
    flow: Flow, envelope: TaskEnvelope, exc: ExpressionEvaluationError
) -> ConcurrencyKeyError:
    error = ConcurrencyKeyError(
        f"flow {flow.flow_id!r} concurrency key failed on execution "
        f"{envelope.execution_id}'s input: {exc}; fix the key or the input and start it again"
    )
    log.warning(
        "event=slots.key_failed execution_id=%s error=%s: the execution ends in error",
        envelope.execution_id,
        error,
    )
    return error


def _kept(envelope: TaskEnvelope, message_id: str | None, now_ms: int) -> TaskEnvelope:
    """The carrier as the table keeps it: with its source's age, its stream id's time too."""
    stamp = copy_timestamp_ms(
        now_ms=now_ms, payload_timestamp_ms=envelope.timestamp_ms, stream_id=message_id
    )
    return envelope if stamp is None else copy_envelope(envelope, timestamp_ms=stamp)
