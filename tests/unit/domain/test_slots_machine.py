"""Every slot rule in any order (E1a): acquire, renew, release, a worker's crash, the
sweep and time passing. Invariants: never more than ``limit`` holders and reservations, no
execution with two slots of one table, a crashed holder's slot free once it expired and a
sweep ran, FIFO order kept, no parked carrier lost."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from plaita.domain import slots
from plaita.domain.slots import SlotChange, SlotDecision, SlotTable, Verdict, Waiter

EXECUTIONS = [f"e{i}" for i in range(6)]
HOLD = 100
RESERVE = 300
LIMIT = 2


class SlotMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.table = SlotTable(limit=LIMIT)
        self.fifo: list[Waiter] = []
        self.generation = dict.fromkeys(EXECUTIONS, 1)
        #: Carriers kept by the table (parked), by id: none may vanish unless its
        #: execution came to hold a slot with it.
        self.kept: dict[str, str] = {}
        #: Promoted carriers handed to the queue (they come back as dispatches).
        self.enqueued: list[Waiter] = []
        #: Every append, in order: what FIFO order is checked against.
        self.appended: list[str] = []
        self.crashed: dict[str, int] = {}
        self.ever_promoted: list[Waiter] = []
        self.carriers = 0

    def _write(self, decision: SlotDecision) -> None:
        change: SlotChange = decision.change
        if not decision.changed:
            return
        self.fifo = [w for w in self.fifo if w not in change.take]
        self.fifo[:0] = change.push_front
        if change.append is not None:
            self.fifo.append(change.append)
            self.kept[change.append.carrier_id] = change.append.execution_id
            self.appended.append(change.append.carrier_id)
        for carrier_id in change.forget:
            self.kept.pop(carrier_id, None)
        self.enqueued.extend(decision.promoted)
        self.ever_promoted.extend(decision.promoted)
        new = change.table
        self.table = SlotTable(
            version=self.table.version + 1,
            limit=new.limit,
            holders=new.holders,
            reserved=new.reserved,
            head=tuple(self.fifo[: slots.FIFO_HEAD]),
            waiting=len(self.fifo),
        )

    def _acquire(
        self, execution_id: str, carrier_id: str, parked: bool, *, may_wait: bool = True
    ) -> None:
        decision = slots.acquire(
            self.table,
            execution_id=execution_id,
            carrier_id=carrier_id,
            generation=self.generation[execution_id],
            limit=LIMIT,
            now_ms=self.now,
            hold_ms=HOLD,
            parked=parked,
            may_wait=may_wait,
            reserve_ms=RESERVE,
        )
        if not may_wait:
            assert decision.verdict is not Verdict.WAITING
        if decision.verdict is Verdict.ADMITTED:
            self.crashed.pop(execution_id, None)
        self._write(decision)

    @rule(execution=st.sampled_from(EXECUTIONS), takeover=st.booleans())
    def new_carrier(self, execution: str, takeover: bool) -> None:
        if takeover:
            self.generation[execution] += 1  # its lease was taken over: a new generation
        self.carriers += 1
        self._acquire(execution, f"c{self.carriers}", parked=False)

    @rule(execution=st.sampled_from(EXECUTIONS))
    def cancel_carrier(self, execution: str) -> None:
        self.generation[execution] += 1
        self.carriers += 1
        self._acquire(execution, f"c{self.carriers}", parked=False, may_wait=False)

    @rule(data=st.data())
    def promoted_carrier_arrives(self, data: st.DataObject) -> None:
        if not self.enqueued:
            return
        waiter = self.enqueued.pop(data.draw(st.integers(0, len(self.enqueued) - 1)))
        self.generation[waiter.execution_id] += 1
        self._acquire(waiter.execution_id, waiter.carrier_id, waiter.carrier_id in self.kept)

    @rule(data=st.data())
    def promoted_carrier_never_reaches_the_queue(self, data: st.DataObject) -> None:
        # Its worker died between the release and the enqueue: only the table keeps it.
        if self.enqueued:
            self.enqueued.pop(data.draw(st.integers(0, len(self.enqueued) - 1)))

    @rule(execution=st.sampled_from(EXECUTIONS))
    def renew(self, execution: str) -> None:
        if execution in self.crashed:
            return
        self._write(
            slots.renew(
                self.table,
                execution_id=execution,
                generation=self.generation[execution],
                expires_ms=self.now + HOLD,
            )
        )

    @rule(execution=st.sampled_from(EXECUTIONS), stale=st.booleans())
    def release(self, execution: str, stale: bool) -> None:
        if execution in self.crashed:
            return
        generation = self.generation[execution] - (1 if stale else 0)
        before = self.table.holders.get(execution)
        decision = slots.release(
            self.table,
            execution_id=execution,
            generation=generation,
            now_ms=self.now,
            reserve_ms=RESERVE,
        )
        if stale and before is not None and before.generation != generation:
            assert decision.verdict is Verdict.NOT_HELD
            assert execution in decision.change.table.holders or before.expires_ms <= self.now
        self._write(decision)

    @rule(execution=st.sampled_from(EXECUTIONS))
    def crash(self, execution: str) -> None:
        held = self.table.holders.get(execution)
        if held is not None:
            self.crashed[execution] = held.expires_ms

    @rule()
    def sweep(self) -> None:
        self._write(slots.sweep(self.table, now_ms=self.now, reserve_ms=RESERVE))
        for execution, holder in self.table.holders.items():
            assert holder.expires_ms > self.now, f"{execution}'s expired slot is still held"

    @rule(ms=st.integers(1, 2 * RESERVE))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @invariant()
    def never_more_than_the_limit(self) -> None:
        assert self.table.taken <= LIMIT

    @invariant()
    def never_two_slots_for_one_execution(self) -> None:
        assert not set(self.table.holders) & set(self.table.reserved)

    @invariant()
    def fifo_keeps_append_order(self) -> None:
        # Lapsed reservations go back to the head; the carriers never promoted keep the
        # order they came in.
        promoted = {w.carrier_id for w in self.ever_promoted}
        positions = [
            self.appended.index(w.carrier_id) for w in self.fifo if w.carrier_id not in promoted
        ]
        assert positions == sorted(positions)

    @invariant()
    def no_parked_carrier_is_lost(self) -> None:
        waiting = {w.carrier_id for w in self.fifo}
        reserved = {r.carrier_id for r in self.table.reserved.values()}
        enqueued = {w.carrier_id for w in self.enqueued}
        for carrier_id in self.kept:
            # Kept by the table (waiting or reserved), or on its way through the queue.
            assert carrier_id in waiting or carrier_id in reserved or carrier_id in enqueued

    @invariant()
    def fifo_length_is_known(self) -> None:
        assert self.table.waiting == len(self.fifo)


TestSlotMachine = SlotMachine.TestCase
TestSlotMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
