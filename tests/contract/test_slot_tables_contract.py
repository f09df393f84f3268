"""SlotTables contract (E1a concurrency keys, tenant quotas), run against memory, fakeredis
(bytes and str) and the real Redis, single node and cluster.

A table read before it exists, a compare-and-set that refuses a stale version, the FIFO's
edits in order, parked envelopes kept until forgotten, any key value safe in one hash slot,
tenants kept apart (W24), and the sweeper's listing with its conditional unlisting.
"""

from __future__ import annotations

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.slot_tables import MemorySlotTables
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.slot_tables import IDLE_TABLE_TTL_MS, RedisSlotTables
from plaita.application.ports import SlotTables
from plaita.application.tenancy import tenant_scope
from plaita.domain import slots
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.slots import Holder, SlotChange, SlotTable, SlotTableId, Verdict, Waiter

NOW_MS = 1_760_000_000_000
TABLE = SlotTableId.concurrency("orders", "acme")


def start(execution_id: str) -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="orders",
        version="1",
        params={"customer": "acme"},
        now_ms=NOW_MS,
        generations=LEGACY_GENERATIONS,
    )


async def acquire(
    tables: SlotTables, table: SlotTableId, execution_id: str, *, limit: int = 1
) -> tuple[Verdict, bool]:
    envelope = start(execution_id)
    carrier_id = f"c-{execution_id}"
    read = await tables.read(table, carrier_id=carrier_id)
    decision = slots.acquire(
        read.table,
        execution_id=execution_id,
        carrier_id=carrier_id,
        generation=1,
        limit=limit,
        now_ms=NOW_MS,
        hold_ms=1_000,
        parked=read.carrier_parked,
    )
    written = await tables.write(
        table,
        decision.change,
        version=read.table.version,
        appended=envelope if decision.change.append is not None else None,
        now_ms=NOW_MS,
    )
    return decision.verdict, written


class SlotTablesContract:
    @pytest.fixture
    def tables(self) -> SlotTables:
        raise NotImplementedError

    @pytest.fixture(autouse=True)
    def _tenant(self) -> object:
        with tenant_scope("default"):
            yield

    async def test_a_table_never_written_is_empty_at_version_zero(self, tables: SlotTables) -> None:
        read = await tables.read(TABLE, carrier_id="c-1")
        assert read.table == SlotTable()
        assert read.carrier_parked is False
        assert await tables.parked(TABLE, ["c-1"]) == {}

    async def test_a_write_moves_the_version_and_keeps_holders_and_limit(
        self, tables: SlotTables
    ) -> None:
        assert await acquire(tables, TABLE, "x:1", limit=3) == (Verdict.ADMITTED, True)
        read = await tables.read(TABLE)
        assert read.table.version == 1
        assert read.table.limit == 3
        assert read.table.holders == {"x:1": Holder(1, NOW_MS + 1_000, NOW_MS)}

    async def test_a_stale_version_is_refused_and_changes_nothing(self, tables: SlotTables) -> None:
        await acquire(tables, TABLE, "x:1")
        change = SlotChange(SlotTable(limit=1), append=Waiter("c-9", "x:9"))
        assert not await tables.write(TABLE, change, version=0, appended=start("x:9"), now_ms=1)
        read = await tables.read(TABLE, carrier_id="c-9")
        assert (read.table.version, read.table.waiting, read.carrier_parked) == (1, 0, False)
        assert list(read.table.holders) == ["x:1"]

    async def test_a_waiting_carrier_is_parked_in_fifo_order(self, tables: SlotTables) -> None:
        await acquire(tables, TABLE, "x:1")
        for execution_id in ("x:2", "x:3", "x:4"):
            assert await acquire(tables, TABLE, execution_id) == (Verdict.WAITING, True)
        read = await tables.read(TABLE, carrier_id="c-x:3")
        assert read.table.head == (
            Waiter("c-x:2", "x:2"),
            Waiter("c-x:3", "x:3"),
            Waiter("c-x:4", "x:4"),
        )
        assert read.table.waiting == 3
        assert read.carrier_parked
        parked = await tables.parked(TABLE, ["c-x:3", "c-nobody"])
        assert parked == {"c-x:3": start("x:3")}

    async def test_a_release_promotes_the_head_whose_envelope_stays_until_it_holds(
        self, tables: SlotTables
    ) -> None:
        await acquire(tables, TABLE, "x:1")
        await acquire(tables, TABLE, "x:2")
        await acquire(tables, TABLE, "x:3")
        read = await tables.read(TABLE)
        released = slots.release(read.table, execution_id="x:1", generation=1, now_ms=NOW_MS)
        assert await tables.write(TABLE, released.change, version=read.table.version, now_ms=NOW_MS)
        assert released.promoted == (Waiter("c-x:2", "x:2"),)
        after = await tables.read(TABLE)
        assert after.table.head == (Waiter("c-x:3", "x:3"),)
        assert set(after.table.reserved) == {"x:2"}
        assert await tables.parked(TABLE, ["c-x:2"]) == {"c-x:2": start("x:2")}
        # The promoted carrier comes back: it holds, and its parked copy is forgotten.
        assert await acquire(tables, TABLE, "x:2") == (Verdict.ADMITTED, True)
        assert await tables.parked(TABLE, ["c-x:2"]) == {}

    async def test_lapsed_reservations_go_back_to_the_fifo_head(self, tables: SlotTables) -> None:
        change = SlotChange(
            SlotTable(limit=1, holders={"x:0": Holder(1, NOW_MS * 2, 0)}),
            append=Waiter("c-x:5", "x:5"),
        )
        assert await tables.write(TABLE, change, version=0, appended=start("x:5"), now_ms=1)
        front = SlotChange(
            SlotTable(limit=1, holders={"x:0": Holder(1, NOW_MS * 2, 0)}),
            push_front=(Waiter("c-x:6", "x:6"), Waiter("c-x:7", "x:7")),
        )
        assert await tables.write(TABLE, front, version=1, now_ms=1)
        read = await tables.read(TABLE)
        assert [w.execution_id for w in read.table.head] == ["x:6", "x:7", "x:5"]
        assert read.table.waiting == 3

    async def test_any_key_value_is_one_table(self, tables: SlotTables) -> None:
        odd = SlotTableId.concurrency("orders", '{"a}":[1,"{x}"]} ü')
        assert await acquire(tables, odd, "x:1") == (Verdict.ADMITTED, True)
        assert await acquire(tables, odd, "x:2") == (Verdict.WAITING, True)
        assert (await tables.read(odd)).table.waiting == 1
        assert (await tables.read(TABLE)).table == SlotTable()

    async def test_tenants_are_kept_apart(self, tables: SlotTables) -> None:
        await acquire(tables, TABLE, "x:1")
        with tenant_scope("acme"):
            assert (await tables.read(TABLE)).table == SlotTable()
            assert await acquire(tables, TABLE, "x:2") == (Verdict.ADMITTED, True)
        assert list((await tables.read(TABLE)).table.holders) == ["x:1"]

    async def test_active_tables_are_listed_and_unlisted_only_when_unchanged(
        self, tables: SlotTables
    ) -> None:
        await acquire(tables, TABLE, "x:1")
        with tenant_scope("acme"):
            await acquire(tables, SlotTableId.quota(), "x:2")
        listed = await tables.active(offset=0, limit=10)
        assert {(a.tenant_id, a.table) for a in listed} == {
            ("default", TABLE),
            ("acme", SlotTableId.quota()),
        }
        assert len(await tables.active(offset=1, limit=10)) == 1
        mine = next(a for a in listed if a.tenant_id == "default")
        read = await tables.read(TABLE)
        released = slots.release(read.table, execution_id="x:1", generation=1, now_ms=NOW_MS)
        await tables.write(TABLE, released.change, version=read.table.version, now_ms=NOW_MS)
        assert (await tables.read(TABLE)).table.idle
        assert await tables.forget_idle(mine)
        assert not await tables.forget_idle(mine)
        assert [a.tenant_id for a in await tables.active(offset=0, limit=10)] == ["acme"]

    async def test_a_table_written_since_it_was_listed_stays_listed(
        self, tables: SlotTables
    ) -> None:
        await acquire(tables, TABLE, "x:1")
        (listed,) = await tables.active(offset=0, limit=10)
        read = await tables.read(TABLE)
        renewed = slots.renew(read.table, execution_id="x:1", generation=1, expires_ms=NOW_MS * 2)
        await tables.write(TABLE, renewed.change, version=read.table.version, now_ms=NOW_MS + 5)
        assert not await tables.forget_idle(listed)
        assert len(await tables.active(offset=0, limit=10)) == 1

    async def test_an_idle_table_is_empty_and_keeps_its_version(self, tables: SlotTables) -> None:
        stale = await tables.read(TABLE)  # read while it did not exist
        await acquire(tables, TABLE, "x:1")
        read = await tables.read(TABLE)
        released = slots.release(read.table, execution_id="x:1", generation=1, now_ms=NOW_MS)
        assert await tables.write(TABLE, released.change, version=read.table.version, now_ms=1)
        assert (await tables.read(TABLE, carrier_id="c-x:1")).table == SlotTable(version=2)
        # A reader from before can never write over it: the version never goes back.
        decision = slots.acquire(
            stale.table,
            execution_id="x:2",
            carrier_id="c-x:2",
            generation=1,
            limit=1,
            now_ms=NOW_MS,
            hold_ms=1_000,
            parked=False,
        )
        assert not await tables.write(TABLE, decision.change, version=0, now_ms=NOW_MS)
        assert await acquire(tables, TABLE, "x:3") == (Verdict.ADMITTED, True)


class TestMemorySlotTables(SlotTablesContract):
    @pytest.fixture
    def tables(self) -> SlotTables:
        return MemorySlotTables()


class RedisSlotTablesContract(SlotTablesContract):
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def tables(self, client: redis.Redis, keys: RedisKeys) -> SlotTables:
        return RedisSlotTables(client, keys)

    async def test_an_idle_table_leaves_only_its_version_with_a_ttl(
        self, tables: SlotTables, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await acquire(tables, TABLE, "x:1")
        read = await tables.read(TABLE)
        released = slots.release(read.table, execution_id="x:1", generation=1, now_ms=NOW_MS)
        await tables.write(TABLE, released.change, version=read.table.version, now_ms=1)
        assert await client.exists(keys.slot_fifo(TABLE), keys.slot_parked(TABLE)) == 0
        record = keys.slot_table(TABLE)
        assert list((await client.hgetall(record)).keys()) in (["version"], [b"version"])
        assert 0 < await client.pttl(record) <= IDLE_TABLE_TTL_MS
        await acquire(tables, TABLE, "x:2")  # in use again: kept for as long as it is
        assert await client.pttl(record) == -1

    async def test_a_tables_keys_share_one_hash_slot(self, keys: RedisKeys) -> None:
        from redis.crc import key_slot

        with tenant_scope("acme"):
            table = SlotTableId.concurrency("f", "a{b}c")
            found = {
                key_slot(key.encode())
                for key in (keys.slot_table(table), keys.slot_fifo(table), keys.slot_parked(table))
            }
        assert len(found) == 1


class TestFakeRedisSlotTables(RedisSlotTablesContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisSlotTables(RedisSlotTablesContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
