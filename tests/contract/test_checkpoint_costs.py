"""What a checkpoint costs on the wire, counted, not timed (P2, P3, S3).

A redis-py connection subclass records every buffer the client writes to the socket: one
write is one round trip (a pipeline is one write), and the buffer is parsed back into its
commands. Run on fakeredis and on the real Redis at ``PLAITA_TEST_REDIS_URL``.

- P2: a steady-state save (with ``previous``) is one round trip: EVALSHA + ZADD.
- P3: the bytes a save sends stay flat from step 10 to step 1000 of a run whose every step
  adds one small node result; a full save at step 1000 is shown to be what they would be
  otherwise, so the test would catch a store that rewrites the whole state.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

import fakeredis
import pytest
import redis.asyncio as redis
from redis.asyncio.connection import Connection

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.application.tenancy import tenant_scope
from plaita.domain import history
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.tenancy import DEFAULT_TENANT

from .conftest import real_redis_client

NOW_MS = 1_760_000_000_000
STEPS = 1000
#: Bytes a step may add between step 10 and step 1000: wider numbers (node id, result,
#: step count, last/next node ids), never anything proportional to the run.
FLAT_SLACK_BYTES = 32
#: The most a steady step's history (node_started + node_finished) may add to its save.
HISTORY_BYTES_PER_STEP = 256
#: A worker instance id as a worker names itself (host, pid and a random suffix).
WORKER = "worker-host-1:4242:9f3c"
ConnectionT = TypeVar("ConnectionT", bound=Connection)


class Wire:
    """Every buffer a client sent, in order."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def clear(self) -> None:
        self.sent.clear()

    @property
    def round_trips(self) -> int:
        return len(self.sent)

    @property
    def bytes(self) -> int:
        return sum(len(buffer) for buffer in self.sent)

    def commands(self) -> list[str]:
        return [args[0].decode().upper() for buffer in self.sent for args in parse_resp(buffer)]


def parse_resp(buffer: bytes) -> list[list[bytes]]:
    """The commands in a request buffer: RESP arrays of bulk strings."""
    commands: list[list[bytes]] = []
    at = 0
    while at < len(buffer):
        assert buffer[at : at + 1] == b"*", buffer[at : at + 20]
        end = buffer.index(b"\r\n", at)
        count, at = int(buffer[at + 1 : end]), end + 2
        args: list[bytes] = []
        for _ in range(count):
            assert buffer[at : at + 1] == b"$"
            end = buffer.index(b"\r\n", at)
            size, at = int(buffer[at + 1 : end]), end + 2
            args.append(buffer[at : at + size])
            at += size + 2
        commands.append(args)
    return commands


def recording(base: type[ConnectionT], wire: Wire) -> type[ConnectionT]:
    class RecordingConnection(base):  # type: ignore[valid-type, misc]
        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            wire.sent.append(_join(command))
            await super().send_packed_command(command, check_health)

    return RecordingConnection


def _join(command: bytes | str | Iterable[bytes | memoryview]) -> bytes:
    if isinstance(command, str):
        return command.encode()
    if isinstance(command, bytes):
        return command
    return b"".join(bytes(part) for part in command)


def started(execution_id: str = "x:cost") -> ExecutionState:
    return ExecutionState.new(
        execution_id=execution_id,
        flow_id="chain",
        flow_version="1",
        fingerprint="f" * 64,
        start_node_id="n1",
        input={"order": 7, "items": list(range(20))},
        now_ms=NOW_MS,
    )


def step(previous: ExecutionState, number: int) -> ExecutionState:
    """Step ``number`` of the chain: node ``n<number>`` ran and returned a small result."""
    node = f"n{number}"
    return previous.transition(
        ExecutionStatus.RUNNING,
        now_ms=NOW_MS + number,
        node_results={**previous.node_results, node: {"ok": True, "i": number}},
        last_node_id=node,
        next_node_id=f"n{number + 1}",
        steps=number,
    )


def report(request: pytest.FixtureRequest, **figures: int) -> None:
    """Keep the measured figures with the test (``-rP`` shows them, junit stores them)."""
    request.node.user_properties.extend(figures.items())
    print(" ".join(f"{name}={value}" for name, value in figures.items()))


class CheckpointCosts:
    @pytest.fixture
    def wire(self) -> Wire:
        return Wire()

    def save_round_trips(self, store: RedisExecutionRepository) -> int:
        """A steady-state save: the script and the index update, pipelined in one write."""
        return 1

    @pytest.fixture
    def client(self, wire: Wire) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    async def repository(
        self, client: redis.Redis, keys: RedisKeys
    ) -> AsyncIterator[tuple[RedisExecutionRepository, int]]:
        leases = RedisLeaseManager(client, keys)
        lease = await leases.acquire("x:cost", "w1", ttl_ms=60_000)
        assert lease is not None
        yield RedisExecutionRepository(client, keys), lease.generation

    async def test_a_steady_state_save_is_one_round_trip(
        self,
        repository: tuple[RedisExecutionRepository, int],
        wire: Wire,
        request: pytest.FixtureRequest,
    ) -> None:
        """P2: the checkpoint of a step is one round trip (EVALSHA + ZADD, pipelined)."""
        store, fence = repository
        previous = started()
        await store.save(previous, fence=fence)  # first save: loads the script
        for number in range(1, 4):
            current = step(previous, number)
            wire.clear()

            await store.save(current, fence=fence, previous=previous)

            assert wire.round_trips == self.save_round_trips(store)
            assert sorted(wire.commands()) == ["EVALSHA", "ZADD"]
            previous = current
        report(request, round_trips_per_save=wire.round_trips)
        assert await store.load("x:cost") == previous

    async def test_the_history_of_a_step_rides_its_save_at_a_fixed_cost(
        self,
        repository: tuple[RedisExecutionRepository, int],
        wire: Wire,
        request: pytest.FixtureRequest,
    ) -> None:
        """P2 with the history: a steady step's ``node_started`` + ``node_finished`` travel
        in the save's own EVALSHA (still one round trip); what they add is their stored
        form and its RESP framing, nothing else, and under ``HISTORY_BYTES_PER_STEP``."""
        store, fence = repository
        previous = started()
        await store.save(previous, fence=fence)
        plain = step(previous, 1)
        wire.clear()
        await store.save(plain, fence=fence, previous=previous)
        without = wire.bytes
        entries = [
            history.node_started(NOW_MS + 2, node_id="n2", attempt=1, worker=WORKER),
            history.node_finished(
                NOW_MS + 9, node_id="n2", attempt=1, worker=WORKER, result_size=21, duration_ms=7
            ),
        ]
        # Step 2 is step 1's twin (same widths): only the history differs.
        twin = step(plain, 2)
        wire.clear()
        await store.save(twin, fence=fence, previous=plain, history=entries)

        assert wire.round_trips == self.save_round_trips(store)
        assert sorted(wire.commands()) == ["EVALSHA", "ZADD"]
        added = wire.bytes - without
        framing = sum(len(f"${len(e.encode())}\r\n\r\n") for e in entries)
        assert added == sum(len(e.encode()) for e in entries) + framing
        assert added <= HISTORY_BYTES_PER_STEP
        report(request, history_bytes_per_step=added)
        page = await store.history("x:cost")
        assert [entry.kind.value for entry in page.entries] == ["node_started", "node_finished"]

    async def test_bytes_per_step_are_flat_from_step_10_to_step_1000(
        self,
        repository: tuple[RedisExecutionRepository, int],
        wire: Wire,
        request: pytest.FixtureRequest,
    ) -> None:
        """P3 / S3: a step sends what it changed, whatever the number of steps before it."""
        store, fence = repository
        previous = started()
        await store.save(previous, fence=fence)
        sent: dict[int, int] = {}
        for number in range(1, STEPS + 1):
            current = step(previous, number)
            wire.clear()
            await store.save(current, fence=fence, previous=previous)
            assert wire.round_trips == self.save_round_trips(store)
            sent[number] = wire.bytes
            previous = current

        assert sent[STEPS] <= sent[10] + FLAT_SLACK_BYTES
        assert max(sent[n] for n in range(10, STEPS + 1)) <= sent[10] + FLAT_SLACK_BYTES
        assert await store.load("x:cost") == previous

        # The same step written in full: what a non-incremental store would send.
        wire.clear()
        await store.save(previous, fence=fence)
        full_at_1000 = wire.bytes
        assert full_at_1000 > 20 * sent[STEPS]
        report(
            request,
            bytes_step_10=sent[10],
            bytes_step_1000=sent[STEPS],
            bytes_full_save_step_1000=full_at_1000,
        )
        assert await store.load("x:cost") == previous


@contextlib.asynccontextmanager
async def wired_fake_redis(wire: Wire) -> AsyncIterator[redis.Redis]:
    """A fakeredis client whose every socket write is recorded in ``wire``."""
    client = fakeredis.FakeAsyncRedis(
        server=fakeredis.FakeServer(),
        connection_class=recording(fakeredis.FakeAsyncRedisConnection, wire),
    )
    try:
        yield client
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def wired_real_redis(
    wire: Wire, keys: RedisKeys, topology: str = "node"
) -> AsyncIterator[redis.Redis]:
    """The real Redis of ``topology`` (the single node or the cluster), recorded; the
    namespace is cleaned after. On the cluster one write is one round trip to one node: a
    pipeline over keys of two nodes is two writes, sent concurrently."""
    client = real_redis_client(
        topology, decode_responses=False, connection_class=recording(Connection, wire)
    )
    try:
        yield client
    finally:
        created = [key async for key in client.scan_iter(match=f"{keys.namespace}:*", count=1000)]
        if created:
            await client.delete(*created)
        await client.aclose()


class TestFakeRedisCheckpointCosts(CheckpointCosts):
    @pytest.fixture
    async def client(self, wire: Wire) -> AsyncIterator[redis.Redis]:
        async with wired_fake_redis(wire) as client:
            yield client


@pytest.mark.redis
class TestRedisCheckpointCosts(CheckpointCosts):
    @pytest.fixture
    async def client(self, wire: Wire, keys: RedisKeys) -> AsyncIterator[redis.Redis]:
        async with wired_real_redis(wire, keys) as client:
            yield client


@pytest.mark.redis
class TestRedisClusterCheckpointCosts(CheckpointCosts):
    """On the cluster the script goes to the execution's node and the index update to the
    index's: one write each, sent concurrently — two round trips when they are two nodes."""

    @pytest.fixture
    async def client(self, wire: Wire, keys: RedisKeys) -> AsyncIterator[redis.Redis]:
        async with wired_real_redis(wire, keys, "cluster") as client:
            self._client = client
            self._keys = keys
            yield client

    def save_round_trips(self, store: RedisExecutionRepository) -> int:
        cluster: Any = self._client
        with tenant_scope(DEFAULT_TENANT):
            keys = [self._keys.execution_state("x:cost"), self._keys.executions()]
        nodes = {
            cluster.nodes_manager.get_node_from_slot(cluster.keyslot(key)).name for key in keys
        }
        return len(nodes)
