"""Configuration generations and whether a carrier may run under this worker's rules (W12).

Three hashes, each answering a different question about a mixed pool (A2R31):

- ``config_family`` (``cf1-…``): queue, group, DLQ, schema, namespace and partition count —
  the hard compatibility key. Workers of two families read carriers that mean different things.
- ``config_generation`` (``cfg1-…``): every semantic setting. Observability only: the
  console compares it across instances; it never gates a carrier.
- ``budget_generation`` (``bg1-…``): max deliveries, lease TTL, carrier max age, DLQ cap —
  the rules that decide when a carrier is given up on.

Why a carrier from another family or budget generation is left pending rather than acked:
acking it would lose it — it may be the only carrier of a non-terminal execution (I0) — and
executing it would run it under rules it was not written for (another queue's DLQ, another
schema, a budget that dead-letters it early). Left pending, nothing is lost and nothing runs
wrongly: a worker of its own family picks it up by reclaim, or an operator drains the old
pool. Missing fields mean a carrier written before generations existed; those were always
executable and stay so (legacy). The decision is the same on first read and on reclaim.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.domain.envelope import CURRENT_SCHEMA_VERSION, CarrierGenerations

JSON = Any

FAMILY_PREFIX = "cf1-"
CONFIG_PREFIX = "cfg1-"
BUDGET_PREFIX = "bg1-"
#: Hex digits kept from the sha256: enough to tell configurations apart, short enough to log.
HASH_HEX_DIGITS = 16

DEFAULT_MAX_DELIVERIES = 5
DEFAULT_LEASE_TTL_MS = 120_000
DEFAULT_MAX_CARRIER_AGE_MS = 30 * 24 * 60 * 60 * 1000
DEFAULT_DLQ_MAX_LEN = 10_000


def check_dlq_max_len(max_len: int) -> int:
    """The DLQ length cap (W10): a whole number of entries above 0; ``ValueError`` otherwise.

    The DLQ is a lossy FIFO: above the cap its oldest entries are dropped unreplayed.
    """
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(
            f"a DLQ length cap must be a whole number of entries >= 1, got {max_len!r}"
        )
    return max_len


@attrs.frozen
class RuntimeConfig:
    """The settings the generations are computed from.

    Not part of it: log level, metrics port and the instance's own name — they differ between
    healthy workers of one pool and change no rule. ``other`` takes every further semantic
    setting by name (claim idle, read block, deadline, …); never put secrets in it.
    """

    namespace: str
    queue_name: str
    consumer_group: str
    dlq_key: str
    schema_version: int = CURRENT_SCHEMA_VERSION
    max_deliveries: int = DEFAULT_MAX_DELIVERIES
    lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS
    max_carrier_age_ms: int = DEFAULT_MAX_CARRIER_AGE_MS
    dlq_max_len: int = DEFAULT_DLQ_MAX_LEN
    #: The queue's partition count (``--partitions``): another count lays carriers out in
    #: other streams, so it is part of the family.
    partitions: int = 1
    other: Mapping[str, JSON] = attrs.field(factory=dict, converter=dict)

    def family_settings(self) -> dict[str, JSON]:
        family: dict[str, JSON] = {
            "namespace": self.namespace,
            "queue_name": self.queue_name,
            "consumer_group": self.consumer_group,
            "dlq_key": self.dlq_key,
            "schema_version": self.schema_version,
        }
        # One partition is the layout every deployment had before partitions existed: left
        # out, so its family (and every carrier stamped with it) stays what it was.
        if self.partitions != 1:
            family["partitions"] = self.partitions
        return family

    def budget_settings(self) -> dict[str, JSON]:
        return {
            "max_deliveries": self.max_deliveries,
            "lease_ttl_ms": self.lease_ttl_ms,
            "max_carrier_age_ms": self.max_carrier_age_ms,
            "dlq_max_len": self.dlq_max_len,
        }


def config_family(config: RuntimeConfig) -> str:
    return FAMILY_PREFIX + _digest(config.family_settings())


def budget_generation(config: RuntimeConfig) -> str:
    return BUDGET_PREFIX + _digest(config.budget_settings())


def config_generation(config: RuntimeConfig) -> str:
    # `other` sits under its own key so a setting named like a fixed field cannot alias it.
    document = {**config.family_settings(), **config.budget_settings(), "other": config.other}
    return CONFIG_PREFIX + _digest(document)


def generations_of(config: RuntimeConfig) -> CarrierGenerations:
    """The three generations a worker logs at start-up, registers and stamps on new carriers."""
    return CarrierGenerations(
        config_family=config_family(config),
        config_generation=config_generation(config),
        budget_generation=budget_generation(config),
    )


def _digest(document: Mapping[str, JSON]) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:HASH_HEX_DIGITS]


# --- reading generations off a carrier ------------------------------------------------

_WELL_FORMED = {
    "config_family": re.compile(rf"{re.escape(FAMILY_PREFIX)}[0-9a-f]{{{HASH_HEX_DIGITS}}}"),
    "config_generation": re.compile(rf"{re.escape(CONFIG_PREFIX)}[0-9a-f]{{{HASH_HEX_DIGITS}}}"),
    "budget_generation": re.compile(rf"{re.escape(BUDGET_PREFIX)}[0-9a-f]{{{HASH_HEX_DIGITS}}}"),
}

#: Logged (WARNING) once per carrier whose generation fields are malformed.
MALFORMED_EVENT = "config.malformed_generation"


@attrs.frozen
class GenerationsRead:
    generations: CarrierGenerations
    #: Fields that were present but malformed; each was read as missing (legacy).
    malformed: tuple[str, ...] = ()


def read_generations(fields: Mapping[str, object]) -> GenerationsRead:
    """The generations a carrier names; a malformed field counts as missing, never as ours.

    Rule 4 of A2R31: a malformed field is a WARNING and legacy — replacing it with this worker's
    value would let a carrier of unknown origin run under rules it may not have been written for.
    """
    values: dict[str, str | None] = {}
    malformed: list[str] = []
    for name, pattern in _WELL_FORMED.items():
        value = fields.get(name)
        if value is None or value == "":
            values[name] = None
        elif isinstance(value, str) and pattern.fullmatch(value):
            values[name] = value
        else:
            values[name] = None
            malformed.append(name)
    return GenerationsRead(CarrierGenerations(**values), tuple(malformed))


# --- the consume decision ---------------------------------------------------------------


class ConsumeAction(enum.StrEnum):
    EXECUTE = "execute"
    #: The carrier names no family and no budget generation: written before they existed.
    EXECUTE_LEGACY = "execute_legacy"
    LEAVE_PENDING_FAMILY_MISMATCH = "family_mismatch"
    LEAVE_PENDING_BUDGET_STALE = "budget_stale"


FAMILY_MISMATCH_EVENT = "config.family_mismatch"
BUDGET_STALE_EVENT = "config.budget_stale"


@attrs.frozen
class ConsumeDecision:
    action: ConsumeAction
    #: The structured log event to emit (``event=…``), or ``None`` when there is nothing to say.
    event: str | None = None
    detail: str = ""
    #: Same family and budget, different config_generation: runs, but worth a note.
    config_drift: bool = False

    @property
    def executes(self) -> bool:
        return self.action in (ConsumeAction.EXECUTE, ConsumeAction.EXECUTE_LEGACY)

    @property
    def leaves_pending(self) -> bool:
        return not self.executes


def decide_consume(carrier: CarrierGenerations, worker: CarrierGenerations) -> ConsumeDecision:
    """May this worker run a carrier written under ``carrier`` generations? (W12, A2R31)

    A family check needs both sides to name a family, a budget check both sides to name a
    budget generation; a side without one is legacy for that check.
    """
    if carrier.is_legacy:
        return ConsumeDecision(ConsumeAction.EXECUTE_LEGACY)
    if _differ(carrier.config_family, worker.config_family):
        return ConsumeDecision(
            ConsumeAction.LEAVE_PENDING_FAMILY_MISMATCH,
            FAMILY_MISMATCH_EVENT,
            f"carrier config_family {carrier.config_family} is not this worker's "
            f"{worker.config_family}; left pending for a worker of its own family "
            "(check queue, group, dlq, schema, namespace and partitions settings of the pool)",
        )
    if _differ(carrier.budget_generation, worker.budget_generation):
        return ConsumeDecision(
            ConsumeAction.LEAVE_PENDING_BUDGET_STALE,
            BUDGET_STALE_EVENT,
            f"carrier budget_generation {carrier.budget_generation} is not this worker's "
            f"{worker.budget_generation}; left pending so a new budget never applies to an "
            "old pending list — drain the old pool or keep its budget until it is empty",
        )
    drift = _differ(carrier.config_generation, worker.config_generation)
    return ConsumeDecision(ConsumeAction.EXECUTE, config_drift=drift)


def _differ(carrier: str | None, worker: str | None) -> bool:
    return carrier is not None and worker is not None and carrier != worker
