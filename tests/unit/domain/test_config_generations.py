"""Config generations and the consume decision (W12; A2R31, B2R31-01, B2R31-02).

Consume decision table (``decide_consume``), first read and reclaim alike:

  carrier family / budget vs worker's  -> action                         A2R31 rule
  neither named (legacy)               -> EXECUTE_LEGACY                 4
  same family, same budget             -> EXECUTE                        -
  other family (budget whatever)       -> LEAVE_PENDING_FAMILY_MISMATCH  1, config.family_mismatch
  same family, other budget            -> LEAVE_PENDING_BUDGET_STALE     2, config.budget_stale
  no family, same / other budget       -> EXECUTE / BUDGET_STALE         1 needs both sides
  same family, no budget               -> EXECUTE                        2 needs both sides
  same family and budget, other config -> EXECUTE, config_drift          observability only
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.config_generations import (
    BUDGET_STALE_EVENT,
    FAMILY_MISMATCH_EVENT,
    MALFORMED_EVENT,
    ConsumeAction,
    GenerationsRead,
    RuntimeConfig,
    budget_generation,
    config_family,
    config_generation,
    decide_consume,
    generations_of,
    read_generations,
)
from plaita.domain.envelope import CarrierGenerations

BASE = RuntimeConfig(
    namespace="plaita", queue_name="tasks", consumer_group="workers", dlq_key="tasks:dlq"
)
WORKER = generations_of(BASE)

FAMILY_FIELDS = (
    "namespace",
    "queue_name",
    "consumer_group",
    "dlq_key",
    "schema_version",
    "partitions",
)
BUDGET_FIELDS = ("max_deliveries", "lease_ttl_ms", "max_carrier_age_ms", "dlq_max_len")


# --- computing generations -------------------------------------------------------------------


def test_generations_are_short_prefixed_hex_hashes() -> None:
    """W12; A2R31: cf1-…, cfg1-…, bg1-… are logged and registered at start-up."""
    assert re.fullmatch(r"cf1-[0-9a-f]{16}", WORKER.config_family or "")
    assert re.fullmatch(r"cfg1-[0-9a-f]{16}", WORKER.config_generation or "")
    assert re.fullmatch(r"bg1-[0-9a-f]{16}", WORKER.budget_generation or "")


def test_the_default_settings_fill_the_budget() -> None:
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
    "partitions": st.integers(1, 1024),
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


def test_one_partition_leaves_the_family_of_a_deployment_without_partitions() -> None:
    """W12: --partitions 1 is the layout of old; its carriers keep running on new workers."""
    assert (
        config_family(attrs.evolve(BASE, partitions=1))
        == "cf1-"
        + hashlib.sha256(
            json.dumps(
                {
                    "consumer_group": "workers",
                    "dlq_key": "tasks:dlq",
                    "namespace": "plaita",
                    "queue_name": "tasks",
                    "schema_version": BASE.schema_version,
                },
                sort_keys=True,
                separators=(",", ":"),
            ).encode()
        ).hexdigest()[:16]
    )
    assert config_family(attrs.evolve(BASE, partitions=3)) != config_family(BASE)


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
    """W12 rule 4; A2R31: a malformed field is a WARNING and legacy, not the current value."""
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
    """W12 rule 4; A2R31: a legacy carrier (no generation fields) can always run."""
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
    """W12 rule 1; A2R31 / B2R31-01: never executed under another family's rules and never
    acked (it may be an execution's only carrier) — left pending, event=config.family_mismatch."""
    carrier = attrs.evolve(WORKER, config_family=OTHER_FAMILY, budget_generation=budget)

    decision = decide_consume(carrier, WORKER)

    assert decision.action is ConsumeAction.LEAVE_PENDING_FAMILY_MISMATCH
    assert decision.leaves_pending
    assert decision.event == FAMILY_MISMATCH_EVENT == "config.family_mismatch"
    assert OTHER_FAMILY in decision.detail and str(WORKER.config_family) in decision.detail


def test_a_carrier_of_a_stale_budget_is_left_pending_with_budget_stale() -> None:
    """W12 rule 2; B2R31-02: a new budget never applies to an old pending list."""
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
    """W12; A2R31: config_generation is an observable hash, not a gate."""
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
