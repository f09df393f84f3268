"""The rate gate of the step loop (W23, W2, W8): a task or http node with a ``rate_limit`` runs
only when its bucket gives a token.

Over the limit, the node is not run and no attempt is spent: the pending history and a
``rate_limited`` entry are checkpointed, and a continue copy of the carrier goes on the delay
queue for the moment a token is due (after the lease is released, as a retry's copy does);
the dispatch returns normally, so its attempt record is cleared. The copy carries the origin
``rate_limit``, so the dispatch that finally runs the node knows a waiting note may exist
and clears it — a step that was never held back pays no extra round trip.

One ``rate_limited`` entry per held-back node, not per try: a copy whose first node is held
back again (nothing ran before it in this dispatch) is the same wait — the execution was
checkpointed at that node by the hold that wrote the copy, and whoever moved it elsewhere
since went through that node's gate itself. Such a re-hold rewrites the waiting note (its
new due time) and schedules the next copy, with no history entry and no checkpoint unless
the state changed: the bucket's two round trips and the note's one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable

import attrs

from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.distributed import StepOutcome
from plaita.application.engine.rate_limits import key_failure, rate_key, rate_limit_of
from plaita.application.ports import Clock, RateBuckets, WaitingNotes
from plaita.application.use_cases.step.dispatch import DispatchResult, Disposition
from plaita.application.use_cases.step.writes import Writes
from plaita.domain import history
from plaita.domain.envelope import TaskEnvelope, continue_copy
from plaita.domain.errors import RateLimitKeyError
from plaita.domain.execution import ExecutionState
from plaita.domain.failures import FlowErrorException
from plaita.domain.flow import Flow, HttpNode, TaskNode
from plaita.domain.flow_control import Waiting, WaitReason
from plaita.domain.history import HistoryEntry

log = logging.getLogger("plaita.worker.step")

#: The ``origin`` of a carrier written by a rate limit hold (see the module docstring).
RATE_LIMITED_ORIGIN = "rate_limit"
RATE_LIMITED = "rate_limited"


@attrs.frozen
class RateHold:
    """A node held back by its rate limit: its bucket ``key`` gives a token at ``due_ms``."""

    node_id: str
    key: str
    due_ms: int


class RateLimits:
    """The rate gates of a worker's dispatches, over the tenant's buckets."""

    def __init__(self, *, buckets: RateBuckets, notes: WaitingNotes, clock: Clock) -> None:
        self.buckets = buckets
        self.notes = notes
        self.clock = clock

    def gate(self, envelope: TaskEnvelope, writes: Writes) -> RateGate:
        """The gate of one dispatch of ``envelope`` (it remembers whether the carrier was
        held back before)."""
        return RateGate(self, envelope, writes)


class RateGate:
    def __init__(self, limits: RateLimits, envelope: TaskEnvelope, writes: Writes) -> None:
        self._buckets, self._notes, self._clock = limits.buckets, limits.notes, limits.clock
        self._envelope, self._writes = envelope, writes
        #: Written by a hold: a waiting note may exist until the node runs.
        self._noted = envelope.origin == RATE_LIMITED_ORIGIN
        #: Gates checked in this dispatch (the first one of a copy is its held-back node).
        self._checks = 0

    async def check(
        self, flow: Flow, node_id: str, context: ExecutionContext
    ) -> RateHold | FlowErrorException | None:
        """None when the node may run now (it has no limit, or took a token); a hold when it
        must wait; the node's failure when its key expression does not render."""
        self._checks += 1
        node = flow.node(node_id)
        rule = rate_limit_of(flow.flow_id, node)
        if rule is None:
            return None
        assert isinstance(node, TaskNode | HttpNode)
        try:
            key = rate_key(flow.flow_id, node, context)
        except RateLimitKeyError as exc:
            error = StepOutcome.failed(node_id, key_failure(node_id, exc)).error
            assert error is not None
            return error
        take = await self._buckets.take(key, rule, now_ms=self._clock.now_ms())
        if not take.allowed:
            return RateHold(node_id, key, take.due_ms)
        if self._noted:
            self._noted = False
            await self._best_effort(self._notes.clear(self._envelope.execution_id), "clear")
        return None

    async def hold(
        self,
        state: ExecutionState,
        hold: RateHold,
        *,
        previous: ExecutionState | None,
        pending: list[HistoryEntry],
    ) -> DispatchResult:
        """Checkpoint what happened and the hold, and answer: ack, once its continue copy is
        on the delay queue for the due time (W8: persist, release, schedule, ack). A copy held
        back again at its node writes no second entry (see the module docstring)."""
        now_ms = self._clock.now_ms()
        again = self._noted and self._checks == 1 and not pending
        if not again:
            entry = history.rate_limited(
                now_ms,
                node_id=hold.node_id,
                worker=self._writes.worker,
                key=hold.key,
                due_ms=hold.due_ms,
            )
            await self._writes.checkpoint(state, previous=previous, history=[*pending, entry])
        elif state != previous:
            await self._writes.checkpoint(state, previous=previous)
        waiting = Waiting(
            reason=WaitReason.RATE_LIMIT,
            since_ms=now_ms,
            detail=f"node {hold.node_id!r} waits for a token of rate limit {hold.key!r}; "
            "it runs when one is due",
            key=hold.key,
            due_ms=hold.due_ms,
        )
        await self._best_effort(self._notes.note(state.execution_id, waiting), "note")
        copy = continue_copy(self._envelope, origin=RATE_LIMITED_ORIGIN)
        log.info(
            "event=node.rate_limited execution_id=%s node_id=%s key=%r due_ms=%d again=%s",
            state.execution_id,
            hold.node_id,
            hold.key,
            hold.due_ms,
            str(again).lower(),
        )
        detail = f"node {hold.node_id!r} over its rate limit {hold.key!r}"
        return DispatchResult(
            Disposition.ACK,
            RATE_LIMITED,
            detail,
            schedule=((copy, hold.due_ms),),
            waited=WaitReason.RATE_LIMIT,
        )

    async def _best_effort(self, write: Awaitable[None], what: str) -> None:
        # A note only shows an operator why the execution waits; it never decides anything.
        try:
            await write
        except Exception as exc:
            log.warning(
                "event=rate_limit.note_failed execution_id=%s action=%s error=%r: the console "
                "may not show (or may keep showing) the rate limit wait; nothing else changes",
                self._envelope.execution_id,
                what,
                exc,
            )
