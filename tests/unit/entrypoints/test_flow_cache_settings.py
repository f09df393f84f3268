"""The flow cache's settings reach the catalog that serves executions (W20, W21).

``--flow-cache-size`` / ``PLAITA_FLOW_CACHE_SIZE`` (default 100) and
``--flow-cache-ttl-seconds`` / ``PLAITA_FLOW_CACHE_TTL_SECONDS`` (default 300) are checked at
start-up with the other settings — an unusable value falls back with a WARNING — and the
container hands them to the one ``FlowCatalog`` the worker step, the starts and the operator
controls share. The tests prove it by behaviour: the size bound evicts, the TTL re-reads.
"""

from __future__ import annotations

import logging

import pytest
from click.testing import CliRunner
from dependency_injector import providers

from plaita.application.use_cases.flows import FlowCatalog
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.cli import main
from plaita.entrypoints.cli_support import settings_from
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings, worker_settings

from ..application.conftest import CountingRepository, FakeClock

UNREACHABLE = "redis://127.0.0.1:1/0"


def flow(flow_id: str) -> Flow:
    return Flow.from_document(
        {"flow_id": flow_id, "start": "e", "nodes": [{"id": "e", "type": "end"}]}
    )


async def catalog_of(
    settings: Settings, clock: FakeClock
) -> tuple[Container, FlowCatalog, CountingRepository]:
    container = build_container(settings)
    repository = CountingRepository()
    container.clock.override(providers.Object(clock))
    container.flow_repository.override(providers.Object(repository))
    for flow_id in "abc":
        await repository.put_if_absent(flow(flow_id), owner=SHARED)
    return container, container.flows(), repository


async def reads_of(catalog: FlowCatalog, repository: CountingRepository, flow_id: str) -> int:
    before = repository.reads
    await catalog.get(flow_id)
    return repository.reads - before


async def test_the_running_catalog_evicts_beyond_the_configured_size() -> None:
    container, catalog, repository = await catalog_of(
        Settings(backend="memory", flow_cache_size=2), FakeClock()
    )
    assert container.process_task()._flows is catalog  # the worker step's own catalog

    for flow_id in "ab":
        await catalog.get(flow_id)
    assert await reads_of(catalog, repository, "a") == 0
    await catalog.get("c")  # a third entry: "b", the least recently used, goes
    assert await reads_of(catalog, repository, "a") == 0
    assert await reads_of(catalog, repository, "b") > 0


async def test_the_running_catalog_reads_again_once_the_configured_ttl_passed() -> None:
    clock = FakeClock()
    _, catalog, repository = await catalog_of(
        Settings(backend="memory", flow_cache_ttl_seconds=5), clock
    )

    await catalog.get("a")
    clock.advance(4.999)
    assert await reads_of(catalog, repository, "a") == 0
    clock.advance(0.001)
    assert await reads_of(catalog, repository, "a") > 0


async def test_the_defaults_are_100_definitions_for_300_seconds() -> None:
    clock = FakeClock()
    _, catalog, repository = await catalog_of(Settings(backend="memory"), clock)
    for flow_id in "abc":
        await catalog.get(flow_id)

    clock.advance(299.999)
    assert [await reads_of(catalog, repository, flow_id) for flow_id in "abc"] == [0, 0, 0]
    clock.advance(0.001)
    assert await reads_of(catalog, repository, "a") > 0


async def test_the_worker_takes_the_flags_and_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLAITA_FLOW_CACHE_TTL_SECONDS", "5")
    settings, check = worker_settings({"backend": "memory", "flow_cache_size": "2"})
    assert check.warnings == ()
    clock = FakeClock()
    _, catalog, repository = await catalog_of(settings, clock)

    for flow_id in "abc":
        await catalog.get(flow_id)
    assert await reads_of(catalog, repository, "a") > 0  # evicted at size 2
    clock.advance(5)
    assert await reads_of(catalog, repository, "a") > 0  # expired after 5 s


@pytest.mark.parametrize(
    ("setting", "bad", "used"),
    [
        ("flow_cache_size", "0", 100),
        ("flow_cache_size", "2.5", 100),
        ("flow_cache_size", "many", 100),
        ("flow_cache_ttl_seconds", "-1", 300),
        ("flow_cache_ttl_seconds", "0", 300),
    ],
)
def test_an_unusable_value_falls_back_with_a_warning_on_the_worker(
    setting: str, bad: str, used: int
) -> None:
    """W21: an optional setting warns and falls back, from a flag or from the environment."""
    settings, check = worker_settings({"backend": "memory", setting: bad}, environ={})
    assert getattr(settings, setting) == used
    [warning] = check.warnings
    assert (warning.setting, warning.used) == (setting, used)


def test_an_unusable_value_in_the_environment_falls_back_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLAITA_FLOW_CACHE_SIZE", "0")
    settings, check = worker_settings({"backend": "memory"})
    assert settings.flow_cache_size == 100
    assert [(w.setting, w.value, w.used) for w in check.warnings] == [("flow_cache_size", "0", 100)]


def test_the_worker_command_logs_the_fallback_and_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="plaita.worker"):
        result = CliRunner().invoke(
            main,
            ["worker", "--redis-url", UNREACHABLE, "--flow-cache-size", "0"],
            catch_exceptions=False,
        )
    assert result.exit_code == 1 and "cannot reach Redis" in result.output
    warned = [r.getMessage() for r in caplog.records if "event=config.fallback" in r.getMessage()]
    assert any("setting=flow_cache_size value='0' used=100" in line for line in warned), warned


def test_the_console_and_operator_commands_fall_back_too(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The console's catalog starts executions and retries them: same settings, same rule."""
    monkeypatch.setenv("PLAITA_FLOW_CACHE_TTL_SECONDS", "-3")
    with caplog.at_level(logging.WARNING, logger="plaita.cli"):
        settings = settings_from(backend="memory", flow_cache_size="7")
    assert (settings.flow_cache_size, settings.flow_cache_ttl_seconds) == (7, 300)
    warned = [r.getMessage() for r in caplog.records if "event=config.fallback" in r.getMessage()]
    assert warned == [
        "event=config.fallback setting=flow_cache_ttl_seconds value='-3' used=300: "
        "'-3' is not usable; running with 300"
    ]
