"""Deterministic time, ids and handler modules for application tests (no sleeping, no imports)."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest

from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.application.handlers import HandlerRegistry
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import FlowOwner


class FakeClock:
    """A clock the test moves; ``sleep`` advances it instead of waiting."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._ms = float(start_ms)
        self.sleeps: list[float] = []

    def now_ms(self) -> int:
        return int(self._ms)

    def monotonic(self) -> float:
        return self._ms / 1000

    def advance(self, seconds: float) -> None:
        self._ms += seconds * 1000

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)


class SequentialIds:
    def __init__(self, prefix: str = "id") -> None:
        self._prefix = prefix
        self._n = 0

    def new_id(self) -> str:
        self._n += 1
        return f"{self._prefix}-{self._n}"


def one_task(handler: str, flow_id: str = "busy") -> dict[str, Any]:
    """The document of a flow whose one task (node ``work``) calls ``handler``."""
    return {
        "flow_id": flow_id,
        "start": "work",
        "nodes": [
            {"id": "work", "type": "task", "handler": handler, "next": "done"},
            {"id": "done", "type": "end"},
        ],
    }


def handler_registry(**functions: Callable[..., Any]) -> HandlerRegistry:
    """A registry whose allowlisted module ``t`` holds ``functions``, importer injected."""
    module = types.SimpleNamespace(**functions)
    return HandlerRegistry(["t"], importer=lambda name: module)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ids() -> SequentialIds:
    return SequentialIds()


@pytest.fixture
async def twin(clock: FakeClock, ids: SequentialIds) -> Any:
    """The worker step on the memory twin (``tests/unit/application/twin.py``)."""
    from .twin import make_twin

    return await make_twin(clock, ids)


class CountingRepository(MemoryFlowRepository):
    """The memory flow repository, counting its reads: a cache hit reads nothing (W20)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def get(
        self, flow_id: str, version: str | None = None, *, owner: FlowOwner
    ) -> Flow | None:
        self.reads += 1
        return await super().get(flow_id, version, owner=owner)
