"""Slot tables (E1a concurrency keys, tenant quotas): one test per rule of
``plaita.domain.slots``, then a state machine over every rule in any order."""

from __future__ import annotations

import pytest

from plaita.domain import slots
from plaita.domain.errors import InvalidConcurrencyError
from plaita.domain.slots import (
    RESERVATION_MS,
    Holder,
    Reservation,
    SlotChange,
    SlotTable,
    Verdict,
    Waiter,
)

HOLD = 1_000


def _apply(
    table: SlotTable, change: SlotChange, fifo: list[Waiter]
) -> tuple[SlotTable, list[Waiter]]:
    """What an adapter does with a change: the FIFO edits, then a fresh snapshot."""
    fifo = [w for w in fifo if w not in change.take]
    fifo[:0] = change.push_front
    if change.append is not None:
        fifo.append(change.append)
    new = change.table
    snapshot = SlotTable(
        version=table.version + 1,
        limit=new.limit,
        holders=new.holders,
        reserved=new.reserved,
        head=tuple(fifo[: slots.FIFO_HEAD]),
        waiting=len(fifo),
    )
    return snapshot, fifo


def _acquire(
    table: SlotTable,
    execution_id: str,
    *,
    generation: int = 1,
    now_ms: int = 0,
    limit: int = 1,
    parked: bool = False,
    carrier: str | None = None,
) -> slots.SlotDecision:
    return slots.acquire(
        table,
        execution_id=execution_id,
        carrier_id=carrier or f"c-{execution_id}",
        generation=generation,
        limit=limit,
        now_ms=now_ms,
        hold_ms=HOLD,
        parked=parked,
    )


def test_an_empty_table_admits_and_records_the_holder() -> None:
    decision = _acquire(SlotTable(), "e1", generation=3, now_ms=10)
    assert decision.verdict is Verdict.ADMITTED
    assert decision.change.table.holders == {"e1": Holder(3, 10 + HOLD, 10)}


def test_a_full_table_makes_the_carrier_wait_once() -> None:
    table = SlotTable(limit=1, holders={"e1": Holder(1, HOLD, 0)})
    decision = _acquire(table, "e2")
    assert decision.verdict is Verdict.WAITING
    assert decision.change.append == Waiter("c-e2", "e2")
    again = _acquire(table, "e2", parked=True)
    assert again.verdict is Verdict.WAITING and again.change.append is None


def test_a_holder_acquiring_again_is_admitted_and_keeps_its_since() -> None:
    table = SlotTable(limit=1, holders={"e1": Holder(1, HOLD, 0)})
    decision = _acquire(table, "e1", generation=2, now_ms=500)
    assert decision.verdict is Verdict.ADMITTED
    assert decision.change.table.holders["e1"] == Holder(2, 500 + HOLD, 0)


def test_an_older_generation_than_the_holders_is_fenced() -> None:
    table = SlotTable(limit=1, holders={"e1": Holder(5, HOLD, 0)})
    assert _acquire(table, "e1", generation=4).verdict is Verdict.FENCED


def test_room_with_waiters_ahead_does_not_admit_a_newcomer() -> None:
    table = SlotTable(
        limit=2, holders={"e1": Holder(1, HOLD, 0)}, head=(Waiter("c-e9", "e9"),), waiting=1
    )
    decision = _acquire(table, "e2", limit=2)
    assert decision.verdict is Verdict.WAITING
    assert decision.promoted == (Waiter("c-e9", "e9"),)  # the one ahead takes the room
    assert decision.change.append == Waiter("c-e2", "e2")


def test_a_reserved_execution_becomes_a_holder_and_its_parked_carrier_is_forgotten() -> None:
    table = SlotTable(limit=1, reserved={"e2": Reservation("c-e2", RESERVATION_MS)})
    decision = _acquire(table, "e2", now_ms=5)
    assert decision.verdict is Verdict.ADMITTED
    assert decision.change.table.reserved == {}
    assert decision.change.forget == ("c-e2",)


def test_release_promotes_the_fifo_head_into_a_reservation() -> None:
    table = SlotTable(
        limit=1, holders={"e1": Holder(1, HOLD, 0)}, head=(Waiter("c-e2", "e2"),), waiting=1
    )
    decision = slots.release(table, execution_id="e1", generation=1, now_ms=10)
    assert decision.verdict is Verdict.RELEASED
    assert decision.promoted == (Waiter("c-e2", "e2"),)
    assert decision.change.table.reserved == {"e2": Reservation("c-e2", 10 + RESERVATION_MS)}
    assert decision.change.take == (Waiter("c-e2", "e2"),)


def test_a_fenced_off_holder_can_neither_renew_nor_release() -> None:
    table = SlotTable(limit=1, holders={"e1": Holder(2, HOLD, 0)})
    assert (
        slots.renew(table, execution_id="e1", generation=1, expires_ms=5 * HOLD).verdict
        is Verdict.NOT_HELD
    )
    released = slots.release(table, execution_id="e1", generation=1, now_ms=0)
    assert released.verdict is Verdict.NOT_HELD
    assert released.change.table.holders == table.holders


def test_renew_moves_the_expiry_forward_only() -> None:
    table = SlotTable(limit=1, holders={"e1": Holder(1, HOLD, 0)})
    later = slots.renew(table, execution_id="e1", generation=1, expires_ms=3 * HOLD)
    assert later.change.table.holders["e1"].expires_ms == 3 * HOLD
    earlier = slots.renew(table, execution_id="e1", generation=1, expires_ms=HOLD // 2)
    assert earlier.verdict is Verdict.RENEWED and not earlier.changed


def test_sweep_frees_an_expired_holder_and_promotes() -> None:
    table = SlotTable(
        limit=1, holders={"e1": Holder(1, HOLD, 0)}, head=(Waiter("c-e2", "e2"),), waiting=1
    )
    decision = slots.sweep(table, now_ms=HOLD)
    assert decision.change.table.holders == {}
    assert decision.promoted == (Waiter("c-e2", "e2"),)


def test_sweep_puts_a_lapsed_reservation_back_at_the_fifo_head() -> None:
    table = SlotTable(
        limit=1,
        holders={"e1": Holder(1, 10 * RESERVATION_MS, 0)},
        reserved={},
        head=(Waiter("c-e3", "e3"),),
        waiting=1,
    )
    lapsed = SlotTable(
        limit=2,
        holders=table.holders,
        reserved={"e2": Reservation("c-e2", 5)},
        head=table.head,
        waiting=1,
    )
    decision = slots.sweep(attrs_limit(lapsed, 1), now_ms=5)
    assert decision.change.push_front == (Waiter("c-e2", "e2"),)
    assert decision.change.table.reserved == {}
    assert decision.change.table.head[0] == Waiter("c-e2", "e2")


def attrs_limit(table: SlotTable, limit: int) -> SlotTable:
    import attrs

    return attrs.evolve(table, limit=limit)


def test_a_waiter_whose_execution_already_holds_is_passed_over_not_promoted() -> None:
    table = SlotTable(
        limit=2,
        holders={"e1": Holder(1, HOLD, 0)},
        head=(Waiter("c-e1b", "e1"), Waiter("c-e2", "e2")),
        waiting=2,
    )
    decision = slots.sweep(table, now_ms=0)
    assert decision.promoted == (Waiter("c-e2", "e2"),)
    assert decision.change.table.head == (Waiter("c-e1b", "e1"),)


@pytest.mark.parametrize("limit", [0, -1, 10_001, True, 1.5, "2", None])
def test_a_bad_limit_is_a_named_error(limit: object) -> None:
    with pytest.raises(InvalidConcurrencyError, match="limit must be an integer from 1 to 10000"):
        slots.check_limit(limit, where="flow 'f' concurrency")


@pytest.mark.parametrize(
    ("value", "name"),
    [("acme", "acme"), (7, "7"), ({"b": 1, "a": [1, 2]}, '{"a":[1,2],"b":1}'), (None, "null")],
)
def test_a_key_value_becomes_a_string(value: object, name: str) -> None:
    assert slots.key_value(value) == name


def test_a_carrier_that_may_not_wait_passes_a_full_table_without_changing_it() -> None:
    table = SlotTable(limit=1, holders={"e1": Holder(1, HOLD, 0)})
    decision = slots.acquire(
        table,
        execution_id="e2",
        carrier_id="c-e2",
        generation=1,
        limit=1,
        now_ms=0,
        hold_ms=HOLD,
        parked=False,
        may_wait=False,
    )
    assert (decision.verdict, decision.changed) == (Verdict.PASSED, False)


def test_a_carrier_that_may_not_wait_still_takes_room_or_keeps_its_holders_slot() -> None:
    held = SlotTable(limit=1, holders={"e1": Holder(1, HOLD, 0)})
    again = slots.acquire(
        held,
        execution_id="e1",
        carrier_id="cancel",
        generation=2,
        limit=1,
        now_ms=0,
        hold_ms=HOLD,
        parked=False,
        may_wait=False,
    )
    assert again.verdict is Verdict.ADMITTED
    room = slots.acquire(
        SlotTable(),
        execution_id="e1",
        carrier_id="cancel",
        generation=1,
        limit=1,
        now_ms=0,
        hold_ms=HOLD,
        parked=False,
        may_wait=False,
    )
    assert room.verdict is Verdict.ADMITTED


def test_a_table_id_round_trips_and_names_itself() -> None:
    table = slots.SlotTableId.concurrency("orders", 'a"}{b')
    assert slots.SlotTableId.decode(table.encode()) == table
    assert len(table.digest) == 16 and table.digest != slots.SlotTableId.quota().digest
    assert table.describe() == "flow 'orders' concurrency key 'a\"}{b'"
    assert slots.SlotTableId.quota().describe() == "the tenant's quota"


def test_a_snapshot_encodes_and_decodes_its_holders_and_reservations() -> None:
    table = SlotTable(
        limit=2,
        holders={"e1": Holder(3, 10, 1)},
        reserved={"e2": Reservation("c-e2", 20)},
    )
    assert SlotTable.decode_holders(table.encode_holders()) == table.holders
    assert SlotTable.decode_reserved(table.encode_reserved()) == table.reserved
    assert SlotTable.decode_holders(None) == {} and SlotTable.decode_reserved("") == {}
    assert table.holds("e1") and not table.holds("e2")
    assert not table.idle and SlotTable().idle
    assert Waiter.decode(Waiter("c 1", "x").encode()) != Waiter("c 1", "x")  # ids hold no space
    assert Waiter.decode(Waiter("c-1", "x y").encode()) == Waiter("c-1", "x y")


def test_renewing_a_slot_that_is_not_held_changes_nothing() -> None:
    decision = slots.renew(SlotTable(limit=1), execution_id="e1", generation=1, expires_ms=5)
    assert (decision.verdict, decision.changed) == (Verdict.NOT_HELD, False)


def test_a_waiting_carrier_of_a_reserved_execution_leaves_the_fifo_when_it_runs() -> None:
    """Its execution was promoted on another carrier; this one arrives first and holds."""
    table = SlotTable(
        limit=1,
        reserved={"e2": Reservation("c-first", RESERVATION_MS)},
        head=(Waiter("c-second", "e2"), Waiter("c-e3", "e3")),
        waiting=2,
    )
    decision = _acquire(table, "e2", carrier="c-second", parked=True)
    assert decision.verdict is Verdict.ADMITTED
    assert decision.change.take == (Waiter("c-second", "e2"),)
    assert decision.change.forget == ("c-second",)
    # The promoted carrier may never have reached the queue: it waits again (I0).
    assert decision.change.push_front == (Waiter("c-first", "e2"),)
    assert decision.change.table.head == (Waiter("c-first", "e2"), Waiter("c-e3", "e3"))
    assert decision.change.table.waiting == 2
