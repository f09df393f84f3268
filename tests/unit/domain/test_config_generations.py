"""Config generations, the consume decision and start-up validation (W12, W21; seed A2R31,
B2R31-01/02/03).

Consume decision table (``decide_consume``), first read and reclaim alike:

  carrier family / budget vs worker's  -> action                         seed rule
  neither named (legacy)               -> EXECUTE_LEGACY                 4
  same family, same budget             -> EXECUTE                        -
  other family (budget whatever)       -> LEAVE_PENDING_FAMILY_MISMATCH  1, config.family_mismatch
  same family, other budget            -> LEAVE_PENDING_BUDGET_STALE     2, config.budget_stale
  no family, same / other budget       -> EXECUTE / BUDGET_STALE         1 needs both sides
  same family, no budget               -> EXECUTE                        2 needs both sides
  same family and budget, other config -> EXECUTE, config_drift          observability only
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.config_generations import (
    BUDGET_STALE_EVENT,
    FAMILY_MISMATCH_EVENT,
    IDENTITY_SETTINGS,
    MALFORMED_EVENT,
    OPTIONAL_FALLBACKS,
    RESOURCE_SETTINGS,
    SECURITY_SWITCHES,
    ConsumeAction,
    GenerationsRead,
    RuntimeConfig,
    budget_generation,
    config_family,
    config_generation,
    decide_consume,
    generations_of,
    read_generations,
    validate_startup_settings,
)
from plaita.domain.envelope import CarrierGenerations
from plaita.domain.errors import InvalidConfigurationError

BASE = RuntimeConfig(
    namespace="plaita", queue_name="tasks", consumer_group="workers", dlq_key="tasks:dlq"
)
WORKER = generations_of(BASE)

FAMILY_FIELDS = ("namespace", "queue_name", "consumer_group", "dlq_key", "schema_version")
BUDGET_FIELDS = ("max_deliveries", "lease_ttl_ms", "max_carrier_age_ms", "dlq_max_len")


# --- computing generations -------------------------------------------------------------------


def test_generations_are_short_prefixed_hex_hashes() -> None:
    """W12; seed A2R31: cf1-…, cfg1-…, bg1-… are logged and registered at start-up."""
    assert re.fullmatch(r"cf1-[0-9a-f]{16}", WORKER.config_family or "")
    assert re.fullmatch(r"cfg1-[0-9a-f]{16}", WORKER.config_generation or "")
    assert re.fullmatch(r"bg1-[0-9a-f]{16}", WORKER.budget_generation or "")


def test_seed_defaults_fill_the_budget() -> None:
    """W2, W14: max deliveries 5, lease TTL 120 s, carrier max age 30 days."""
    assert (BASE.max_deliveries, BASE.lease_ttl_ms, BASE.max_carrier_age_ms) == (
        5,
        120_000,
        30 * 24 * 3600 * 1000,
    )


def test_a_semantic_setting_named_like_a_fixed_field_does_not_alias_it() -> None:
    """W12: `other` is hashed under its own key, so {"queue_name": …} in it is a new config."""
    aliased = attrs.evolve(BASE, other={"queue_name": "tasks"})

    assert config_generation(aliased) != config_generation(BASE)


_new_values: dict[str, st.SearchStrategy[Any]] = {
    **{name: st.text(min_size=1, max_size=12) for name in FAMILY_FIELDS[:4]},
    "schema_version": st.integers(1, 9),
    **{name: st.integers(0, 10**9) for name in BUDGET_FIELDS},
    "other": st.dictionaries(st.text(max_size=6), st.integers() | st.text(max_size=6), max_size=4),
}


@given(data=st.data(), name=st.sampled_from(sorted(_new_values)))
def test_each_generation_changes_when_and_only_when_its_settings_change(
    data: st.DataObject, name: str
) -> None:
    """W12 (property): a family setting moves family and config; a budget setting moves budget
    and config; any other semantic setting moves config alone — never budget or family."""
    value = data.draw(_new_values[name].filter(lambda v: v != getattr(BASE, name)))
    changed = attrs.evolve(BASE, **{name: value})

    assert (config_family(changed) != config_family(BASE)) is (name in FAMILY_FIELDS)
    assert (budget_generation(changed) != budget_generation(BASE)) is (name in BUDGET_FIELDS)
    assert config_generation(changed) != config_generation(BASE)


@given(
    st.dictionaries(
        st.text(max_size=8), st.integers() | st.text(max_size=8) | st.booleans(), max_size=8
    )
)
def test_generations_are_stable_under_key_order(other: dict[str, Any]) -> None:
    """W12 (property): canonical JSON — the order settings were read in changes nothing."""
    reversed_other = dict(reversed(list(other.items())))

    assert generations_of(attrs.evolve(BASE, other=other)) == generations_of(
        attrs.evolve(BASE, other=reversed_other)
    )


def test_generations_are_computed_alike_from_equal_settings() -> None:
    """W12: two workers with one configuration register one generation triple."""
    twin = RuntimeConfig(
        namespace="plaita", queue_name="tasks", consumer_group="workers", dlq_key="tasks:dlq"
    )

    assert generations_of(twin) == WORKER


# --- reading generations off a carrier --------------------------------------------------------


def test_a_carrier_without_generation_fields_reads_as_legacy() -> None:
    """W12 rule 4: historical carriers (no fields) are always executable."""
    read = read_generations({"envelope": "{}"})

    assert read.generations.is_legacy
    assert read.malformed == ()


def test_well_formed_generation_fields_are_read() -> None:
    fields = {
        "config_family": WORKER.config_family,
        "config_generation": WORKER.config_generation,
        "budget_generation": WORKER.budget_generation,
    }

    assert read_generations(fields) == GenerationsRead(WORKER, ())


@pytest.mark.parametrize("bad", ["cf1-XYZ", "bg1-cccccccccccccccc", "x" * 40, 7])
def test_a_malformed_generation_field_reads_as_missing_never_as_ours(bad: object) -> None:
    """W12 rule 4; seed B2R31: a malformed field is a WARNING and legacy, not the current value."""
    read = read_generations({"config_family": bad, "budget_generation": ""})

    assert read.generations.config_family is None
    assert read.generations.budget_generation is None
    assert read.malformed == ("config_family",)
    assert MALFORMED_EVENT == "config.malformed_generation"


def test_a_carrier_with_malformed_fields_is_executed_as_legacy() -> None:
    """W12 rule 4: malformed → legacy → executable, under no foreign family's rules."""
    read = read_generations({"config_family": "garbage", "budget_generation": "bg1-nope"})

    assert decide_consume(read.generations, WORKER).action is ConsumeAction.EXECUTE_LEGACY


# --- the consume decision (one test per table row) ---------------------------------------------

OTHER_FAMILY = "cf1-0000000000000000"
OTHER_BUDGET = "bg1-0000000000000000"
OTHER_CONFIG = "cfg1-0000000000000000"


def test_a_legacy_carrier_is_executed() -> None:
    """W12 rule 4; seed A2R31: "历史消息(无字段)始终可执行"."""
    decision = decide_consume(CarrierGenerations(), WORKER)

    assert decision.action is ConsumeAction.EXECUTE_LEGACY
    assert decision.executes and not decision.leaves_pending
    assert decision.event is None


def test_a_carrier_of_this_family_and_budget_is_executed() -> None:
    """W12: the ordinary case — same rules, run it."""
    decision = decide_consume(WORKER, WORKER)

    assert decision.action is ConsumeAction.EXECUTE
    assert not decision.config_drift


@pytest.mark.parametrize("budget", [WORKER.budget_generation, OTHER_BUDGET, None])
def test_a_carrier_of_another_family_is_left_pending_with_family_mismatch(
    budget: str | None,
) -> None:
    """W12 rule 1; seed A2R31 / B2R31-01: never executed under another family's rules and never
    acked (it may be an execution's only carrier) — left pending, event=config.family_mismatch."""
    carrier = attrs.evolve(WORKER, config_family=OTHER_FAMILY, budget_generation=budget)

    decision = decide_consume(carrier, WORKER)

    assert decision.action is ConsumeAction.LEAVE_PENDING_FAMILY_MISMATCH
    assert decision.leaves_pending
    assert decision.event == FAMILY_MISMATCH_EVENT == "config.family_mismatch"
    assert OTHER_FAMILY in decision.detail and str(WORKER.config_family) in decision.detail


def test_a_carrier_of_a_stale_budget_is_left_pending_with_budget_stale() -> None:
    """W12 rule 2; seed B2R31-02: a new budget never applies to an old pending list."""
    carrier = attrs.evolve(WORKER, budget_generation=OTHER_BUDGET)

    decision = decide_consume(carrier, WORKER)

    assert decision.action is ConsumeAction.LEAVE_PENDING_BUDGET_STALE
    assert decision.event == BUDGET_STALE_EVENT == "config.budget_stale"
    assert "drain" in decision.detail


@pytest.mark.parametrize(
    ("budget", "action"),
    [
        (WORKER.budget_generation, ConsumeAction.EXECUTE),
        (OTHER_BUDGET, ConsumeAction.LEAVE_PENDING_BUDGET_STALE),
    ],
)
def test_a_carrier_without_family_is_judged_by_its_budget_alone(
    budget: str, action: ConsumeAction
) -> None:
    """W12 rule 1: the family check needs both sides non-legacy."""
    carrier = CarrierGenerations(budget_generation=budget)

    assert decide_consume(carrier, WORKER).action is action


def test_a_carrier_of_this_family_without_budget_is_executed() -> None:
    """W12 rule 2: the budget check needs both sides to name a budget generation."""
    carrier = CarrierGenerations(config_family=WORKER.config_family)

    assert decide_consume(carrier, WORKER).action is ConsumeAction.EXECUTE


def test_another_config_generation_alone_runs_and_reports_drift() -> None:
    """W12; seed A2R31: config_generation is an observable hash, not a gate."""
    carrier = attrs.evolve(WORKER, config_generation=OTHER_CONFIG)

    decision = decide_consume(carrier, WORKER)

    assert decision.action is ConsumeAction.EXECUTE
    assert decision.config_drift


optional_generation = st.none() | st.sampled_from(
    [
        WORKER.config_family,
        WORKER.budget_generation,
        WORKER.config_generation,
        OTHER_FAMILY,
        OTHER_BUDGET,
        OTHER_CONFIG,
    ]
)
generation_triples = st.builds(
    CarrierGenerations, optional_generation, optional_generation, optional_generation
)


@given(carrier=generation_triples, worker=generation_triples)
def test_the_consume_decision_is_total_and_never_drops_a_legacy_carrier(
    carrier: CarrierGenerations, worker: CarrierGenerations
) -> None:
    """W12 (property): every pair gets one decision; legacy carriers always run; a carrier is
    left pending only with a named event and only when both sides name the differing value."""
    decision = decide_consume(carrier, worker)

    assert decision.executes is not decision.leaves_pending
    if carrier.is_legacy:
        assert decision.action is ConsumeAction.EXECUTE_LEGACY
    if decision.leaves_pending:
        assert decision.event in (FAMILY_MISMATCH_EVENT, BUDGET_STALE_EVENT)
    if carrier == worker:
        assert decision.executes


# --- start-up validation (W21) -------------------------------------------------------------------

VALID: dict[str, object] = {
    "namespace": "plaita",
    "queue_name": "tasks",
    "consumer_group": "workers",
    "consumer_name": "host-1-abc",
    "dlq_key": "tasks:dlq",
    "delay_queue_name": "tasks:delay",
    "redis_url": "redis://127.0.0.1:6379/0",
    "deployment_epoch": "2026-10",
    "lease_ttl_ms": 120_000,
    "claim_min_idle_ms": 60_000,
    "read_block_ms": 1000,
    "max_deliveries": 5,
    "concurrency": 16,
    "dlq_max_len": 10_000,
    "execution_deadline_ms": 1_800_000,
    "min_free_disk_gib": 20,
    "max_carrier_age_ms": 2_592_000_000,
    "http_block_private": "1",
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
    """W21: the seed's defaults (claim idle 60 s < lease TTL 120 s) are consistent."""
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
    """W21; seed A2R31 非法值口径: empty queue/redis/dlq/group/instance id/delay queue/epoch is
    rejected — never written as an empty key."""
    assert _problems(**{name: value}) == [name]


@pytest.mark.parametrize(("name", "zero_means", "integral"), RESOURCE_SETTINGS)
def test_a_negative_resource_setting_is_a_problem(
    name: str, zero_means: str | None, integral: bool
) -> None:
    """W21: resource settings fail fast (seed: identity/security/resource 类 fail-fast)."""
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
    """W21; seed 非法值口径 "安全门未知值 fail-closed": never guess a security gate."""
    assert _problems(**{name: value}) == [name]


@pytest.mark.parametrize("value", ["0", "1", "true", "FALSE", " True ", True, False])
def test_known_security_switch_values_are_accepted(value: object) -> None:
    assert _problems(http_block_private=value, disable_holder_liveness=value) == []


@pytest.mark.parametrize(
    ("claim_idle", "lease_ttl", "contradiction"),
    [
        (60_000, 120_000, False),
        (40_001, 120_000, False),
        (40_000, 120_000, True),
        (1_000, 120_000, True),
    ],
)
def test_claim_idle_not_longer_than_the_renewal_interval_is_a_contradiction(
    claim_idle: int, lease_ttl: int, contradiction: bool
) -> None:
    """W21, W5; seed #50: the watchdog refreshes its carriers every lease TTL/3; a claim idle
    that short lets peers reclaim live holders' carriers and burn their deliveries."""
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
            "http_block_private": "maybe",
        }
    )

    assert [p.setting for p in check.problems] == [
        "queue_name",
        "consumer_name",
        "lease_ttl_ms",
        "max_deliveries",
        "min_free_disk_gib",
        "http_block_private",
    ]
    error = check.error()
    assert isinstance(error, InvalidConfigurationError)
    assert "6 invalid setting(s)" in str(error)
    assert all(str(problem) in str(error) for problem in check.problems)


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("flow_cache_size", 0),
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
