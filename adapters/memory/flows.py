"""In-memory twin of the Redis flow repository."""

from __future__ import annotations

import json
from collections.abc import Sequence

from plaita.domain.flow import Flow


class MemoryFlowRepository:
    """FlowRepository in memory; definitions are kept as document JSON, as Redis keeps them."""

    def __init__(self) -> None:
        self._documents: dict[tuple[str, str], str] = {}
        self._latest: dict[str, str] = {}

    async def put(self, flow: Flow) -> None:
        document = json.dumps(flow.to_document(), separators=(",", ":"))
        self._documents[(flow.flow_id, flow.version)] = document
        self._latest[flow.flow_id] = flow.version

    async def get(self, flow_id: str, version: str | None = None) -> Flow | None:
        if version is None:
            version = self._latest.get(flow_id)
            if version is None:
                return None
        document = self._documents.get((flow_id, version))
        return None if document is None else Flow.from_json(document)

    async def list_ids(self) -> Sequence[str]:
        return sorted(self._latest)
