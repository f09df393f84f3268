"""Configuration generations and whether a carrier may run under this worker's rules (W12).

Three hashes, each answering a different question about a mixed pool (seed A2R31):

- ``config_family`` (``cf1-…``): queue, group, DLQ, schema and namespace — the hard
  compatibility key. Workers of two families read carriers that mean different things.
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
import math
import re
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.domain.envelope import CURRENT_SCHEMA_VERSION, CarrierGenerations
from plaita.domain.errors import InvalidConfigurationError

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
    other: Mapping[str, JSON] = attrs.field(factory=dict, converter=dict)

    def family_settings(self) -> dict[str, JSON]:
        return {
            "namespace": self.namespace,
            "queue_name": self.queue_name,
            "consumer_group": self.consumer_group,
            "dlq_key": self.dlq_key,
            "schema_version": self.schema_version,
        }

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

    Seed rule 4: a malformed field is a WARNING and legacy — replacing it with this worker's
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
    """May this worker run a carrier written under ``carrier`` generations? (W12, seed A2R31)

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
            "(check queue, group, dlq, schema and namespace settings of the pool)",
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


# --- start-up validation (W21) ------------------------------------------------------------

#: Identity settings name keys and streams; an empty one would write to an empty key.
IDENTITY_SETTINGS = (
    "namespace",
    "queue_name",
    "consumer_group",
    "consumer_name",
    "dlq_key",
    "delay_queue_name",
    "redis_url",
    "deployment_epoch",
)
#: Resource settings: (name, 0 allowed and meaning, whole number required).
RESOURCE_SETTINGS: tuple[tuple[str, str | None, bool], ...] = (
    ("lease_ttl_ms", None, False),
    ("claim_min_idle_ms", None, True),
    ("read_block_ms", None, True),
    ("max_deliveries", None, True),
    ("concurrency", None, True),
    ("dlq_max_len", None, True),
    ("execution_deadline_ms", "zero budget", False),
    ("min_free_disk_gib", "disk guard off", False),
    ("max_carrier_age_ms", "carrier age gate off", False),
)
#: Security switches: an unknown value refuses the start rather than guessing (fail closed).
SECURITY_SWITCHES = ("http_block_private", "disable_holder_liveness")
_SWITCH_WORDS = {"1": True, "true": True, "0": False, "false": False}
#: Optional settings and the value a bad one falls back to, with a WARNING.
OPTIONAL_FALLBACKS: Mapping[str, JSON] = {
    "flow_cache_size": 100,
    "flow_cache_ttl_seconds": 300,
    "disk_guard_poll_seconds": 15,
    "disk_guard_path": ".",
    "metrics_port": 0,
}
_MAX_PORT = 65_535


@attrs.frozen
class ConfigProblem:
    setting: str
    message: str

    def __str__(self) -> str:
        return f"{self.setting}: {self.message}"


@attrs.frozen
class ConfigWarning:
    setting: str
    value: JSON
    #: The value the worker runs with instead (or keeps, when the warning only informs).
    used: JSON
    message: str


@attrs.frozen
class StartupCheck:
    problems: tuple[ConfigProblem, ...] = ()
    warnings: tuple[ConfigWarning, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def fallbacks(self) -> dict[str, JSON]:
        """Settings to run with in place of the configured ones."""
        return {w.setting: w.used for w in self.warnings if w.used != w.value}

    def error(self) -> InvalidConfigurationError:
        """The fail-fast start-up error, every problem on a line of its own (raise it)."""
        lines = "\n".join(f"  {problem}" for problem in self.problems)
        return InvalidConfigurationError(
            f"{len(self.problems)} invalid setting(s); fix them all and start again:\n{lines}"
        )


def validate_startup_settings(raw: Mapping[str, object]) -> StartupCheck:
    """Every problem of the identity, resource and security settings at once (W21).

    ``raw`` maps setting names (durations in ms) to their configured values; a setting that is
    absent or ``None`` is not configured and keeps its default. Problems stop the start;
    warnings name the value the worker falls back to.
    """
    problems: list[ConfigProblem] = []
    warnings: list[ConfigWarning] = []
    for name in IDENTITY_SETTINGS:
        value = raw.get(name)
        if value is not None and not (isinstance(value, str) and value.strip()):
            problems.append(ConfigProblem(name, f"{value!r} is not a non-empty name; set one"))
    numbers: dict[str, float] = {}
    for name, zero_means, integral in RESOURCE_SETTINGS:
        value = raw.get(name)
        if value is None:
            continue
        number = _number(value)
        if number is None:
            problems.append(ConfigProblem(name, f"{value!r} is not a finite number"))
            continue
        problem = _range_problem(value, number, zero_means, integral)
        if problem is None:
            numbers[name] = number
        else:
            problems.append(ConfigProblem(name, problem))
    for name in SECURITY_SWITCHES:
        value = raw.get(name)
        if value is not None and _switch(value) is None:
            problems.append(
                ConfigProblem(name, f"{value!r} is not one of 0, 1, true, false; set it explicitly")
            )
    problems.extend(_contradictions(numbers))
    warnings.extend(_optional_warnings(raw))
    if numbers.get("max_carrier_age_ms") == 0:
        warnings.append(
            ConfigWarning(
                "max_carrier_age_ms",
                0,
                0,
                "the carrier age gate is off: carriers of deleted executions older than their "
                "tombstone can run again; set a max age (default 30 days) unless you mean it",
            )
        )
    return StartupCheck(tuple(problems), tuple(warnings))


def _range_problem(
    value: object, number: float, zero_means: str | None, integral: bool
) -> str | None:
    if integral and number != int(number):
        return f"{value!r} is not a whole number"
    if number < 0 or (number == 0 and zero_means is None):
        least = "0 or more" if zero_means is not None else "more than 0"
        return f"{value!r} must be {least}"
    return None


def _contradictions(numbers: Mapping[str, float]) -> list[ConfigProblem]:
    lease_ttl = numbers.get("lease_ttl_ms")
    claim_idle = numbers.get("claim_min_idle_ms")
    if lease_ttl is None or claim_idle is None or claim_idle > lease_ttl / 3:
        return []
    # The watchdog refreshes its carriers' idle time at every renewal (every TTL/3, W5). A
    # shorter claim idle lets peers reclaim a live holder's carrier between two refreshes:
    # each reclaim burns a delivery until the carrier is dead-lettered while it runs (#50).
    return [
        ConfigProblem(
            "claim_min_idle_ms",
            f"{claim_idle:g} ms is not longer than the lease renewal interval "
            f"(lease_ttl_ms / 3 = {lease_ttl / 3:g} ms): live holders' carriers would be "
            "reclaimed; raise claim_min_idle_ms or lower lease_ttl_ms",
        )
    ]


def _optional_warnings(raw: Mapping[str, object]) -> list[ConfigWarning]:
    warnings: list[ConfigWarning] = []
    for name, fallback in OPTIONAL_FALLBACKS.items():
        value = raw.get(name)
        if value is None or _optional_ok(name, value):
            continue
        warnings.append(
            ConfigWarning(
                name, value, fallback, f"{value!r} is not usable; running with {fallback!r}"
            )
        )
    return warnings


def _optional_ok(name: str, value: object) -> bool:
    if name == "disk_guard_path":
        return isinstance(value, str) and bool(value.strip())
    number = _number(value)
    if number is None:
        return False
    if name == "metrics_port":
        return number == int(number) and 0 <= number <= _MAX_PORT
    return number > 0


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _switch(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _SWITCH_WORDS.get(value.strip().lower())
    return None
