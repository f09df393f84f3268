"""Flow definitions by owner, id and version, with a latest pointer (S2, W20)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from plaita.domain.flow import Flow
from plaita.domain.flow_owners import FlowOwner


class FlowRepository(Protocol):
    """Definitions by (owner, flow_id, version) with a latest pointer per owner and flow.

    The owner is a tenant or the deployment (``SHARED``); owners never see each other's
    definitions here — which owner a tenant's lookup asks is the catalog's rule.
    """

    async def put_if_absent(self, flow: Flow, *, owner: FlowOwner) -> Flow | None:
        """Store ``flow`` as ``owner``'s latest unless its version is stored; else the stored.

        One atomic step: when that (flow_id, version) is already stored nothing is written
        and the stored definition is returned. Of concurrent puts of one version exactly one
        stores.
        """
        ...

    async def get(
        self, flow_id: str, version: str | None = None, *, owner: FlowOwner
    ) -> Flow | None:
        """``owner``'s definition by id and version (its latest when version is None), or None."""
        ...

    async def list_ids(self, *, owner: FlowOwner) -> Sequence[str]:
        """Ids of every flow ``owner`` has registered, sorted."""
        ...
