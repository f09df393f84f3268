"""In-memory twin of the Redis tenant directory: status records and parked carriers (W24).

Deployment-wide like the Redis keys: keyed by tenant id, whatever tenant scope is open.
Parked carriers are kept encoded, as on Redis.
"""

from __future__ import annotations

from collections.abc import Sequence

from plaita.application.codec import decode_envelope, encode_envelope
from plaita.application.ports import ParkedCarrier, TenantAdmission
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.operator_controls import parked_carrier_id
from plaita.domain.tenancy import validate_tenant_id
from plaita.domain.tenant_status import NO_VERSION, TenantRecord


class MemoryTenantDirectory:
    def __init__(self) -> None:
        self._records: dict[str, TenantRecord] = {}
        #: tenant → carrier id → (carrier timestamp, encoded envelope fields)
        self._parked: dict[str, dict[str, tuple[int, dict[str, str]]]] = {}

    async def get(self, tenant_id: str) -> TenantRecord | None:
        return self._records.get(validate_tenant_id(tenant_id))

    async def list(self) -> Sequence[TenantRecord]:
        return [self._records[tenant_id] for tenant_id in sorted(self._records)]

    async def write(self, record: TenantRecord, *, expected_version: int) -> bool:
        tenant_id = validate_tenant_id(record.tenant_id)
        if self._version(tenant_id) != expected_version:
            return False
        self._records[tenant_id] = record
        return True

    async def admission(self, tenant_id: str) -> TenantAdmission:
        tenant_id = validate_tenant_id(tenant_id)
        return TenantAdmission(self._records.get(tenant_id), len(self._parked.get(tenant_id, {})))

    async def park(self, envelope: TaskEnvelope, *, expected_version: int) -> bool:
        tenant_id = validate_tenant_id(envelope.tenant_id)
        if self._version(tenant_id) != expected_version:
            return False
        fields = encode_envelope(envelope)
        parked = self._parked.setdefault(tenant_id, {})
        parked.setdefault(parked_carrier_id(fields), (envelope.timestamp_ms, fields))
        return True

    async def parked(self, tenant_id: str, *, limit: int) -> Sequence[ParkedCarrier]:
        stored = self._parked.get(validate_tenant_id(tenant_id), {})
        oldest = sorted(stored.items(), key=lambda item: (item[1][0], item[0]))[:limit]
        return [
            ParkedCarrier(carrier_id, decode_envelope(fields)) for carrier_id, (_, fields) in oldest
        ]

    async def parked_count(self, tenant_id: str) -> int:
        return len(self._parked.get(validate_tenant_id(tenant_id), {}))

    async def unpark(self, tenant_id: str, carrier_ids: Sequence[str]) -> int:
        tenant_id = validate_tenant_id(tenant_id)
        parked = self._parked.get(tenant_id, {})
        removed = sum(parked.pop(carrier_id, None) is not None for carrier_id in set(carrier_ids))
        if not parked:
            self._parked.pop(tenant_id, None)
        return removed

    def _version(self, tenant_id: str) -> int:
        record = self._records.get(tenant_id)
        return NO_VERSION if record is None else record.version
