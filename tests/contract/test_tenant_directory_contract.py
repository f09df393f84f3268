"""TenantDirectory contract (W24), run against memory, fakeredis (bytes and str) and real Redis
(the single node and the cluster).

Records written with a compare-and-set on their version and listed by tenant id; the gate's
read of a record and its parked count; a park kept only while the record's version is the
one decided on, the same carrier once, oldest first, and forgotten by ``unpark``.
"""

from __future__ import annotations

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.tenants import MemoryTenantDirectory
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.tenants import RedisTenantDirectory
from plaita.application.ports import TenantAdmission, TenantDirectory
from plaita.application.tenancy import no_tenant_scope
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.errors import InvalidTenantIdError
from plaita.domain.tenant_status import (
    NO_VERSION,
    TenantRecord,
    resumed,
    suspended,
    with_quota,
)

NOW_MS = 1_760_000_000_000


def carrier(
    execution_id: str = "x:1", *, tenant_id: str = "acme", at_ms: int = NOW_MS
) -> TaskEnvelope:
    return TaskEnvelope.resume(
        execution_id=execution_id,
        flow_id="f",
        resume_type=ResumeType.CONTINUE,
        now_ms=at_ms,
        tenant_id=tenant_id,
        generations=LEGACY_GENERATIONS,
    )


def suspended_acme(epoch: int | None = 3) -> TenantRecord:
    return suspended(None, "acme", epoch=epoch, now_ms=NOW_MS)


class TenantDirectoryContract:
    @pytest.fixture
    def directory(self) -> TenantDirectory:
        raise NotImplementedError

    async def test_a_tenant_never_written_has_no_record(self, directory: TenantDirectory) -> None:
        assert await directory.get("acme") is None
        assert await directory.admission("acme") == TenantAdmission(None, 0)
        assert await directory.list() == []

    async def test_a_record_is_written_read_back_and_listed(
        self, directory: TenantDirectory
    ) -> None:
        record = with_quota(None, "acme", 5, epoch=2, now_ms=NOW_MS)

        assert await directory.write(record, expected_version=NO_VERSION) is True

        assert await directory.get("acme") == record
        assert record.version == 1 and record.max_running == 5 and record.epoch == 2
        assert await directory.list() == [record]

    async def test_none_values_are_stored_as_none(self, directory: TenantDirectory) -> None:
        first = with_quota(None, "acme", 5, epoch=2, now_ms=NOW_MS)
        await directory.write(first, expected_version=NO_VERSION)
        cleared = with_quota(first, "acme", None, epoch=None, now_ms=NOW_MS + 1)

        assert await directory.write(cleared, expected_version=first.version) is True

        assert await directory.get("acme") == cleared
        assert cleared.max_running is None and cleared.epoch is None

    async def test_a_write_on_a_moved_version_changes_nothing(
        self, directory: TenantDirectory
    ) -> None:
        first = suspended_acme()
        await directory.write(first, expected_version=NO_VERSION)
        late = resumed(None, "acme", epoch=3, now_ms=NOW_MS + 5)

        assert await directory.write(late, expected_version=NO_VERSION) is False

        assert await directory.get("acme") == first

    async def test_list_is_by_tenant_id(self, directory: TenantDirectory) -> None:
        for tenant_id in ("zeta", "acme", "default"):
            await directory.write(
                resumed(None, tenant_id, epoch=None, now_ms=NOW_MS), expected_version=0
            )

        assert [r.tenant_id for r in await directory.list()] == ["acme", "default", "zeta"]

    async def test_a_park_on_the_decided_version_is_kept_once(
        self, directory: TenantDirectory
    ) -> None:
        record = suspended_acme()
        await directory.write(record, expected_version=NO_VERSION)

        assert await directory.park(carrier(), expected_version=record.version) is True
        assert await directory.park(carrier(), expected_version=record.version) is True

        assert await directory.admission("acme") == TenantAdmission(record, 1)
        assert await directory.parked_count("acme") == 1
        [kept] = await directory.parked("acme", limit=10)
        assert kept.envelope == carrier()

    async def test_a_park_on_a_moved_version_keeps_nothing(
        self, directory: TenantDirectory
    ) -> None:
        record = suspended_acme()
        await directory.write(record, expected_version=NO_VERSION)
        await directory.write(
            resumed(record, "acme", epoch=3, now_ms=NOW_MS), expected_version=record.version
        )

        assert await directory.park(carrier(), expected_version=record.version) is False
        assert await directory.park(carrier(), expected_version=NO_VERSION) is False

        assert await directory.parked_count("acme") == 0

    async def test_parked_carriers_come_oldest_first_in_pages(
        self, directory: TenantDirectory
    ) -> None:
        record = suspended_acme()
        await directory.write(record, expected_version=NO_VERSION)
        for n, at_ms in enumerate((NOW_MS + 30, NOW_MS + 10, NOW_MS + 20)):
            await directory.park(carrier(f"x:{n}", at_ms=at_ms), expected_version=1)

        first = await directory.parked("acme", limit=2)
        assert [c.envelope.execution_id for c in first] == ["x:1", "x:2"]
        assert await directory.unpark("acme", [c.carrier_id for c in first]) == 2
        assert [c.envelope.execution_id for c in await directory.parked("acme", limit=2)] == ["x:0"]
        assert await directory.parked_count("acme") == 1

    async def test_unpark_counts_only_what_was_parked(self, directory: TenantDirectory) -> None:
        record = suspended_acme()
        await directory.write(record, expected_version=NO_VERSION)
        await directory.park(carrier(), expected_version=1)
        [kept] = await directory.parked("acme", limit=1)

        assert await directory.unpark("acme", [kept.carrier_id, kept.carrier_id, "nope"]) == 1
        assert await directory.unpark("acme", [kept.carrier_id]) == 0
        assert await directory.unpark("acme", []) == 0
        assert await directory.parked("acme", limit=5) == []

    async def test_tenants_are_kept_apart(self, directory: TenantDirectory) -> None:
        await directory.write(suspended_acme(), expected_version=NO_VERSION)
        await directory.park(carrier(), expected_version=1)

        assert await directory.admission("globex") == TenantAdmission(None, 0)
        assert await directory.parked("globex", limit=5) == []

    async def test_records_need_no_tenant_scope(self, directory: TenantDirectory) -> None:
        with no_tenant_scope():
            await directory.write(suspended_acme(), expected_version=NO_VERSION)
            assert (await directory.admission("acme")).version == 1

    async def test_a_bad_tenant_id_is_refused_by_name(self, directory: TenantDirectory) -> None:
        with pytest.raises(InvalidTenantIdError):
            await directory.get("bad{tag}")


class TestMemoryTenantDirectory(TenantDirectoryContract):
    @pytest.fixture
    def directory(self) -> TenantDirectory:
        return MemoryTenantDirectory()


class RedisTenantDirectoryContract(TenantDirectoryContract):
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def directory(self, client: redis.Redis, keys: RedisKeys) -> TenantDirectory:
        return RedisTenantDirectory(client, keys)

    async def test_a_tenants_keys_share_its_hash_tag_in_the_root_namespace(
        self, directory: TenantDirectory, keys: RedisKeys, namespace: str
    ) -> None:
        assert keys.tenant_record("acme") == f"{namespace}:tenant:{{acme}}"
        assert keys.tenant_parked("acme") == f"{namespace}:tenant:{{acme}}:parked"
        assert keys.tenant_parked_carriers("acme") == f"{namespace}:tenant:{{acme}}:parked:carriers"

    async def test_a_dangling_index_member_is_not_listed(
        self, directory: TenantDirectory, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await directory.write(suspended_acme(), expected_version=NO_VERSION)
        await client.sadd(keys.tenants(), "gone")

        assert [r.tenant_id for r in await directory.list()] == ["acme"]

    async def test_the_gate_read_is_one_round_trip_without_a_record(
        self, directory: TenantDirectory, client: redis.Redis
    ) -> None:
        sent: list[list[object]] = []
        original = client.pipeline

        def counting(*args: object, **options: object) -> object:
            pipe = original(*args, **options)  # type: ignore[arg-type]
            queued: list[object] = []
            queue, execute = pipe.execute_command, pipe.execute

            def recorded(*command: object, **named: object) -> object:
                queued.append(command[0])
                return queue(*command, **named)

            async def counted(*call: object, **named: object) -> object:
                sent.append(queued)
                return await execute(*call, **named)

            pipe.execute_command, pipe.execute = recorded, counted  # type: ignore[method-assign]
            return pipe

        client.pipeline = counting  # type: ignore[method-assign,assignment]
        try:
            assert await directory.admission("default") == TenantAdmission(None, 0)
        finally:
            client.pipeline = original  # type: ignore[method-assign]
        assert sent == [["HGETALL", "ZCARD"]]


class TestFakeRedisTenantDirectory(RedisTenantDirectoryContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisTenantDirectory(RedisTenantDirectoryContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
