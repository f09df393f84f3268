"""Leases and fences (W3, W4).

A lease says who may advance an execution; its generation is the fence every write carries.
Each acquisition takes the next generation of a counter that is never reset, so a holder that
lost its lease (paused, partitioned) can never write over the one that replaced it. The
holder renews every TTL/3, and at least every ``MAX_RENEWAL_INTERVAL_SECONDS``, and fences
itself off before the server could let the lease lapse.

**Liveness cadence (P6).** A live holder refreshes its lease and its carriers at every
renewal, and its registry record at every heartbeat: both at least every two seconds, whatever
the TTL. So a carrier idle for a few seconds, whose lease names a holder whose heartbeat is
older than ``stale_heartbeat_seconds``, is a dead (or frozen) holder's, and another worker may
take the execution over at once instead of waiting out a long TTL: the takeover acquires a
new generation, so a frozen holder that wakes up can write nothing (W4).
"""

from __future__ import annotations

import enum

import attrs

from plaita.domain.errors import ExecutionLeaseError


@attrs.frozen
class Lease:
    execution_id: str
    holder_id: str
    generation: int

    @property
    def value(self) -> str:
        """The value stored under the lease key: holder and generation."""
        return f"{self.holder_id}|{self.generation}"


def parse_lease_value(execution_id: str, value: str) -> Lease:
    holder, _, generation = value.rpartition("|")
    return Lease(execution_id=execution_id, holder_id=holder, generation=int(generation))


def next_generation(current: int | None) -> int:
    return 1 if current is None else current + 1


def write_allowed(fence: int, current_generation: int | None) -> bool:
    """A write is valid only under the generation the last acquisition handed out (W4)."""
    return current_generation is not None and fence == current_generation


def check_fence(execution_id: str, fence: int, current_generation: int | None) -> None:
    if not write_allowed(fence, current_generation):
        raise ExecutionLeaseError(
            f"execution {execution_id}: write with fence {fence} rejected, the current lease "
            f"generation is {current_generation}; another worker has taken over this execution"
        )


#: A holder renews (and refreshes its carriers) at least this often, whatever the TTL.
MAX_RENEWAL_INTERVAL_SECONDS = 2.0
#: A worker's registry heartbeat comes at least this often, whatever the TTL (W16).
MAX_HEARTBEAT_SECONDS = 2.0
#: A heartbeat older than this many intervals is a dead or frozen holder's.
STALE_HEARTBEATS = 2


def renewal_interval_seconds(ttl_seconds: float) -> float:
    """How often a holder renews its lease and refreshes its carriers' idle time."""
    return min(ttl_seconds / 3, MAX_RENEWAL_INTERVAL_SECONDS)


def heartbeat_interval_seconds(ttl_seconds: float) -> float:
    """How often a worker of this lease TTL writes its registry heartbeat."""
    return min(ttl_seconds / 3, MAX_HEARTBEAT_SECONDS)


def stale_heartbeat_seconds(ttl_seconds: float) -> float:
    """A holder's heartbeat older than this says it is dead or frozen (P6)."""
    return STALE_HEARTBEATS * heartbeat_interval_seconds(ttl_seconds)


# --- writes under the fence: fence == fencegen == mine (W4) ----------------------------


class WriteVerdict(enum.Enum):
    ALLOWED = "allowed"
    #: No acquisition ever handed out a generation: nobody may write.
    NO_GENERATION = "no_generation"
    #: A newer acquisition happened: this holder was replaced.
    SUPERSEDED = "superseded"
    #: The counter is below this holder's fence. It is never reset (W4), so the store was
    #: rolled back; a write now could land under a generation someone else will be given.
    COUNTER_REWOUND = "counter_rewound"
    #: The recorded fence is gone: the execution was deleted or its lease revoked (W13).
    REVOKED = "revoked"
    #: The recorded fence disagrees with the counter: state and fence were restored from a
    #: backup while the counter moved on (A2R25-04/05), so this holder's right is not proven.
    FENCE_MISMATCH = "fence_mismatch"


def judge_write(mine: int, fencegen: int | None, recorded_fence: int | None) -> WriteVerdict:
    """Whether a holder with fence ``mine`` may write: only when fence == fencegen == mine.

    ``fencegen`` is the never-reset generation counter; ``recorded_fence`` is the generation
    recorded with the current lease (the ``fence`` key, W4). Checking the counter alone
    would let a stale holder write again after an old state and fence were restored.
    """
    if fencegen is None:
        return WriteVerdict.NO_GENERATION
    if mine < fencegen:
        return WriteVerdict.SUPERSEDED
    if mine > fencegen:
        return WriteVerdict.COUNTER_REWOUND
    if recorded_fence is None:
        return WriteVerdict.REVOKED
    if recorded_fence != fencegen:
        return WriteVerdict.FENCE_MISMATCH
    return WriteVerdict.ALLOWED


def fenced_write_allowed(mine: int, fencegen: int | None, recorded_fence: int | None) -> bool:
    return judge_write(mine, fencegen, recorded_fence) is WriteVerdict.ALLOWED


def check_fenced_write(
    execution_id: str, mine: int, fencegen: int | None, recorded_fence: int | None
) -> None:
    """Raise ``ExecutionLeaseError`` unless fence == fencegen == mine (for store adapters)."""
    verdict = judge_write(mine, fencegen, recorded_fence)
    if verdict is not WriteVerdict.ALLOWED:
        raise ExecutionLeaseError(
            f"execution {execution_id}: write with fence {mine} rejected ({verdict.value}: "
            f"generation counter {fencegen}, recorded fence {recorded_fence}); another worker "
            "has taken over, or the execution was deleted or restored"
        )


# --- the watchdog: renew every TTL/3, fence itself before the server could expire it (W3) --

#: Share of the TTL the holder gives up at the end of its lease. The server counts the TTL on
#: its own clock from a moment we do not observe: clocks drift and are slewed, a failover
#: promotes a replica whose clock differs, and a write already on the wire lands after we
#: decide to stop. So the lease may expire on the server before our monotonic clock says so;
#: stopping 10 % early absorbs that. It stays below 1/3 so that two renewals (at TTL/3 and
#: 2·TTL/3) are attempted before a holder fences itself: one failed call never fences.
LEASE_SAFETY_MARGIN_FRACTION = 0.1

#: Pause before retrying a renewal that failed with an error (a store outage), capped by the
#: time left before the holder must fence itself.
RENEWAL_RETRY_SECONDS = 1.0


def lease_safety_margin_seconds(ttl_seconds: float) -> float:
    return ttl_seconds * LEASE_SAFETY_MARGIN_FRACTION


class RenewalOutcome(enum.Enum):
    #: The store extended our lease: it was still ours when the call ran.
    RENEWED = "renewed"
    #: The store answered that the lease is not ours any more (expired or taken over).
    LOST = "lost"
    #: No answer (timeout, connection error): we do not know.
    FAILED = "failed"


class RenewalAction(enum.Enum):
    KEEP_GOING = "keep_going"
    RETRY_SOON = "retry_soon"
    SELF_FENCE = "self_fence"


@attrs.frozen
class RenewalDecision:
    action: RenewalAction
    #: Monotonic time the lease is known to run from after this attempt.
    last_renewed_at: float
    #: Monotonic time at which the holder must fence itself if no renewal succeeds by then;
    #: a hung renewal call must be given up at this moment, not when it returns.
    fence_at: float
    #: Seconds until the next renewal attempt (0 when the holder fences itself).
    next_attempt_in: float

    @property
    def refresh_liveness(self) -> bool:
        """Only a successful renewal refreshes the node heartbeat (W15) and the pending
        entries of our carriers (W5): after a loss they must age so others can reclaim them."""
        return self.action is RenewalAction.KEEP_GOING


def self_fence_at(last_renewed_at: float, ttl_seconds: float, margin_seconds: float) -> float:
    return last_renewed_at + ttl_seconds - margin_seconds


def decide_renewal(
    *,
    ttl_seconds: float,
    last_renewed_at: float,
    sent_at: float,
    now: float,
    outcome: RenewalOutcome,
    margin_seconds: float | None = None,
) -> RenewalDecision:
    """What the lease watchdog does after one renewal attempt (W3).

    All times are monotonic readings: ``sent_at`` when this attempt was sent, ``now`` when its
    result arrived. A successful renewal counts from ``sent_at``: the server restarted the TTL
    at some moment between the two, and counting from ``now`` would overstate the lease.
    """
    margin = lease_safety_margin_seconds(ttl_seconds) if margin_seconds is None else margin_seconds
    renewed = outcome is RenewalOutcome.RENEWED
    anchor = max(last_renewed_at, sent_at) if renewed else last_renewed_at
    fence_at = self_fence_at(anchor, ttl_seconds, margin)
    # A renewal whose answer arrives after its own safe window proves nothing about now:
    # the lease it extended may already have run out on the server.
    if outcome is RenewalOutcome.LOST or now >= fence_at:
        return RenewalDecision(RenewalAction.SELF_FENCE, anchor, fence_at, next_attempt_in=0.0)
    if renewed:
        next_in = max(0.0, renewal_interval_seconds(ttl_seconds) - (now - anchor))
        return RenewalDecision(RenewalAction.KEEP_GOING, anchor, fence_at, next_attempt_in=next_in)
    next_in = min(RENEWAL_RETRY_SECONDS, fence_at - now)
    return RenewalDecision(RenewalAction.RETRY_SOON, anchor, fence_at, next_attempt_in=next_in)
