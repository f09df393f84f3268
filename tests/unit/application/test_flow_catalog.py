"""The flow cache (W20): fewer reads, bounded size, a TTL, and registration invalidates."""

from __future__ import annotations

from typing import Any

import pytest

from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.application.use_cases.flows import FlowCatalog
from plaita.domain.errors import UnknownFlowError
from plaita.domain.flow import Flow

from .conftest import FakeClock


def flow(flow_id: str = "f", version: str = "1") -> Flow:
    return Flow.from_document(
        {
            "flow_id": flow_id,
            "version": version,
            "start": "e",
            "nodes": [{"id": "e", "type": "end"}],
        }
    )


class CountingRepository(MemoryFlowRepository):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def get(self, flow_id: str, version: str | None = None) -> Any:
        self.reads += 1
        return await super().get(flow_id, version)


async def test_a_cached_flow_is_read_once_within_the_ttl(clock: FakeClock) -> None:
    repository = CountingRepository()
    catalog = FlowCatalog(repository, None, clock=clock, cache_ttl_ms=1000)
    await catalog.register(flow())
    for _ in range(5):
        await catalog.get("f")
    assert repository.reads == 1
    clock.advance(2)
    await catalog.get("f")
    assert repository.reads == 2


async def test_the_cache_keeps_at_most_its_size(clock: FakeClock) -> None:
    repository = CountingRepository()
    catalog = FlowCatalog(repository, None, clock=clock, cache_size=2)
    for name in "abc":
        await catalog.register(flow(name))
        await catalog.get(name)
    reads = repository.reads
    await catalog.get("a")  # evicted: the least recently used
    assert repository.reads == reads + 1


async def test_registering_a_version_is_seen_at_once(clock: FakeClock) -> None:
    catalog = FlowCatalog(MemoryFlowRepository(), None, clock=clock)
    await catalog.register(flow(version="1"))
    assert (await catalog.get("f")).version == "1"
    await catalog.register(flow(version="2"))
    assert (await catalog.get("f")).version == "2"


async def test_an_unknown_flow_is_a_named_error_and_not_cached(clock: FakeClock) -> None:
    catalog = FlowCatalog(MemoryFlowRepository(), None, clock=clock)
    with pytest.raises(UnknownFlowError, match="'ghost'"):
        await catalog.get("ghost")
    await catalog.register(flow("ghost"))
    assert (await catalog.get("ghost")).flow_id == "ghost"
