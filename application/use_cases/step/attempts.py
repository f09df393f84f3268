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

from plaita.application.ports import Clock, Counters, CounterStore, ExecutionRepository
from plaita.application.use_cases.executions import append_history_best_effort
from plaita.application.use_cases.step.dispatch import DispatchResult, Disposition
from plaita.domain import history
from plaita.domain.budgets import COUNTER_TTL_SECONDS, decide_crashed_attempts
from plaita.domain.execution import ExecutionState
from plaita.domain.lease import Lease

log = logging.getLogger("plaita.worker.step")

COUNTER_TTL_MS = COUNTER_TTL_SECONDS * 1000


class Attempts:
    def __init__(
        self,
        *,
        counters: CounterStore,
        max_deliveries: int,
        executions: ExecutionRepository,
        clock: Clock,
    ) -> None:
        self._counters = counters
        self._max_deliveries = max_deliveries
        self._executions = executions
        self._clock = clock

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
            crashed_under = counters.open_attempt
            counters = await self._counters.apply(
                lease.execution_id, crash.counter_changes, ttl_ms=COUNTER_TTL_MS
            )
            if state is not None and crashed_under is not None:
                # Nothing of the crashed step was checkpointed: this entry is all it leaves.
                entry = history.attempt_crashed(
                    self._clock.now_ms(),
                    node_id=node_id,
                    crashes=crash.crashes,
                    generation=crashed_under,
                    worker=lease.holder_id,
                )
                await append_history_best_effort(self._executions, lease.execution_id, entry)
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
