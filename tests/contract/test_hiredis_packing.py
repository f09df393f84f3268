"""Commands packed by hiredis are the bytes redis-py would send (P1): ``use_hiredis_packing``.

Property-checked against redis-py's own packer; the arguments hiredis would frame otherwise
(floats) or that redis-py refuses (bools, None) still go through redis-py. The container's
clients, single node and cluster, use it and talk to the real servers.
"""

from __future__ import annotations

import os

import pytest
import redis.asyncio as redis
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError

from plaita.adapters.redis.packing import (
    HiredisConnection,
    HiredisSSLConnection,
    HiredisUnixConnection,
    faster,
)
from plaita.entrypoints.container.redis import redis_client

from .conftest import REDIS_CLUSTER_URL_VARIABLE, REDIS_URL_VARIABLE

PLAIN = Connection()
FAST = HiredisConnection()

arguments = st.lists(
    st.one_of(st.text(), st.binary(), st.integers(min_value=-(2**70), max_value=2**70)),
    max_size=30,
)
names = st.sampled_from(["SET", b"EVALSHA", "SCRIPT LOAD", b"CLIENT SETINFO", "hset"])


def packed(connection: Connection, *args: object) -> bytes:
    return b"".join(connection.pack_command(*args))


@given(names, arguments)
def test_hiredis_packs_the_bytes_redis_py_packs(name: str | bytes, rest: list[object]) -> None:
    assert packed(FAST, name, *rest) == packed(PLAIN, name, *rest)


@pytest.mark.parametrize("odd", [0.1, 1e20, float("inf"), memoryview(b"view")])
def test_an_argument_hiredis_frames_otherwise_goes_through_redis_py(odd: object) -> None:
    assert packed(FAST, "SET", "k", odd) == packed(PLAIN, "SET", "k", odd)


@pytest.mark.parametrize("refused", [True, None, [1, 2]])
def test_an_argument_redis_py_refuses_is_refused_as_before(refused: object) -> None:
    with pytest.raises(DataError):
        FAST.pack_command("SET", "k", refused)


def test_each_connection_kind_gets_its_hiredis_twin_and_a_class_of_ones_own_is_kept() -> None:
    class Own(Connection):
        pass

    assert faster(Connection) is HiredisConnection
    assert faster(SSLConnection) is HiredisSSLConnection
    assert faster(UnixDomainSocketConnection) is HiredisUnixConnection
    assert faster(Own) is Own


@pytest.mark.redis
@pytest.mark.parametrize("variable", [REDIS_URL_VARIABLE, REDIS_CLUSTER_URL_VARIABLE])
async def test_the_containers_clients_pack_with_hiredis_and_work(variable: str) -> None:
    url = os.environ[variable]
    client = redis_client(url, concurrency=4, cluster=variable == REDIS_CLUSTER_URL_VARIABLE)
    try:
        key = "plaita-packing-test:{k}"
        await client.set(key, "é" * 3, px=10_000)
        assert await client.get(key) == "é" * 3
        if isinstance(client, redis.RedisCluster):
            classes = {
                type(connection)
                for node in client.get_nodes()
                for connection in node._connections  # what the node opened
            }
        else:
            classes = {client.connection_pool.connection_class}
        assert classes == {HiredisConnection}
        await client.delete(key)
    finally:
        await client.aclose()
