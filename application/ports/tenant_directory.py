"""Tenants' status records and the carriers parked while a tenant is suspended (W24).

Deployment-wide, in the deployment's root namespace: a tenant's record and its parked
carriers share one hash tag (the tenant id), so a park checks the record's version and keeps
the carrier in one atomic step. An index of the tenants with a record serves ``list``; it is
written after the record and tolerates members whose record is gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from plaita.application.ports.controls import ParkedCarrier
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.tenant_status import TenantRecord


@attrs.frozen
class TenantAdmission:
    """What the worker's tenant gate reads, in one round trip."""

    #: None: no record was ever written for the tenant.
    record: TenantRecord | None
    #: How many carriers wait parked for the tenant.
    parked: int

    @property
    def version(self) -> int:
        """The record's version (0: no record), which a park must find unchanged."""
        return 0 if self.record is None else self.record.version


class TenantDirectory(Protocol):
    """Tenants' status records, deployment-wide (no tenant scope needed), and the carriers
    parked while a tenant is suspended; every tenant id is validated (InvalidTenantIdError)."""

    async def get(self, tenant_id: str) -> TenantRecord | None:
        """The tenant's record, or None when none was ever written."""
        ...

    async def list(self) -> Sequence[TenantRecord]:
        """Every tenant with a record, by tenant id."""
        ...

    async def write(self, record: TenantRecord, *, expected_version: int) -> bool:
        """Store ``record`` if the stored version is still ``expected_version``.

        ``expected_version`` 0: no record may be stored yet. The tenant is indexed after the
        record; False (nothing written) when the stored version was another one.
        """
        ...

    async def admission(self, tenant_id: str) -> TenantAdmission:
        """The tenant's record and how many carriers it has parked (the gate's one read)."""
        ...

    async def park(self, envelope: TaskEnvelope, *, expected_version: int) -> bool:
        """Park the carrier if its tenant's record version is still ``expected_version``.

        The same carrier parked twice is kept once; False (nothing kept) when the version
        moved: the caller reads and decides again.
        """
        ...

    async def parked(self, tenant_id: str, *, limit: int) -> Sequence[ParkedCarrier]:
        """The oldest ``limit`` parked carriers of the tenant, oldest carrier timestamp first."""
        ...

    async def parked_count(self, tenant_id: str) -> int:
        """How many carriers wait parked for the tenant."""
        ...

    async def unpark(self, tenant_id: str, carrier_ids: Sequence[str]) -> int:
        """Forget these parked carriers (re-enqueued by the caller); how many were parked."""
        ...
