"""PLAITA_RETENTION_DAYS and PLAITA_DLQ_MAX_LEN (S5, W10): validated at start-up and wired
by the container — the retention into the execution repository, the delete's tombstone TTL
and the config generation; the DLQ cap into the queue and the budget generation."""

from __future__ import annotations

import attrs
import pytest
from dependency_injector import providers

from plaita.application.tenancy import tenant_scope
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.errors import InvalidConfigurationError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.entrypoints.container import build_container
from plaita.entrypoints.settings import Settings, worker_settings

from ..application.conftest import FakeClock

DAY_S = 24 * 3600


def _completed() -> ExecutionState:
    started = ExecutionState.new(
        execution_id="x-1",
        flow_id="orders",
        flow_version="1",
        fingerprint="f" * 64,
        start_node_id="a",
        input={},
        now_ms=1,
    )
    return attrs.evolve(started, status=ExecutionStatus.COMPLETED)


def test_the_default_retention_is_seven_days() -> None:
    assert Settings().retention_ms == 7 * DAY_S * 1000


async def test_the_retention_setting_reaches_the_execution_repository() -> None:
    clock = FakeClock()
    container = build_container(Settings(backend="memory", retention_days=0.5))
    container.clock.override(providers.Object(clock))
    with tenant_scope("default"):
        lease = await container.leases().acquire("x-1", "w1", ttl_ms=60_000)
        assert lease is not None
        await container.executions().save(_completed(), fence=lease.generation)

        clock.advance(DAY_S / 2 - 1)
        assert await container.executions().load("x-1") is not None
        clock.advance(1)
        assert await container.executions().load("x-1") is None


@pytest.mark.parametrize("days", ["0", "-1"])
def test_a_retention_that_is_not_positive_is_refused_at_start_up(days: str) -> None:
    """W21: every problem named at once; S5: there is no "delete at once"."""
    with pytest.raises(InvalidConfigurationError, match="retention_ms"):
        worker_settings({"backend": "redis", "retention_days": days})


def test_the_retention_is_part_of_the_config_generation_not_the_budget() -> None:
    """W12: a semantic setting (console comparison), not a rule that gives a carrier up."""
    week = build_container(Settings(backend="memory")).generations()
    day = build_container(Settings(backend="memory", retention_days=1)).generations()

    assert week.config_generation != day.config_generation
    assert (week.config_family, week.budget_generation) == (
        day.config_family,
        day.budget_generation,
    )


async def test_a_tombstone_outlives_a_retention_longer_than_thirty_days() -> None:
    """W13: tombstone TTL >= the state TTL (here the retention), <= the carrier max age."""
    container = build_container(
        Settings(backend="memory", retention_days=40, max_carrier_age_days=60)
    )
    with tenant_scope("default"):
        lease = await container.leases().acquire("x-1", "w1", ttl_ms=60_000)
        assert lease is not None
        await container.executions().save(_completed(), fence=lease.generation)
        await container.leases().release(lease)

        deleted = await container.delete_execution()("x-1")

    assert deleted.tombstone_ttl_seconds == 40 * DAY_S


async def test_the_dlq_cap_reaches_the_queue_and_the_budget_generation() -> None:
    """W12: the DLQ cap is one of the rules that give a carrier up (budget generation)."""
    container = build_container(Settings(backend="memory", dlq_max_len=2))
    queue = container.queue()
    for n in range(3):
        await queue.enqueue(
            TaskEnvelope.start(
                execution_id=f"x-{n}",
                flow_id="f",
                version="1",
                params={},
                now_ms=1,
                generations=LEGACY_GENERATIONS,
            )
        )
    for delivery in await queue.read("w1", count=3, block_ms=0):
        await queue.dead_letter(delivery, "budget spent")

    assert len(await queue.dead_letters(count=10)) == 2
    assert await queue.dead_letters_dropped() == 1
    default = build_container(Settings(backend="memory")).generations()
    assert container.generations().budget_generation != default.budget_generation


@pytest.mark.parametrize("cap", ["0", "-3", "1.5"])
def test_a_dlq_cap_that_is_not_a_positive_whole_number_is_refused(cap: str) -> None:
    with pytest.raises(InvalidConfigurationError, match="dlq_max_len"):
        worker_settings({"backend": "redis", "dlq_max_len": cap})
