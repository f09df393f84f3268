"""In-memory twin of the Redis flow repository."""

from __future__ import annotations

import json
from collections.abc import Sequence

from plaita.domain.flow import Flow
from plaita.domain.flow_owners import FlowOwner


class MemoryFlowRepository:
    """FlowRepository in memory; definitions are kept as document JSON, as Redis keeps them.

    Every owner has its own maps, keyed by its tenant id (None for the deployment-wide one).
    """

    def __init__(self) -> None:
        self._documents: dict[tuple[str | None, str, str], str] = {}
        self._latest: dict[tuple[str | None, str], str] = {}

    async def put_if_absent(self, flow: Flow, *, owner: FlowOwner) -> Flow | None:
        key = (owner.tenant_id, flow.flow_id, flow.version)
        stored = self._documents.get(key)
        if stored is not None:
            return Flow.from_json(stored)
        self._documents[key] = json.dumps(flow.to_document(), separators=(",", ":"))
        self._latest.setdefault((owner.tenant_id, flow.flow_id), flow.version)
        return None

    async def latest_version(self, flow_id: str, *, owner: FlowOwner) -> str | None:
        return self._latest.get((owner.tenant_id, flow_id))

    async def move_latest(
        self, flow_id: str, version: str, *, owner: FlowOwner, expected: str | None
    ) -> bool:
        pointer = (owner.tenant_id, flow_id)
        if (owner.tenant_id, flow_id, version) not in self._documents:
            return False
        if self._latest.get(pointer) != expected:
            return False
        self._latest[pointer] = version
        return True

    async def get(
        self, flow_id: str, version: str | None = None, *, owner: FlowOwner
    ) -> Flow | None:
        if version is None:
            version = self._latest.get((owner.tenant_id, flow_id))
            if version is None:
                return None
        document = self._documents.get((owner.tenant_id, flow_id, version))
        return None if document is None else Flow.from_json(document)

    async def list_ids(self, *, owner: FlowOwner) -> Sequence[str]:
        return sorted(flow_id for tenant, flow_id in self._latest if tenant == owner.tenant_id)

    async def versions(self, flow_id: str, *, owner: FlowOwner) -> Sequence[str]:
        return sorted(
            version
            for tenant, stored_id, version in self._documents
            if tenant == owner.tenant_id and stored_id == flow_id
        )
