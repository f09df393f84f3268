"""Start-up validation: every invalid setting listed at once, bad optional ones fall back
(W21; A2R31)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import InvalidConfigurationError
from plaita.domain.startup import (
    IDENTITY_SETTINGS,
    OPTIONAL_FALLBACKS,
    RESOURCE_SETTINGS,
    SECURITY_SWITCHES,
    validate_startup_settings,
)

VALID: dict[str, object] = {
    "namespace": "plaita",
    "queue_name": "tasks",
    "consumer_group": "workers",
    "consumer_name": "host-1-abc",
    "dlq_key": "tasks:dlq",
    "redis_url": "redis://127.0.0.1:6379/0",
    "lease_ttl_ms": 120_000,
    "claim_min_idle_ms": 60_000,
    "read_block_ms": 1000,
    "max_deliveries": 5,
    "concurrency": 16,
    "dlq_max_len": 10_000,
    "execution_deadline_ms": 1_800_000,
    "min_free_disk_gib": 20,
    "max_carrier_age_ms": 2_592_000_000,
    "disable_holder_liveness": False,
    "flow_cache_size": 100,
    "flow_cache_ttl_seconds": 300,
    "disk_guard_poll_seconds": 15,
    "disk_guard_path": "/srv",
    "metrics_port": 9100,
}


def _problems(**changes: object) -> list[str]:
    return [p.setting for p in validate_startup_settings({**VALID, **changes}).problems]


def test_a_valid_configuration_has_no_problems_and_no_warnings() -> None:
    """W21: the defaults (claim idle 60 s < lease TTL 120 s) are consistent."""
    check = validate_startup_settings(VALID)

    assert check.ok
    assert check.warnings == ()
    assert check.fallbacks() == {}


def test_unset_settings_keep_their_defaults_and_are_not_problems() -> None:
    """W21: absent or None means "not configured"; the settings model supplies the default."""
    assert validate_startup_settings({}).ok
    assert validate_startup_settings(dict.fromkeys(VALID)).ok


@pytest.mark.parametrize("name", IDENTITY_SETTINGS)
@pytest.mark.parametrize("value", ["", "   ", 7])
def test_an_empty_identity_string_is_a_problem(name: str, value: object) -> None:
    """W21; A2R31: empty queue/redis/dlq/group/instance id/delay queue/epoch is
    rejected — never written as an empty key."""
    assert _problems(**{name: value}) == [name]


@pytest.mark.parametrize(("name", "zero_means", "integral"), RESOURCE_SETTINGS)
def test_a_negative_resource_setting_is_a_problem(
    name: str, zero_means: str | None, integral: bool
) -> None:
    """W21: resource settings fail fast (identity, security and resource settings all do)."""
    assert name in _problems(**{name: -1})


@pytest.mark.parametrize(
    "name", [name for name, zero_means, _ in RESOURCE_SETTINGS if zero_means is None]
)
def test_zero_is_a_problem_where_it_has_no_meaning(name: str) -> None:
    """W21: a zero lease TTL, claim idle, read block, delivery budget, concurrency or DLQ cap."""
    assert name in _problems(**{name: 0})


@pytest.mark.parametrize(
    "name", [name for name, zero_means, _ in RESOURCE_SETTINGS if zero_means is not None]
)
def test_zero_is_accepted_where_it_has_a_meaning(name: str) -> None:
    """E5 (0 = zero budget), W18 (0 = disk guard off), W14 (0 = age gate off, WARNING)."""
    assert _problems(**{name: 0}) == []


@pytest.mark.parametrize("value", ["abc", True, float("nan"), float("inf"), "1e999", 10**400, []])
def test_a_resource_setting_that_is_not_a_finite_number_is_a_problem(value: object) -> None:
    """W21: `true` is not a TTL; an overflowing number is not a TTL either."""
    assert _problems(lease_ttl_ms=value) == ["lease_ttl_ms"]


@pytest.mark.parametrize("name", [name for name, _, integral in RESOURCE_SETTINGS if integral])
def test_a_fractional_count_is_a_problem(name: str) -> None:
    """W21: 1.5 deliveries or 0.5 workers are not a configuration."""
    assert name in _problems(**{name: 1.5})


def test_numbers_given_as_environment_text_are_read() -> None:
    """W21: PLAITA_* values arrive as text."""
    assert _problems(lease_ttl_ms="120000", max_deliveries=" 5 ", min_free_disk_gib="0.5") == []


@pytest.mark.parametrize("name", SECURITY_SWITCHES)
@pytest.mark.parametrize("value", ["yes", "2", "", 1, "on"])
def test_an_unknown_security_switch_value_is_a_problem(name: str, value: object) -> None:
    """W21; A2R31: an unknown security switch value fails closed: never guess a security gate."""
    assert _problems(**{name: value}) == [name]


@pytest.mark.parametrize("value", ["0", "1", "true", "FALSE", " True ", True, False])
def test_known_security_switch_values_are_accepted(value: object) -> None:
    assert _problems(disable_holder_liveness=value) == []


@pytest.mark.parametrize(
    ("claim_idle", "lease_ttl", "contradiction"),
    [
        (5_000, 120_000, False),  # the defaults
        (2_001, 120_000, False),
        (2_000, 120_000, True),
        (1_000, 120_000, True),
        (1_500, 3_000, False),  # the fault suites' timings: renewal every 1 s
        (1_000, 3_000, True),
    ],
)
def test_claim_idle_not_longer_than_the_renewal_interval_is_a_contradiction(
    claim_idle: int, lease_ttl: int, contradiction: bool
) -> None:
    """W21, W5; #50: the watchdog refreshes its carriers every min(lease TTL/3, 2 s); a
    claim idle that short lets peers reclaim live holders' carriers and burn deliveries."""
    problems = _problems(claim_min_idle_ms=claim_idle, lease_ttl_ms=lease_ttl)

    assert problems == (["claim_min_idle_ms"] if contradiction else [])


def test_a_contradiction_is_not_reported_on_top_of_an_invalid_value() -> None:
    """W21: an invalid lease TTL is one problem, not also a contradiction."""
    assert _problems(lease_ttl_ms=0, claim_min_idle_ms=1) == ["lease_ttl_ms"]


def test_every_problem_is_listed_at_once() -> None:
    """W21: fail fast with every problem listed, not the first one."""
    check = validate_startup_settings(
        {
            **VALID,
            "queue_name": "",
            "consumer_name": " ",
            "lease_ttl_ms": -5,
            "max_deliveries": 0,
            "min_free_disk_gib": -1,
            "disable_holder_liveness": "maybe",
        }
    )

    assert [p.setting for p in check.problems] == [
        "queue_name",
        "consumer_name",
        "lease_ttl_ms",
        "max_deliveries",
        "min_free_disk_gib",
        "disable_holder_liveness",
    ]
    error = check.error()
    assert isinstance(error, InvalidConfigurationError)
    assert "6 invalid setting(s)" in str(error)
    assert all(str(problem) in str(error) for problem in check.problems)


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("flow_cache_size", 0),
        ("flow_cache_size", 2.5),
        ("flow_cache_ttl_seconds", -1),
        ("disk_guard_poll_seconds", "soon"),
        ("disk_guard_path", "  "),
        ("metrics_port", 70_000),
        ("metrics_port", 80.5),
    ],
)
def test_a_bad_optional_setting_warns_and_falls_back(name: str, bad: object) -> None:
    """W21, W20: optional settings warn and fall back (flow cache 100 / 300 s, disk guard
    path ".", disk poll 15 s, metrics off)."""
    check = validate_startup_settings({**VALID, name: bad})

    assert check.ok
    (warning,) = check.warnings
    assert (warning.setting, warning.value, warning.used) == (name, bad, OPTIONAL_FALLBACKS[name])
    assert check.fallbacks() == {name: OPTIONAL_FALLBACKS[name]}
    assert repr(OPTIONAL_FALLBACKS[name]) in warning.message


def test_a_disabled_carrier_age_gate_warns_but_keeps_the_value() -> None:
    """W14: "0 disables with a WARNING" — informed, not overridden."""
    check = validate_startup_settings({**VALID, "max_carrier_age_ms": 0})

    assert check.ok
    (warning,) = check.warnings
    assert (warning.setting, warning.used) == ("max_carrier_age_ms", 0)
    assert check.fallbacks() == {}


raw_values = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
known_settings = [
    *IDENTITY_SETTINGS,
    *(name for name, _, _ in RESOURCE_SETTINGS),
    *SECURITY_SWITCHES,
    *OPTIONAL_FALLBACKS,
]


@given(st.dictionaries(st.sampled_from(known_settings), raw_values))
def test_start_up_validation_is_total_and_speaks_only_of_configured_settings(
    raw: dict[str, object],
) -> None:
    """W21 (property): any input gets a verdict; every problem and warning names a setting
    that was configured (a contradiction names one of the two involved)."""
    check = validate_startup_settings(raw)

    assert check.ok is (not check.problems)
    assert {p.setting for p in check.problems} <= {k for k, v in raw.items() if v is not None}
    assert {w.setting for w in check.warnings} <= set(raw)
