"""Why an execution waits for room to run (flow control), beside its checkpoint."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from plaita.domain.flow_control import Waiting


class WaitingNotes(Protocol):
    """One note per execution of the current tenant, written without the lease.

    Best effort for the worker: a note that failed to be written only hides a reason from
    the console; it never decides anything. A note expires on its own after
    ``WAITING_NOTE_TTL_MS`` should nothing clear it.
    """

    async def note(self, execution_id: str, waiting: Waiting) -> None:
        """Record why ``execution_id`` waits, replacing any earlier note."""
        ...

    async def clear(self, execution_id: str) -> None:
        """Forget the note: the execution runs again (a no-op without one)."""
        ...

    async def get(self, execution_id: str) -> Waiting | None:
        """The note, or None."""
        ...

    async def get_many(self, execution_ids: Sequence[str]) -> Mapping[str, Waiting]:
        """The notes of those executions that have one, in one round trip."""
        ...
