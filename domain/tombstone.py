"""Delete = revoke + tombstone (W13) and the carrier-age gate (W14).

A deleted execution leaves a tombstone so no carrier still queued or pending can bring it
back; once the tombstone expires, the age gate drops those carriers instead. The two rules
meet in ``tombstone_ttl_seconds``: a tombstone never needs to outlive the oldest carrier the
age gate still lets through.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

DAY_MS = 24 * 60 * 60 * 1000
DEFAULT_TOMBSTONE_TTL_SECONDS = 30 * 24 * 60 * 60
DEFAULT_CARRIER_MAX_AGE_MS = 30 * DAY_MS
DEFAULT_TENANT = "default"
#: Redis stream ids are two unsigned 64-bit numbers; more digits cannot be one.
_MAX_ID_DIGITS = 20
_MAX_U64 = 2**64 - 1


def _tenant(tenant_id: str | None) -> str:
    # Key routing sends an empty or absent tenant to the default namespace (W24).
    return tenant_id or DEFAULT_TENANT


@attrs.frozen
class Tombstone:
    tenant_id: str
    deleted_at_ms: int
    reason: str

    def blocks(self, tenant_id: str | None) -> bool:
        """Only the deleting tenant's carriers are blocked (A51-01).

        Executions live in their tenant's namespace, so the same id under another tenant is
        another execution; blocking it would let one tenant's delete deny service to another.
        """
        return _tenant(tenant_id) == _tenant(self.tenant_id)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Tombstone:
        return cls(str(raw["tenant_id"]), int(raw["deleted_at_ms"]), str(raw["reason"]))


def record_delete(
    existing: Tombstone | None, *, tenant_id: str, now_ms: int, reason: str
) -> Tombstone:
    """A second delete keeps the first record, so ``deleted_at`` stays the moment of revocation."""
    return existing if existing is not None else Tombstone(_tenant(tenant_id), now_ms, reason)


def refreshed_ttl_seconds(remaining_seconds: int | None, ttl_seconds: int) -> int | None:
    """A second delete only ever extends the TTL; ``None`` (no expiry, a legacy record) stays."""
    return None if remaining_seconds is None else max(remaining_seconds, ttl_seconds)


@attrs.frozen
class TombstoneTtl:
    seconds: int
    fell_back_to_default: bool  # the configured TTL was <= 0: log a WARNING
    clamped_to_max_age: bool  # the lower bounds exceeded the carrier max age


def tombstone_ttl_seconds(
    *, configured_seconds: int | None, state_ttl_seconds: int, carrier_max_age_ms: int
) -> TombstoneTtl:
    """TTL >= 30 days, >= the state TTL, <= the carrier max age (W13).

    When the bounds conflict the carrier max age wins: every carrier that existed before the
    delete, and every copy of it (copies keep the source age), is older than the max age by
    the time a clamped tombstone expires, so the age gate already drops it. The lower bounds
    only matter while such a carrier can still pass the age gate. What stays open is a fresh
    carrier aimed at a state row restored after the tombstone expired (the B52-02 horizon).
    ``state_ttl_seconds`` and ``carrier_max_age_ms`` of 0 mean "no TTL" and "gate disabled":
    neither is a bound then.
    """
    fell_back = configured_seconds is not None and configured_seconds <= 0
    seconds = max(configured_seconds or 0, DEFAULT_TOMBSTONE_TTL_SECONDS, state_ttl_seconds)
    # Whole seconds for EXPIRE, and never 0, which Redis refuses.
    max_age_ms = effective_max_age_ms(carrier_max_age_ms)
    ceiling = max(1, max_age_ms // 1000)
    clamped = max_age_ms > 0 and seconds > ceiling
    return TombstoneTtl(ceiling if clamped else seconds, fell_back, clamped)


class DispatchPath(enum.StrEnum):
    START = "start"
    RESUME = "resume"
    DEDUP_HIT = "dedup_hit"
    RETRY_COPY = "retry_copy"
    GUARD_CLONE = "guard_clone"


class GateAction(enum.StrEnum):
    DISPATCH = "dispatch"
    DROP_CARRIER = "drop_carrier"  # ack it unrun; the execution is gone
    SKIP_COPY = "skip_copy"  # enqueue nothing; the original is released as usual


@attrs.frozen
class GateDecision:
    action: GateAction
    release_dedup: bool = False  # free a start dedup mapping that points at a deleted id


def gate(
    path: DispatchPath, *, tombstone: Tombstone | None, carrier_tenant: str | None
) -> GateDecision:
    """Every dispatch path checks the tombstone before it can (re)create work (W13)."""
    if tombstone is None or not tombstone.blocks(carrier_tenant):
        return GateDecision(GateAction.DISPATCH)
    if path in (DispatchPath.RETRY_COPY, DispatchPath.GUARD_CLONE):
        return GateDecision(GateAction.SKIP_COPY)
    # A dropped start must not leave its dedup key pinned to the deleted id (A51-01).
    return GateDecision(
        GateAction.DROP_CARRIER,
        release_dedup=path in (DispatchPath.START, DispatchPath.DEDUP_HIT),
    )


# --- carrier age (W14) ------------------------------------------------------------------


def parse_stream_id_ms(stream_id: str) -> int | None:
    """The millisecond part of a ``"<ms>-<seq>"`` stream id, or None when it is not one."""
    ms, dash, seq = stream_id.partition("-")
    for part in (ms, seq):
        if not (dash and part.isascii() and part.isdigit() and len(part) <= _MAX_ID_DIGITS):
            return None
        if int(part) > _MAX_U64:
            return None
    return int(ms)


def effective_max_age_ms(max_age_ms: int) -> int:
    """0 disables the age gate; a negative value is a configuration mistake and gets the
    default rather than no gate (the start-up validation should have refused it, W21)."""
    return DEFAULT_CARRIER_MAX_AGE_MS if max_age_ms < 0 else max_age_ms


def _source_times(payload_timestamp_ms: int | None, stream_id: str | None) -> list[int] | None:
    # Every source present must parse: max(age, unknown) is unknown, so one bad source makes
    # the whole age unknown rather than letting the other one vouch for the carrier.
    times: list[int] = []
    if payload_timestamp_ms is not None:
        stamp = payload_timestamp_ms
        if isinstance(stamp, bool) or not isinstance(stamp, int) or stamp < 0:
            return None
        times.append(payload_timestamp_ms)
    if stream_id is not None:
        stream_ms = parse_stream_id_ms(stream_id)
        if stream_ms is None:
            return None
        times.append(stream_ms)
    return times or None


def carrier_age_ms(
    *, now_ms: int, payload_timestamp_ms: int | None, stream_id: str | None
) -> int | None:
    """max(payload age, stream-id age); None when unknown. A future stamp ages 0, never less."""
    times = _source_times(payload_timestamp_ms, stream_id)
    return None if times is None else max(0, now_ms - min(times))


class AgeVerdict(enum.StrEnum):
    ACCEPT = "accept"
    TOO_OLD = "too_old"
    UNKNOWN = "unknown"  # fail closed: count carrier_age_unknown_total and log a WARNING


@attrs.frozen
class AgeDecision:
    verdict: AgeVerdict
    age_ms: int | None
    gate_disabled: bool = False  # max age 0: accepted unchecked; the caller logs a WARNING

    @property
    def accepted(self) -> bool:
        return self.verdict is AgeVerdict.ACCEPT


def check_carrier_age(
    *,
    now_ms: int,
    payload_timestamp_ms: int | None,
    stream_id: str | None,
    max_age_ms: int = DEFAULT_CARRIER_MAX_AGE_MS,
) -> AgeDecision:
    """Reject carriers older than ``max_age_ms`` or of unknown age; 0 disables the gate (W14)."""
    age = carrier_age_ms(
        now_ms=now_ms, payload_timestamp_ms=payload_timestamp_ms, stream_id=stream_id
    )
    limit = effective_max_age_ms(max_age_ms)
    if limit == 0:
        return AgeDecision(AgeVerdict.ACCEPT, age, gate_disabled=True)
    if age is None:
        return AgeDecision(AgeVerdict.UNKNOWN, None)
    return AgeDecision(AgeVerdict.ACCEPT if age <= limit else AgeVerdict.TOO_OLD, age)


def copy_timestamp_ms(
    *, now_ms: int, payload_timestamp_ms: int | None, stream_id: str | None
) -> int | None:
    """The timestamp a copy must carry to keep its source's age (W14, A51-01).

    The earlier of the two source times; a future payload stamp counts as now so it cannot
    make a copy look younger than its source. None: the source's age is unknown, and a copy
    of it must not be made (the gate rejects such a source anyway).
    """
    times = _source_times(payload_timestamp_ms, stream_id)
    return None if times is None else min(min(times), now_ms)
