"""A dispatch's attempt, recorded with its execution (W2, ADR 0014).

A dispatch records its attempt under its lease generation before it runs anything, and
clears it when it returns. An attempt still open when the next dispatch begins never
returned: its worker died, or it lost its lease mid-step. ``decide_crashed_attempts`` counts
it against the node that can have been running; once ``--max-deliveries`` attempts crashed,
the carrier is given up — a dead letter that is no refusal, so the dead-letter guard makes
the execution terminal before it files one DLQ entry. Redis's delivery count plays no part.
"""

from __future__ import annotations

import logging

from plaita.application.ports import Counters, CounterStore
from plaita.application.use_cases.step.dispatch import DispatchResult, Disposition
from plaita.domain.budgets import COUNTER_TTL_SECONDS, decide_crashed_attempts
from plaita.domain.execution import ExecutionState
from plaita.domain.lease import Lease

log = logging.getLogger("plaita.worker.step")

COUNTER_TTL_MS = COUNTER_TTL_SECONDS * 1000


class Attempts:
    def __init__(self, *, counters: CounterStore, max_deliveries: int) -> None:
        self._counters = counters
        self._max_deliveries = max_deliveries

    async def begin(
        self, lease: Lease, state: ExecutionState | None, node_id: str | None
    ) -> Counters | DispatchResult:
        """Record this attempt; the counters after counting the one before it if it never
        returned — or the carrier given up, when ``node_id``'s attempts are spent."""
        counters = await self._counters.begin_attempt(
            lease.execution_id, lease.generation, ttl_ms=COUNTER_TTL_MS
        )
        crash = decide_crashed_attempts(
            node_id=node_id,
            node_crashes=counters.node_crashes.get(node_id or "", 0),
            previous_unfinished=counters.open_attempt is not None,
            max_deliveries=self._max_deliveries,
        )
        if crash.counter_changes:
            log.warning(
                "event=attempt.crashed execution_id=%s node_id=%s crashes=%d max_deliveries=%d: "
                "an earlier dispatch began under lease generation %s and never returned (its "
                "worker died or lost the lease)",
                lease.execution_id,
                node_id,
                crash.crashes,
                self._max_deliveries,
                counters.open_attempt,
            )
            counters = await self._counters.apply(
                lease.execution_id, crash.counter_changes, ttl_ms=COUNTER_TTL_MS
            )
        if not crash.budget_spent or (state is not None and state.is_terminal):
            return counters
        return DispatchResult(
            Disposition.DEAD_LETTER,
            "attempts_exhausted",
            f"{crash.crashes} attempts at node {node_id!r} crashed their worker "
            f"(--max-deliveries {self._max_deliveries})",
            refused=False,
        )

    async def end(self, lease: Lease) -> None:
        """The dispatch returned: clear its record, if it is still its own."""
        await self._counters.end_attempt(lease.execution_id, lease.generation)
