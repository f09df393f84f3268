"""Slot tables: at most ``limit`` executions run at once per table (E1a concurrency, tenant
quotas). Every rule of a table lives here, as total functions over a snapshot.

A table has holders (execution id → the lease generation that took the slot, when the slot
expires, since when it is held), reservations (execution id → the promoted carrier and when
the reservation lapses) and a FIFO of waiting carriers, of which a snapshot holds the head.
Holders and reservations together never exceed the limit; an execution never holds two
slots of one table; an expired holder (its worker died: nobody renewed it) frees its slot;
an expired reservation (its promoted carrier was not dispatched in time, or never
enqueued) goes back to the head of the FIFO, so no waiting carrier is ever lost.

Adapters read a ``SlotTable``, ask these functions, and write the returned ``SlotChange``
with a compare-and-set on the table's version; they decide nothing themselves.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.domain.errors import InvalidConcurrencyError

#: The largest limit a concurrency key or a tenant quota may have.
MAX_SLOT_LIMIT = 10_000
#: How many of the FIFO's head entries a snapshot holds: a change promotes at most that many.
FIFO_HEAD = 32
#: How long a promoted carrier's reservation lasts before it goes back to the FIFO head:
#: the carrier must be dispatched by then (a longer queue gets it enqueued again).
RESERVATION_MS = 300_000


class TableKind(enum.StrEnum):
    CONCURRENCY = "concurrency"
    QUOTA = "quota"


@attrs.frozen
class SlotTableId:
    """Which table, within the current tenant: a flow's concurrency key, or the tenant's
    quota (``flow_id`` and ``key`` None)."""

    kind: TableKind
    flow_id: str | None = None
    key: str | None = None

    @classmethod
    def concurrency(cls, flow_id: str, key: str) -> SlotTableId:
        return cls(TableKind.CONCURRENCY, flow_id, key)

    @classmethod
    def quota(cls) -> SlotTableId:
        return cls(TableKind.QUOTA)

    def encode(self) -> str:
        return json.dumps([self.kind.value, self.flow_id, self.key], separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> SlotTableId:
        kind, flow_id, key = json.loads(text)
        return cls(TableKind(kind), flow_id, key)

    @property
    def digest(self) -> str:
        """A short name safe in any key, whatever the key value holds."""
        return hashlib.sha1(self.encode().encode(), usedforsecurity=False).hexdigest()[:16]

    def describe(self) -> str:
        if self.kind is TableKind.QUOTA:
            return "the tenant's quota"
        return f"flow {self.flow_id!r} concurrency key {self.key!r}"


@attrs.frozen
class Holder:
    generation: int
    expires_ms: int
    since_ms: int


@attrs.frozen
class Reservation:
    carrier_id: str
    expires_ms: int


@attrs.frozen
class Waiter:
    """One FIFO entry: a parked carrier and its execution."""

    carrier_id: str
    execution_id: str

    def encode(self) -> str:
        return f"{self.carrier_id} {self.execution_id}"

    @classmethod
    def decode(cls, text: str) -> Waiter:
        carrier_id, _, execution_id = text.partition(" ")
        return cls(carrier_id, execution_id)


def _frozen_map(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return dict(value)


@attrs.frozen
class SlotTable:
    """A snapshot of one table: ``version`` is what a compare-and-set checks."""

    version: int = 0
    limit: int | None = None
    holders: Mapping[str, Holder] = attrs.field(factory=dict, converter=_frozen_map)
    reserved: Mapping[str, Reservation] = attrs.field(factory=dict, converter=_frozen_map)
    #: The first entries of the FIFO (at most ``FIFO_HEAD``), head first.
    head: tuple[Waiter, ...] = ()
    #: The FIFO's whole length.
    waiting: int = 0

    @property
    def taken(self) -> int:
        return len(self.holders) + len(self.reserved)

    @property
    def idle(self) -> bool:
        return not self.holders and not self.reserved and self.waiting == 0

    def holds(self, execution_id: str) -> bool:
        return execution_id in self.holders

    def encode_holders(self) -> str:
        return json.dumps(
            {e: [h.generation, h.expires_ms, h.since_ms] for e, h in self.holders.items()},
            sort_keys=True,
            separators=(",", ":"),
        )

    def encode_reserved(self) -> str:
        return json.dumps(
            {e: [r.carrier_id, r.expires_ms] for e, r in self.reserved.items()},
            sort_keys=True,
            separators=(",", ":"),
        )

    @staticmethod
    def decode_holders(text: str | None) -> dict[str, Holder]:
        raw = json.loads(text) if text else {}
        return {e: Holder(int(g), int(x), int(s)) for e, (g, x, s) in raw.items()}

    @staticmethod
    def decode_reserved(text: str | None) -> dict[str, Reservation]:
        raw = json.loads(text) if text else {}
        return {e: Reservation(str(c), int(x)) for e, (c, x) in raw.items()}


@attrs.frozen
class SlotChange:
    """What to write: the table's new holders, reservations and limit, and the FIFO edits.

    ``take`` leave the FIFO (they are ``promoted``: enqueue them after the write);
    ``push_front`` go back to its head, in order; ``append`` joins its tail (its envelope is
    parked with it); ``forget`` are parked envelopes no longer needed (their carrier holds).
    """

    table: SlotTable
    take: tuple[Waiter, ...] = ()
    push_front: tuple[Waiter, ...] = ()
    append: Waiter | None = None
    forget: tuple[str, ...] = ()


class Verdict(enum.StrEnum):
    #: The execution holds a slot (it did already, or was reserved one, or there was room).
    ADMITTED = "admitted"
    #: No room, or others wait ahead: the carrier waits in the FIFO.
    WAITING = "waiting"
    #: The caller's lease generation is older than the holder's: it was fenced off.
    FENCED = "fenced"
    #: No room, and the carrier may not wait (a cancel): it goes on without a slot.
    PASSED = "passed"
    RENEWED = "renewed"
    RELEASED = "released"
    #: Not held (any more) by this generation: nothing to renew or release.
    NOT_HELD = "not_held"
    SWEPT = "swept"


@attrs.frozen
class SlotDecision:
    verdict: Verdict
    change: SlotChange
    #: Whether anything must be written (a no-op decision needs no compare-and-set).
    changed: bool = True
    #: The carriers promoted by this change, to enqueue once it is written.
    promoted: tuple[Waiter, ...] = ()
    #: The execution was admitted on a reservation: it had waited its turn.
    waited: bool = False


def check_limit(value: object, *, where: str) -> int:
    """A limit is an integer from 1 to ``MAX_SLOT_LIMIT``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SLOT_LIMIT:
        raise InvalidConcurrencyError(
            f"{where}: limit must be an integer from 1 to {MAX_SLOT_LIMIT}, got {value!r}; "
            "give how many executions may run at once"
        )
    return value


def key_value(value: object) -> str:
    """A concurrency key's value as the table's name: a string as is, other JSON canonical."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --- the decisions -------------------------------------------------------------------


@attrs.define
class _Work:
    """A table being changed by one decision (local to this module)."""

    table: SlotTable
    limit: int
    holders: dict[str, Holder]
    reserved: dict[str, Reservation]
    candidates: list[Waiter]
    returned: list[Waiter]
    forget: list[str] = attrs.field(factory=list)
    append: Waiter | None = None
    #: FIFO entries taken out without a promotion (their carrier runs already).
    dropped: list[Waiter] = attrs.field(factory=list)

    @classmethod
    def of(cls, table: SlotTable, limit: int, now_ms: int) -> _Work:
        holders = {e: h for e, h in table.holders.items() if h.expires_ms > now_ms}
        lapsed = sorted(
            ((r.expires_ms, r.carrier_id, e) for e, r in table.reserved.items()),
        )
        reserved = {e: r for e, r in table.reserved.items() if r.expires_ms > now_ms}
        returned = [Waiter(c, e) for x, c, e in lapsed if x <= now_ms]
        return cls(table, limit, holders, reserved, [*returned, *table.head], returned)

    def drop(self, waiter: Waiter) -> None:
        self.dropped.append(waiter)
        self.forget.append(waiter.carrier_id)
        self.candidates = [w for w in self.candidates if w != waiter]

    def occupies(self, execution_id: str) -> bool:
        return execution_id in self.holders or execution_id in self.reserved

    def room(self) -> bool:
        return len(self.holders) + len(self.reserved) < self.limit

    def promote(self, now_ms: int, reserve_ms: int) -> tuple[Waiter, ...]:
        """Reserve free slots for the first waiters whose execution occupies none."""
        promoted: list[Waiter] = []
        for waiter in self.candidates:
            if not self.room():
                break
            if self.occupies(waiter.execution_id):
                continue  # it runs already: this carrier waits for its release
            self.reserved[waiter.execution_id] = Reservation(waiter.carrier_id, now_ms + reserve_ms)
            promoted.append(waiter)
        return tuple(promoted)

    def decide(
        self, verdict: Verdict, promoted: tuple[Waiter, ...], *, waited: bool = False
    ) -> SlotDecision:
        taken = {w.carrier_id for w in promoted}
        front = tuple(w for w in self.returned if w.carrier_id not in taken)
        # A dropped entry was never a candidate, so never promoted: it leaves on its own.
        take = (*(w for w in self.table.head if w.carrier_id in taken), *self.dropped)
        taken |= {w.carrier_id for w in self.dropped}
        table = attrs.evolve(
            self.table,
            limit=self.limit,
            holders=self.holders,
            reserved=self.reserved,
            head=(*front, *(w for w in self.table.head if w.carrier_id not in taken)),
            waiting=self.table.waiting
            - len(take)
            + len(front)
            + (1 if self.append is not None else 0),
        )
        change = SlotChange(
            table=table,
            take=take,
            push_front=front,
            append=self.append,
            forget=tuple(self.forget),
        )
        changed = (
            table.holders != self.table.holders
            or table.reserved != self.table.reserved
            or table.limit != self.table.limit
            or bool(take or front or self.append or self.forget)
        )
        return SlotDecision(verdict, change, changed=changed, promoted=promoted, waited=waited)


def acquire(
    table: SlotTable,
    *,
    execution_id: str,
    carrier_id: str,
    generation: int,
    limit: int,
    now_ms: int,
    hold_ms: int,
    parked: bool,
    may_wait: bool = True,
    reserve_ms: int = RESERVATION_MS,
) -> SlotDecision:
    """Take a slot for ``execution_id`` under lease ``generation``, or make its carrier wait.

    ``parked``: the carrier is already kept by the table (a redelivery of a carrier that
    waits), so it is not appended twice. ``may_wait`` False (a cancel): without room the
    carrier passes, holding nothing and changing nothing.
    """
    work = _Work.of(table, limit, now_ms)
    held = work.holders.get(execution_id)
    if held is not None and generation < held.generation:
        return SlotDecision(Verdict.FENCED, SlotChange(table), changed=False)
    verdict = Verdict.ADMITTED
    waited = False
    if held is not None:
        expires = max(held.expires_ms, now_ms + hold_ms)
        work.holders[execution_id] = Holder(generation, expires, held.since_ms)
    elif execution_id in work.reserved:
        reservation = work.reserved.pop(execution_id)
        if carrier_id == reservation.carrier_id:
            work.forget.append(carrier_id)
        else:
            # Another of its carriers came first. The promoted one may never have reached
            # the queue (its worker died): it waits again, at the head, so it is not lost.
            work.returned.append(Waiter(reservation.carrier_id, execution_id))
            if parked:  # this carrier waited in the FIFO too, and runs now
                work.drop(Waiter(carrier_id, execution_id))
        work.holders[execution_id] = Holder(generation, now_ms + hold_ms, now_ms)
        waited = True
    elif work.room() and not work.candidates and table.waiting == 0 and not parked:
        work.holders[execution_id] = Holder(generation, now_ms + hold_ms, now_ms)
    elif not may_wait:
        return SlotDecision(Verdict.PASSED, SlotChange(table), changed=False)
    else:
        verdict = Verdict.WAITING
        if not parked:
            work.append = Waiter(carrier_id, execution_id)
    # A parked carrier's redelivery may be promoted here: its parked copy is enqueued.
    return work.decide(verdict, work.promote(now_ms, reserve_ms), waited=waited)


def renew(table: SlotTable, *, execution_id: str, generation: int, expires_ms: int) -> SlotDecision:
    """Move the holder's expiry to ``expires_ms`` (never back); only its own generation."""
    held = table.holders.get(execution_id)
    if held is None or held.generation != generation:
        return SlotDecision(Verdict.NOT_HELD, SlotChange(table), changed=False)
    if held.expires_ms >= expires_ms:
        return SlotDecision(Verdict.RENEWED, SlotChange(table), changed=False)
    holders = {**table.holders, execution_id: attrs.evolve(held, expires_ms=expires_ms)}
    return SlotDecision(Verdict.RENEWED, SlotChange(attrs.evolve(table, holders=holders)))


def release(
    table: SlotTable,
    *,
    execution_id: str,
    generation: int,
    now_ms: int,
    reserve_ms: int = RESERVATION_MS,
) -> SlotDecision:
    """Drop the holder (only its own generation), then promote waiters into the room."""
    work = _Work.of(table, table.limit or 1, now_ms)
    held = table.holders.get(execution_id)
    verdict = Verdict.NOT_HELD
    if held is not None and held.generation == generation:
        work.holders.pop(execution_id, None)
        verdict = Verdict.RELEASED
    return work.decide(verdict, work.promote(now_ms, reserve_ms))


def sweep(table: SlotTable, *, now_ms: int, reserve_ms: int = RESERVATION_MS) -> SlotDecision:
    """Drop expired holders, put lapsed reservations back at the head, promote into room."""
    work = _Work.of(table, table.limit or 1, now_ms)
    return work.decide(Verdict.SWEPT, work.promote(now_ms, reserve_ms))
