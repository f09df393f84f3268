"""Start an execution: check the flow exists, claim the dedup key, enqueue the start carrier."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plaita.application.ports import Clock, DedupStore, IdGenerator, TaskQueue
from plaita.application.use_cases.flows import FlowCatalog
from plaita.domain.envelope import CarrierGenerations, TaskEnvelope

JSON = Any

#: How long a dedup key keeps pointing at its execution (W6).
DEDUP_TTL_MS = 7 * 24 * 60 * 60 * 1000


@attrs.frozen
class StartedExecution:
    execution_id: str
    flow_id: str
    version: str
    deduplicated: bool = False


class StartExecution:
    def __init__(
        self,
        *,
        flows: FlowCatalog,
        queue: TaskQueue,
        dedup: DedupStore,
        clock: Clock,
        ids: IdGenerator,
        generations: CarrierGenerations,
    ) -> None:
        self._flows = flows
        self._generations = generations
        self._queue = queue
        self._dedup = dedup
        self._clock = clock
        self._ids = ids

    async def __call__(
        self,
        flow_id: str,
        *,
        version: str | None = None,
        params: Mapping[str, JSON] | None = None,
        execution_id: str | None = None,
        dedup_key: str | None = None,
        tenant_id: str = "default",
    ) -> StartedExecution:
        flow = await self._flows.get(flow_id, version)
        execution_id = execution_id or self._ids.new_id()
        if dedup_key is not None:
            # The key is claimed before any carrier exists, so a retried start never runs twice.
            holder = await self._dedup.claim(
                dedup_key, execution_id, tenant_id=tenant_id, ttl_ms=DEDUP_TTL_MS
            )
            if holder is not None:
                return StartedExecution(holder, flow.flow_id, flow.version, deduplicated=True)
        await self._queue.enqueue(
            TaskEnvelope.start(
                execution_id=execution_id,
                flow_id=flow.flow_id,
                version=flow.version,
                params=params or {},
                now_ms=self._clock.now_ms(),
                tenant_id=tenant_id,
                dedup_key=dedup_key,
                generations=self._generations,
            )
        )
        return StartedExecution(execution_id, flow.flow_id, flow.version)
