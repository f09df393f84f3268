"""Start an execution: check the ids, the input's limits and that the flow exists, claim the
dedup key, enqueue the start carrier."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plaita.application.codec import ENVELOPE_FIELD, encode_envelope
from plaita.application.ports import Clock, DedupStore, IdGenerator, TaskQueue
from plaita.application.use_cases.flows import FlowCatalog
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.ids import validate_execution_id, validate_flow_id
from plaita.domain.limits import ENVELOPE_LIMIT, INPUT_LIMIT, check_json_text, check_json_value

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
    ) -> None:
        self._flows = flows
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
        validate_flow_id(flow_id)
        if execution_id is not None:
            validate_execution_id(execution_id)
        check_json_value(params or {}, INPUT_LIMIT, field="input")
        flow = await self._flows.get(flow_id, version)
        execution_id = execution_id or self._ids.new_id()
        envelope = TaskEnvelope.start(
            execution_id=execution_id,
            flow_id=flow.flow_id,
            version=flow.version,
            params=params or {},
            now_ms=self._clock.now_ms(),
            tenant_id=tenant_id,
            dedup_key=dedup_key,
        )
        # What the worker will check, checked here: an accepted start is never dead-lettered
        # for its size (a long dedup key or version on top of a large input).
        check_json_text(encode_envelope(envelope)[ENVELOPE_FIELD], ENVELOPE_LIMIT, field="start")
        if dedup_key is not None:
            # The key is claimed before any carrier exists, so a retried start never runs twice.
            holder = await self._dedup.claim(
                dedup_key, execution_id, tenant_id=tenant_id, ttl_ms=DEDUP_TTL_MS
            )
            if holder is not None:
                return StartedExecution(holder, flow.flow_id, flow.version, deduplicated=True)
        await self._queue.enqueue(envelope)
        return StartedExecution(execution_id, flow.flow_id, flow.version)
