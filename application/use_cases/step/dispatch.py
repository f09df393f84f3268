"""The values a worker step passes along: the carrier it was given, what it answers (ack,
leave pending, dead-letter) and the settings it runs under. All frozen."""

from __future__ import annotations

import enum

import attrs

from plaita.domain.affinity import DEFAULT_MAX_HANDOVERS, check_max_handovers
from plaita.domain.budgets import DEFAULT_RETRIES
from plaita.domain.envelope import CarrierGenerations, TaskEnvelope
from plaita.domain.flow_control import WaitReason
from plaita.domain.http_calls import DEFAULT_HTTP_POLICY, HttpPolicy
from plaita.domain.tombstone import DEFAULT_CARRIER_MAX_AGE_MS


@attrs.frozen
class Carrier:
    """The carrier a step was handed: its envelope, where it sits in the stream, whether it
    was reclaimed from another consumer (W5), and how often the stream delivered it (logged
    only: attempts are counted with the execution, W2)."""

    envelope: TaskEnvelope
    message_id: str | None = None
    reclaimed: bool = False
    deliveries: int = 1

    @property
    def execution_id(self) -> str:
        return self.envelope.execution_id


class Disposition(enum.Enum):
    ACK = "ack"
    LEAVE_PENDING = "leave_pending"
    DEAD_LETTER = "dead_letter"


@attrs.frozen
class DispatchResult:
    disposition: Disposition
    outcome: str
    detail: str = ""
    #: Carriers to put on the delay queue after the lease is released and before the ack
    #: (W8: persist → release → schedule the copy → ack the original).
    schedule: tuple[tuple[TaskEnvelope, int], ...] = ()
    #: Carriers to enqueue after the lease is released and before the ack (a hand-over to a
    #: fresh carrier): enqueued earlier, one could meet its own holder's lease and, as a
    #: first-delivery continue with a live holder, be acked without effect (W5, I0).
    enqueue: tuple[TaskEnvelope, ...] = ()
    #: A dead letter refused for what the carrier is (W9: released once, never copied); False
    #: when the carrier is given up on, so the guard may terminalise its execution first.
    refused: bool = True
    #: The execution runs on with the carrier scheduled or enqueued here (a retry, a
    #: hand-over): it keeps its slots (E1a) until that carrier's dispatch ends.
    continues: bool = False
    #: Why the carrier was kept to wait for room to run (flow control), counted by reason.
    waited: WaitReason | None = None


def ack(outcome: str, detail: str = "") -> DispatchResult:
    return DispatchResult(Disposition.ACK, outcome, detail)


@attrs.frozen
class StepSettings:
    holder_id: str
    #: This worker's config family and generations (W12): the consume gate compares every
    #: carrier's with them, and the carriers the worker writes anew (timers, the hand-over
    #: continue) are stamped with them. Required: a worker without them would gate nothing.
    generations: CarrierGenerations = attrs.field(kw_only=True)
    lease_ttl_ms: int = 120_000
    default_deadline_ms: int = 1_800_000
    #: Retries of a node without ``retryTimes`` (E15, ``--default-retries``).
    default_retries: int = DEFAULT_RETRIES
    #: http nodes' SSRF floor and response cap (E11, ``PLAITA_HTTP_*``).
    http_policy: HttpPolicy = DEFAULT_HTTP_POLICY
    #: A dispatch that ran this many nodes hands over to a fresh carrier (loops stay fair).
    max_steps_per_dispatch: int = 1000
    max_deliveries: int = 5
    max_carrier_age_ms: int = DEFAULT_CARRIER_MAX_AGE_MS
    holder_liveness_disabled: bool = False
    #: Off with ``--no-registry``: no holder is ever provably alive, so a lease conflict never
    #: acks a carrier (W5, B65-03).
    registry_enabled: bool = True
    #: W25: how often a carrier that names another worker is passed on towards it before
    #: its target is stripped (``--affinity-max-handovers``); 0 strips at once.
    max_handovers: int = attrs.field(
        default=DEFAULT_MAX_HANDOVERS, validator=lambda _s, _a, value: check_max_handovers(value)
    )
    #: W24: the deployment epoch (``PLAITA_DEPLOYMENT_EPOCH``) the tenant gate judges a
    #: tenant's status by; None: no epoch rule.
    deployment_epoch: int | None = None
