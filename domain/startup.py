"""Start-up validation of the worker's settings: fail fast with every problem at once (W21).

Identity, resource and security settings stop the start when invalid, and a security switch
with an unknown value refuses it rather than guessing (fail closed, A2R31).
Optional settings warn and fall back to a default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.domain.errors import InvalidConfigurationError
from plaita.domain.lease import MAX_RENEWAL_INTERVAL_SECONDS, renewal_interval_seconds

JSON = Any

#: Identity settings name keys and streams; an empty one would write to an empty key.
IDENTITY_SETTINGS = (
    "namespace",
    "queue_name",
    "consumer_group",
    "consumer_name",
    "dlq_key",
    "redis_url",
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
    ("retention_ms", None, False),
)
#: Security switches: an unknown value refuses the start rather than guessing (fail closed).
SECURITY_SWITCHES = ("disable_holder_liveness",)
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
#: Optional settings that count things: a fraction is as unusable as zero.
_WHOLE_OPTIONALS = frozenset({"flow_cache_size"})


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
        if value is not None and not _has_text(value):
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
    if lease_ttl is None or claim_idle is None:
        return []
    renewal_ms = renewal_interval_seconds(lease_ttl / 1000) * 1000
    if claim_idle > renewal_ms:
        return []
    # The watchdog refreshes its carriers' idle time at every renewal (W5, P6). A shorter
    # claim idle lets peers reclaim a live holder's carrier between two refreshes: each
    # reclaim burns a delivery until the carrier is dead-lettered while it runs (#50).
    return [
        ConfigProblem(
            "claim_min_idle_ms",
            f"{claim_idle:g} ms is not longer than the lease renewal interval "
            f"(min(lease_ttl_ms / 3, {MAX_RENEWAL_INTERVAL_SECONDS * 1000:g} ms) = "
            f"{renewal_ms:g} ms): live holders' carriers would be reclaimed; raise "
            "claim_min_idle_ms",
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
        return _has_text(value)
    number = _number(value)
    if number is None:
        return False
    if name == "metrics_port":
        return number == int(number) and 0 <= number <= _MAX_PORT
    if name in _WHOLE_OPTIONALS:
        return number == int(number) and number > 0
    return number > 0


def _has_text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


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
