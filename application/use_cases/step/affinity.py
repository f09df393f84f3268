"""The affinity gate (W25): a carrier that names another worker instance is passed on to it,
or its target is stripped; the rules are ``plaita.domain.affinity``'s.

Before the lease (a carrier that does not run here must not take it), after the generation,
age and tombstone gates (a foreign, too old or deleted carrier is not passed on). The copy —
one more hand-over, or no target — is enqueued on the task stream first; the step answers
ACK only once it is there, so the worker acks the original after the copy exists. A failed
enqueue raises: the dispatch ends without an answer and the original stays pending, for a
reclaim (at least once, never a loss).
"""

from __future__ import annotations

import logging

from plaita.application.ports import (
    Clock,
    ExecutionRepository,
    TaskQueue,
    WorkerRegistry,
)
from plaita.application.use_cases.executions import append_history_best_effort
from plaita.application.use_cases.step.dispatch import (
    Carrier,
    DispatchResult,
    StepSettings,
    ack,
)
from plaita.domain import history
from plaita.domain.affinity import (
    HANDED_OVER,
    TARGET_STRIPPED,
    AffinityAction,
    AffinityDecision,
    TargetView,
    affinity_copy,
    decide_affinity,
    target_view,
)
from plaita.domain.tombstone import copy_timestamp_ms

log = logging.getLogger("plaita.worker.step")


class AffinityGate:
    def __init__(
        self,
        *,
        registry: WorkerRegistry,
        queue: TaskQueue,
        executions: ExecutionRepository,
        clock: Clock,
        settings: StepSettings,
    ) -> None:
        self._registry = registry
        self._queue = queue
        self._executions = executions
        self._clock = clock
        self._settings = settings

    async def route(self, carrier: Carrier) -> DispatchResult | None:
        """None when the carrier runs here; else the ACK of a carrier passed on or stripped,
        once its copy is enqueued."""
        envelope = carrier.envelope
        target = envelope.target_instance_id
        view: TargetView | None = None
        heartbeat_age: float | None = None
        if target is not None and target != self._settings.holder_id:
            view, heartbeat_age = await self._look_up(target)
        decision = decide_affinity(
            target=target,
            handovers=envelope.handovers,
            this_instance=self._settings.holder_id,
            view=view,
            heartbeat_age_seconds=heartbeat_age,
            heartbeat_limit_seconds=self._settings.lease_ttl_ms / 1000,
            max_handovers=self._settings.max_handovers,
        )
        if decision.runs_here:
            return None
        assert target is not None, "only a carrier with a target is passed on or stripped"
        now_ms = self._clock.now_ms()
        stamp = copy_timestamp_ms(
            now_ms=now_ms, payload_timestamp_ms=envelope.timestamp_ms, stream_id=carrier.message_id
        )
        copy = affinity_copy(decision, envelope, timestamp_ms=stamp)
        assert copy is not None
        await self._queue.enqueue(copy)  # the copy first; the worker acks the original after
        await self._record(carrier, decision, target, copy.handovers, now_ms)
        if decision.action is AffinityAction.HAND_OVER:
            return ack(
                HANDED_OVER,
                f"passed on to {target} ({decision.reason.value}); hand-over "
                f"{copy.handovers} of at most {self._settings.max_handovers} (W25)",
            )
        return ack(
            TARGET_STRIPPED,
            f"target {target} dropped ({decision.reason.value}) after {copy.handovers} "
            "hand-over(s); any worker runs it (W25)",
        )

    async def _look_up(self, target: str) -> tuple[TargetView, float | None]:
        """The target's registry view and heartbeat age in seconds (None without a record)."""
        if not self._settings.registry_enabled:
            return TargetView.NO_REGISTRY, None
        try:
            instance = await self._registry.get(target)
        except Exception as exc:
            log.warning(
                "event=affinity.registry_unreadable target=%s error=%r: the carrier is passed "
                "on as if the target ran; the hand-over budget bounds it",
                target,
                exc,
            )
            return TargetView.UNREADABLE, None
        if instance is None:
            return TargetView.ABSENT, None
        age = (self._clock.now_ms() - instance.heartbeat_ms) / 1000
        return target_view(instance.status), age

    async def _record(
        self,
        carrier: Carrier,
        decision: AffinityDecision,
        target: str,
        handovers: int,
        now_ms: int,
    ) -> None:
        """The log line and the history entry (best effort: the copy is what matters)."""
        worker = self._settings.holder_id
        handed = decision.action is AffinityAction.HAND_OVER
        build = history.handed_over if handed else history.target_stripped
        entry = build(
            now_ms, worker=worker, target=target, handovers=handovers, reason=decision.reason.value
        )
        facts = (carrier.execution_id, carrier.message_id, target, handovers, decision.reason.value)
        if handed:
            log.info(
                "event=affinity.handed_over execution_id=%s message_id=%s target=%s "
                "handovers=%d reason=%s: passed on towards its target",
                *facts,
            )
        else:
            log.warning(
                "event=affinity.target_stripped execution_id=%s message_id=%s target=%s "
                "handovers=%d reason=%s: any worker runs it now",
                *facts,
            )
        await append_history_best_effort(self._executions, carrier.execution_id, entry)
