"""In-memory twin of the Redis execution controls: operator flags and parked carriers (W23)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from plaita.adapters.memory.tenancy import ScopedId, scoped
from plaita.application.codec import decode_envelope, encode_envelope
from plaita.application.ports import Admission, ParkedCarrier
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.operator_controls import ControlFlags, parked_carrier_id, should_park


class MemoryExecutionControls:
    """ExecutionControls in memory; parked carriers are kept encoded, as on Redis."""

    def __init__(self) -> None:
        self._flags: dict[ScopedId, ControlFlags] = {}
        #: execution → carrier id → encoded envelope fields
        self._parked: dict[ScopedId, dict[str, dict[str, str]]] = {}

    async def get(self, execution_id: str) -> ControlFlags:
        return self._read(scoped(execution_id))

    async def get_many(self, execution_ids: Sequence[str]) -> Mapping[str, ControlFlags]:
        return {execution_id: self._read(scoped(execution_id)) for execution_id in execution_ids}

    async def set_flags(
        self,
        execution_id: str,
        *,
        paused: bool | None = None,
        cancel_requested: bool | None = None,
    ) -> ControlFlags:
        key = scoped(execution_id)
        flags = self._flags.get(key, ControlFlags())
        if paused is not None:
            flags = attrs.evolve(flags, paused=paused)
        if cancel_requested is not None:
            flags = attrs.evolve(flags, cancel_requested=cancel_requested)
        if flags.paused or flags.cancel_requested:
            self._flags[key] = flags
        else:
            self._flags.pop(key, None)  # like HDEL emptying the hash: the key disappears
        return self._read(key)

    async def admit(self, envelope: TaskEnvelope, *, parkable: bool) -> Admission:
        key = scoped(envelope.execution_id)
        flags = self._read(key)
        if should_park(flags, parkable=parkable):
            fields = encode_envelope(envelope)
            self._parked.setdefault(key, {})[parked_carrier_id(fields)] = fields
            return Admission(self._read(key), parked=True)
        stranded = () if flags.paused else tuple(self._carriers(key))
        return Admission(flags, stranded=stranded)

    async def parked(self, execution_id: str) -> Sequence[ParkedCarrier]:
        return self._carriers(scoped(execution_id))

    async def unpark(self, execution_id: str, carrier_ids: Sequence[str]) -> int:
        key = scoped(execution_id)
        parked = self._parked.get(key, {})
        removed = sum(parked.pop(carrier_id, None) is not None for carrier_id in set(carrier_ids))
        if not parked:
            self._parked.pop(key, None)
        return removed

    async def clear(self, execution_id: str) -> None:
        key = scoped(execution_id)
        self._flags.pop(key, None)
        self._parked.pop(key, None)

    def _read(self, key: ScopedId) -> ControlFlags:
        flags = self._flags.get(key, ControlFlags())
        return attrs.evolve(flags, parked=len(self._parked.get(key, {})))

    def _carriers(self, key: ScopedId) -> list[ParkedCarrier]:
        carriers = [
            ParkedCarrier(carrier_id, decode_envelope(fields))
            for carrier_id, fields in self._parked.get(key, {}).items()
        ]
        carriers.sort(key=lambda carrier: (carrier.envelope.timestamp_ms, carrier.carrier_id))
        return carriers
