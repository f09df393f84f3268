"""Affinity (W25): a carrier that asks for one worker instance, and what another worker does.

A start may name the worker instance it should run on (``target_instance_id``, a worker's
``--consumer-name``). Every worker reads the same task stream, so any of them may take such a
carrier; ``decide_affinity`` says what the one that took it does:

| the carrier names | its target's registry record | action | reason |
| --- | --- | --- | --- |
| no target | not read | run here | ``no_target`` |
| this worker | not read | run here | ``target_is_this_worker`` |
| another, passed on ``max_handovers`` times | any | strip | ``handovers_exhausted`` |
| another | ``running``, heartbeat fresh | hand over | ``target_running`` |
| another | ``running``, heartbeat lapsed | strip | ``target_heartbeat_lapsed`` |
| another | any other status (starting, draining …) | strip | ``target_not_running`` |
| another | none | strip | ``target_absent`` |
| another | the read failed | hand over | ``registry_unreadable`` |
| another | no registry (``--no-registry``) | hand over | ``registry_disabled`` |

*Hand over*: enqueue a copy that counts one more hand-over, then ack the original — never the
other way round, so a crash in between leaves a duplicate (absorbed by the lease, the
checkpoint and the dedup rules), never a loss. The copy goes back onto the shared task stream,
where the target reads it like any carrier; the budget ends the passing on when the target
does not happen to read it. *Strip*: enqueue a copy without a target (any worker runs it),
then ack the original. Only ``running`` is dispatchable (the registry's allowlist): a target
that is starting, draining or gone gets nothing, and its carriers run elsewhere at once rather
than being passed around until the budget is spent. A registry that cannot be read keeps the
target (fail-open, bounded by the budget).
"""

from __future__ import annotations

import enum

import attrs

from plaita.domain.envelope import TaskEnvelope, copy_envelope
from plaita.domain.lease_conflict import heartbeat_fresh
from plaita.domain.worker_state import is_dispatchable

#: How often workers pass a carrier on towards its target before they strip the target
#: (``--affinity-max-handovers``). In a pool of N idle workers a hand-over reaches the target
#: within about N passes; raise it for pools larger than that.
DEFAULT_MAX_HANDOVERS = 16
#: The largest budget a worker accepts.
MAX_HANDOVERS_LIMIT = 1000

#: The step outcomes of the two ways a carrier leaves a worker that is not its target (the
#: worker acks the original; the metrics count them by these names).
HANDED_OVER = "handed_over"
TARGET_STRIPPED = "target_stripped"


class TargetView(enum.StrEnum):
    """What this worker knows of the target instance from the worker registry."""

    #: Its record says ``running``.
    RUNNING = "running"
    #: Its record says anything else: starting, draining, stopping, stopped, closed, or a value
    #: this build does not know (never taken for a live worker).
    NOT_RUNNING = "not_running"
    #: No record: it never registered, or it died and its record expired.
    ABSENT = "absent"
    #: The registry read failed.
    UNREADABLE = "unreadable"
    #: This worker runs without a registry (``--no-registry``): nothing can be known.
    NO_REGISTRY = "no_registry"


def target_view(status: str | None) -> TargetView:
    """The view of a target whose registry record has ``status`` (``None``: no record)."""
    if status is None:
        return TargetView.ABSENT
    return TargetView.RUNNING if is_dispatchable(status) else TargetView.NOT_RUNNING


class AffinityAction(enum.StrEnum):
    RUN_HERE = "run_here"
    HAND_OVER = "hand_over"
    STRIP = "strip"


class AffinityReason(enum.StrEnum):
    NO_TARGET = "no_target"
    TARGET_IS_THIS_WORKER = "target_is_this_worker"
    HANDOVERS_EXHAUSTED = "handovers_exhausted"
    TARGET_RUNNING = "target_running"
    TARGET_HEARTBEAT_LAPSED = "target_heartbeat_lapsed"
    TARGET_NOT_RUNNING = "target_not_running"
    TARGET_ABSENT = "target_absent"
    REGISTRY_UNREADABLE = "registry_unreadable"
    REGISTRY_DISABLED = "registry_disabled"


@attrs.frozen
class AffinityDecision:
    action: AffinityAction
    reason: AffinityReason

    @property
    def runs_here(self) -> bool:
        return self.action is AffinityAction.RUN_HERE


def decide_affinity(
    *,
    target: str | None,
    handovers: int,
    this_instance: str,
    view: TargetView | None,
    heartbeat_age_seconds: float | None,
    heartbeat_limit_seconds: float,
    max_handovers: int,
) -> AffinityDecision:
    """Run a carrier here, hand it over to its target, or strip its target (the table above).

    ``view`` and ``heartbeat_age_seconds`` describe the target's registry record (``None``
    when it was not read: only the first two rows need no record). A heartbeat is fresh by
    the lease conflict's rule (W5): from 0 up to ``heartbeat_limit_seconds`` old; one from the
    future proves nothing.
    """
    if target is None:
        return AffinityDecision(AffinityAction.RUN_HERE, AffinityReason.NO_TARGET)
    if target == this_instance:
        return AffinityDecision(AffinityAction.RUN_HERE, AffinityReason.TARGET_IS_THIS_WORKER)
    if handovers >= max_handovers:
        return _strip(AffinityReason.HANDOVERS_EXHAUSTED)
    if view is TargetView.RUNNING:
        if heartbeat_fresh(heartbeat_age_seconds, heartbeat_limit_seconds):
            return _hand_over(AffinityReason.TARGET_RUNNING)
        return _strip(AffinityReason.TARGET_HEARTBEAT_LAPSED)
    if view is TargetView.NOT_RUNNING:
        return _strip(AffinityReason.TARGET_NOT_RUNNING)
    if view is TargetView.ABSENT:
        return _strip(AffinityReason.TARGET_ABSENT)
    if view is TargetView.NO_REGISTRY:
        return _hand_over(AffinityReason.REGISTRY_DISABLED)
    # Unreadable, or not read although a target must be judged: keep the target (fail-open);
    # the budget bounds the passing on.
    return _hand_over(AffinityReason.REGISTRY_UNREADABLE)


def _strip(reason: AffinityReason) -> AffinityDecision:
    return AffinityDecision(AffinityAction.STRIP, reason)


def _hand_over(reason: AffinityReason) -> AffinityDecision:
    return AffinityDecision(AffinityAction.HAND_OVER, reason)


def affinity_copy(
    decision: AffinityDecision, source: TaskEnvelope, *, timestamp_ms: int | None
) -> TaskEnvelope | None:
    """The carrier to enqueue before the source is acked; None when the source runs here.

    A hand-over counts one more; a strip names no target (its count stays, as a record). Both
    keep the source's age (``timestamp_ms``: its stream-id time when older than its stamp,
    W14), schema version, tenant and generations (``copy_envelope``).
    """
    stamp = {} if timestamp_ms is None else {"timestamp_ms": timestamp_ms}
    if decision.action is AffinityAction.HAND_OVER:
        return copy_envelope(source, handovers=source.handovers + 1, **stamp)
    if decision.action is AffinityAction.STRIP:
        return copy_envelope(source, target_instance_id=None, **stamp)
    return None


def check_max_handovers(value: object) -> int:
    """A hand-over budget: a whole number from 0 (never pass on: strip at once) to 1000;
    ``ValueError`` otherwise."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_HANDOVERS_LIMIT
    ):
        raise ValueError(
            f"the affinity hand-over budget must be a whole number from 0 to "
            f"{MAX_HANDOVERS_LIMIT}, got {value!r}"
        )
    return value
