"""The container selects one adapter family from settings and builds only that branch."""

from __future__ import annotations

import socket
import urllib.request

import fakeredis
import pytest
from dependency_injector import providers

from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.entrypoints.container import build_container
from plaita.entrypoints.settings import Settings


def refuse_redis() -> None:
    raise AssertionError("the memory backend must never build a Redis client")


def test_memory_backend_wires_memory_adapters_and_never_builds_redis() -> None:
    container = build_container(Settings(backend="memory"))
    container.redis_client.override(providers.Callable(refuse_redis))
    assert isinstance(container.queue(), MemoryTaskQueue)
    assert isinstance(container.execution_store(), MemoryExecutionRepository)
    container.process_task()
    container.filter_event()
    container.start_execution()


def test_redis_backend_wires_redis_adapters_on_one_client() -> None:
    container = build_container(Settings(backend="redis", queue_name="orders"))
    container.redis_client.override(providers.Object(fakeredis.FakeAsyncRedis()))
    assert isinstance(container.queue(), RedisTaskQueue)
    assert isinstance(container.execution_store(), RedisExecutionRepository)
    assert isinstance(container.leases(), RedisLeaseManager)


def test_settings_read_plaita_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAITA_BACKEND", "redis")
    monkeypatch.setenv("PLAITA_HANDLER_MODULES", "a.handlers, b.handlers")
    monkeypatch.setenv("PLAITA_EXECUTION_DEADLINE_SECONDS", "2.5")
    settings = Settings()
    assert settings.backend == "redis"
    assert settings.handler_modules == ("a.handlers", "b.handlers")
    assert settings.execution_deadline_ms == 2500


def test_memory_singletons_are_shared_by_worker_and_event_filter() -> None:
    container = build_container(Settings(backend="memory"))
    assert container.queue() is container.queue()
    assert container.executions() is container.executions()


def refuse_sql() -> None:
    raise AssertionError("without storage=sql no database engine may be built")


def test_storage_sql_wires_state_leases_and_flows_to_the_database(tmp_path: object) -> None:
    """S4: PLAITA_STORAGE=sql moves state, leases and flows; the queue stays on the backend."""
    from plaita.adapters.sqlalchemy.flows import SqlFlowRepository
    from plaita.adapters.sqlalchemy.lease import SqlLeaseManager
    from plaita.adapters.sqlalchemy.storage import SqlExecutionRepository

    container = build_container(
        Settings(backend="memory", storage="sql", database_url=f"sqlite:///{tmp_path}/s.db")
    )
    container.redis_client.override(providers.Callable(refuse_redis))
    assert isinstance(container.execution_store(), SqlExecutionRepository)
    assert isinstance(container.leases(), SqlLeaseManager)
    assert isinstance(container.flow_repository(), SqlFlowRepository)
    assert isinstance(container.queue(), MemoryTaskQueue)
    container.process_task()


def test_default_storage_never_builds_a_database_engine() -> None:
    container = build_container(Settings(backend="memory"))
    container.sql_engine.override(providers.Callable(refuse_sql))
    container.process_task()
    container.delete_execution()
    container.recover_after_restart()


def test_storage_sql_without_a_database_url_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="PLAITA_DATABASE_URL"):
        Settings(storage="sql")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_metrics_exporter_serves_what_the_worker_metrics_record() -> None:
    """C5: ``--metrics-port`` serves the registry the worker's metrics record into; nothing
    outside the container knows which recorder that is."""
    port = free_port()
    container = build_container(Settings(backend="memory", metrics_port=port))
    metrics, exporter = container.metrics(), container.metrics_exporter()
    metrics.worker_up(True)
    assert exporter.serve() == port
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            body = answer.read()
    finally:
        exporter.close()
    assert b"plaita_worker_up 1.0" in body


def test_metrics_port_zero_records_and_serves_nothing() -> None:
    container = build_container(Settings(backend="memory", metrics_port=0))
    assert not container.metrics().enabled
    assert container.metrics_exporter().serve() is None
