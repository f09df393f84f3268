"""In-memory twin of the flow-control notes: why an execution waits, expiring like Redis's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from plaita.adapters.memory.tenancy import ScopedId, scoped
from plaita.application.ports import Clock
from plaita.domain.flow_control import WAITING_NOTE_TTL_MS, Waiting


class MemoryWaitingNotes:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        #: execution → (note, when it expires in wall-clock ms)
        self._notes: dict[ScopedId, tuple[Waiting, int]] = {}

    async def note(self, execution_id: str, waiting: Waiting) -> None:
        self._notes[scoped(execution_id)] = (waiting, self._clock.now_ms() + WAITING_NOTE_TTL_MS)

    async def clear(self, execution_id: str) -> None:
        self._notes.pop(scoped(execution_id), None)

    async def get(self, execution_id: str) -> Waiting | None:
        return self._read(scoped(execution_id))

    async def get_many(self, execution_ids: Sequence[str]) -> Mapping[str, Waiting]:
        found = {execution_id: self._read(scoped(execution_id)) for execution_id in execution_ids}
        return {execution_id: note for execution_id, note in found.items() if note is not None}

    def _read(self, key: ScopedId) -> Waiting | None:
        stored = self._notes.get(key)
        if stored is None:
            return None
        note, expires_at = stored
        if self._clock.now_ms() >= expires_at:
            del self._notes[key]
            return None
        return note
