"""Budget counters of an execution (W2, W7, W8, E15), with a TTL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from plaita.domain.budgets import CounterChange, attempt_number


@attrs.frozen
class Counters:
    """An execution's budget counters (W2, W7, W8); absent counters read as 0."""

    node_retries: dict[str, int] = attrs.field(factory=dict)
    total_retries: int = 0
    wakeups: int = 0
    no_fail: int = 0
    #: Attempts of each node that crashed their worker (W2).
    node_crashes: dict[str, int] = attrs.field(factory=dict)
    #: The lease generation of a dispatch that began and has not ended, if any (W2).
    open_attempt: int | None = None

    def attempt(self, node_id: str | None) -> int:
        """The attempt number of ``node_id``'s next attempt, across deliveries (E15)."""
        key = node_id or ""
        return attempt_number(
            node_retries=self.node_retries.get(key, 0),
            node_crashes=self.node_crashes.get(key, 0),
        )

    def attempts(self) -> dict[str, int]:
        """The next attempt's number of every node that has had a failed or crashed one."""
        return {node: self.attempt(node) for node in {*self.node_retries, *self.node_crashes}}


class CounterStore(Protocol):
    """Counters kept beside the checkpoint, changed atomically, expiring with a TTL."""

    async def read(self, execution_id: str) -> Counters:
        """The execution's counters (0 for those never written)."""
        ...

    async def begin_attempt(self, execution_id: str, generation: int, *, ttl_ms: int) -> Counters:
        """Record that a dispatch under ``generation`` began; the counters as they were (W2).

        Atomic with the read: their ``open_attempt`` names an earlier dispatch that began and
        never ended. Refreshes the TTL like ``apply``.
        """
        ...

    async def end_attempt(self, execution_id: str, generation: int) -> bool:
        """Clear the open attempt if it is still ``generation``'s; False when it was not."""
        ...

    async def apply(
        self, execution_id: str, changes: Sequence[CounterChange], *, ttl_ms: int
    ) -> Counters:
        """Apply increments and resets atomically, refresh the TTL; the counters after."""
        ...
