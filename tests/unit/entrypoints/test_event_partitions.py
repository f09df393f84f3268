"""``--partitions`` reaches the event log: with P = 3 the container's event log writes each
notification to its event's partition of the notification stream (fake Redis)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import fakeredis
import pytest
from dependency_injector import providers

from plaita.adapters.redis.events import RedisEventLog
from plaita.adapters.redis.keys import RedisKeys
from plaita.domain.events import Event
from plaita.domain.partitions import partition_of
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

P = 3


@pytest.fixture
async def client() -> AsyncIterator[fakeredis.FakeAsyncRedis]:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    yield client
    await client.aclose()


def container_of(client: fakeredis.FakeAsyncRedis, partitions: int) -> Container:
    container = build_container(Settings(backend="redis", partitions=partitions))
    container.redis_client.override(providers.Object(client))
    return container


async def test_the_containers_event_log_writes_to_the_events_partition(
    client: fakeredis.FakeAsyncRedis,
) -> None:
    events = container_of(client, P).events()
    assert isinstance(events, RedisEventLog)
    assert events.partitions == P
    keys = RedisKeys("plaita")
    event_ids = [f"ev-{n}" for n in range(6)]
    for event_id in event_ids:
        await events.append(Event(event_id, "paid", 1_760_000_000_000, {}))

    lengths = [await client.xlen(keys.event_notifications(k)) for k in range(P)]
    assert lengths == [
        sum(partition_of(event_id, P) == k for event_id in event_ids) for k in range(P)
    ]
    assert await client.exists(keys.event_notifications()) == 0


async def test_one_partition_keeps_the_single_notification_stream(
    client: fakeredis.FakeAsyncRedis,
) -> None:
    events = container_of(client, 1).events()
    await events.append(Event("ev-1", "paid", 1_760_000_000_000, {}))

    assert await client.xlen("plaita:events:stream") == 1
