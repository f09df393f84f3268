"""Flow definitions by owner, id and version, with a latest pointer (S2, W20)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from plaita.domain.flow import Flow
from plaita.domain.flow_owners import FlowOwner


class FlowRepository(Protocol):
    """Definitions by (owner, flow_id, version) with a latest pointer per owner and flow.

    The owner is a tenant or the deployment (``SHARED``); owners never see each other's
    definitions here — which owner a tenant's lookup asks is the catalog's rule, and which
    version is the latest is the domain's (``plaita.domain.flow_versions``): the repository
    compares versions for equality only, never orders them.
    """

    async def put_if_absent(self, flow: Flow, *, owner: FlowOwner) -> Flow | None:
        """Store ``flow`` unless its version is stored (None), else return the stored one.

        One atomic step: when that (flow_id, version) is already stored nothing is written
        and the stored definition is returned. Of concurrent puts of one version exactly one
        stores. A stored version becomes ``owner``'s latest only when the flow has no latest
        yet, in the same step; any other move of the latest is ``move_latest``'s.
        """
        ...

    async def latest_version(self, flow_id: str, *, owner: FlowOwner) -> str | None:
        """The version ``owner``'s latest pointer of ``flow_id`` names, or None without one."""
        ...

    async def move_latest(
        self, flow_id: str, version: str, *, owner: FlowOwner, expected: str | None
    ) -> bool:
        """Point ``owner``'s latest of ``flow_id`` at ``version`` iff it now names ``expected``.

        A compare-and-set in one atomic step: ``expected`` None means "only while the flow
        has no latest". Returns False, writing nothing, when the pointer names another version
        than ``expected`` (another registration moved it first: read it again) or when
        ``version`` is not stored for ``owner`` (a latest always names a stored version).
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

    async def versions(self, flow_id: str, *, owner: FlowOwner) -> Sequence[str]:
        """Every version of ``flow_id`` that ``owner`` stored, sorted as text; empty if none.

        The order people read is the domain's (``plaita.domain.flow_versions.version_key``).
        """
        ...
