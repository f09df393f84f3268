"""Operating a worker: its registry record (W16), metrics (C5), disk guard (W18) and the
start-up check of its settings (W21)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.registry import MemoryWorkerRegistry
from plaita.adapters.prometheus.worker import PrometheusWorkerMetrics
from plaita.application.ports import WorkerInstance
from plaita.application.use_cases.step import DispatchResult, Disposition
from plaita.domain.config_generations import RuntimeConfig, generations_of
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.errors import InvalidConfigurationError
from plaita.domain.worker_state import WorkerStatus, registration_retry_delay
from plaita.entrypoints.cli import main
from plaita.entrypoints.container import build_container
from plaita.entrypoints.disk_guard import GIB, DiskGuard
from plaita.entrypoints.settings import Settings, worker_settings
from plaita.entrypoints.worker import Presence, Worker

from ..application.conftest import FakeClock

UNREACHABLE = "redis://127.0.0.1:1/0"
GENERATIONS = generations_of(RuntimeConfig("plaita", "default", "plaita-workers", "dlq"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# --- registry (W16) ------------------------------------------------------------------------


class FlakyRegistry(MemoryWorkerRegistry):
    """The memory registry, failing its first ``failures`` writes; records every write."""

    def __init__(self, clock: FakeClock, failures: int = 0) -> None:
        super().__init__(clock)
        self.failures = failures
        self.writes: list[tuple[str, int]] = []

    async def put(self, instance: WorkerInstance, *, ttl_ms: int) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("registry unreachable")
        self.writes.append((instance.status, ttl_ms))
        await super().put(instance, ttl_ms=ttl_ms)

    @property
    def statuses(self) -> list[str]:
        return [status for status, _ in self.writes]


@attrs.define
class RecordedSleeps:
    """Sleeps that only yield, so background retries and heartbeats run at once."""

    seconds: list[float] = attrs.field(factory=list)

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)
        await asyncio.sleep(0.001)


def presence(registry: FlakyRegistry, clock: FakeClock, sleep: RecordedSleeps) -> Presence:
    return Presence(
        registry,
        instance_id="w1",
        clock=clock,
        lease_ttl_ms=120_000,
        generations=GENERATIONS,
        sleep=sleep,
    )


async def eventually(condition: Any, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.002)


async def test_a_worker_registers_starting_then_running_and_heartbeats(clock: FakeClock) -> None:
    registry = FlakyRegistry(clock)
    sleeps = RecordedSleeps()
    me = presence(registry, clock, sleeps)
    assert (me.heartbeat_seconds, me.record_ttl_ms) == (2.0, 6_000), "min(TTL/3, 2 s), 3 beats"

    await me.announce()
    await me.start()
    assert registry.statuses == ["starting", "running"] and me.dispatchable
    await eventually(lambda: len(registry.writes) >= 4)
    assert set(registry.statuses[2:]) == {"running"} and set(sleeps.seconds) == {2.0}
    assert {ttl for _, ttl in registry.writes} == {6_000}
    record = await registry.get("w1")
    assert record is not None and record.heartbeat_ms == clock.now_ms()
    assert (record.config_family, record.budget_generation) == (
        GENERATIONS.config_family,
        GENERATIONS.budget_generation,
    )
    await me.stop()


async def test_a_short_lease_ttl_makes_heartbeats_a_third_of_it(clock: FakeClock) -> None:
    me = Presence(MemoryWorkerRegistry(clock), instance_id="w1", clock=clock, lease_ttl_ms=3000)
    assert (me.heartbeat_seconds, me.record_ttl_ms) == (1.0, 3000)


async def test_a_failed_registration_is_retried_in_the_background_and_the_worker_goes_on(
    clock: FakeClock,
) -> None:
    registry = FlakyRegistry(clock, failures=4)  # the announce and three registrations fail
    sleeps = RecordedSleeps()
    me = presence(registry, clock, sleeps)

    await me.announce()
    await me.start()
    assert not me.registered and not me.dispatchable, "not running for conflict decisions"
    assert me.status is WorkerStatus.STARTING and await registry.get("w1") is None

    await eventually(lambda: me.registered)
    assert sleeps.seconds[:3] == [registration_retry_delay(n) for n in (1, 2, 3)] == [1, 2, 4]
    assert me.dispatchable and registry.statuses[0] == "running"
    await me.stop()


async def test_drain_and_stop_are_written_at_once_then_the_record_is_removed(
    clock: FakeClock,
) -> None:
    registry = FlakyRegistry(clock)
    me = presence(registry, clock, RecordedSleeps())
    await me.announce()
    await me.start()

    await me.drain()
    assert registry.statuses[-1] == "draining" and not me.dispatchable
    await me.stop()

    assert registry.statuses[-2:] == ["stopping", "stopped"]
    assert registry.writes[-1][1] == 5000, "the stopped record outlives a failed delete by 5 s"
    assert await registry.get("w1") is None
    assert me.status is WorkerStatus.CLOSED
    written = len(registry.writes)
    await asyncio.sleep(0.01)
    assert len(registry.writes) == written, "no heartbeat or retry after the stop"


async def test_a_drain_before_the_registration_succeeded_is_kept(clock: FakeClock) -> None:
    registry = FlakyRegistry(clock, failures=2)
    me = presence(registry, clock, RecordedSleeps())
    await me.announce()
    await me.start()
    assert not me.registered

    await me.drain()
    await eventually(lambda: me.registered)
    assert "running" not in registry.statuses and registry.statuses[0] == "draining"
    await me.stop()


async def test_the_worker_runs_with_its_record_running_and_removes_it_on_stop(
    clock: FakeClock,
) -> None:
    registry = FlakyRegistry(clock)
    me = presence(registry, clock, RecordedSleeps())
    queue = MemoryTaskQueue(clock)
    worker = Worker(queue=queue, process=Answering(), consumer="w1", read_block_ms=10, presence=me)  # type: ignore[arg-type]
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await eventually(lambda: me.dispatchable)
    record = await registry.get("w1")
    assert record is not None and record.status == "running"
    stop.set()
    await asyncio.wait_for(running, 5)
    assert registry.statuses[:2] == ["starting", "running"]
    assert registry.statuses[-3:] == ["draining", "stopping", "stopped"]
    assert await registry.get("w1") is None


def test_no_registry_turns_the_steps_registry_off_and_stamps_the_generations() -> None:
    settings = Settings(backend="memory", registry_enabled=False, queue_name="orders")
    container = build_container(settings)
    assert container.step_settings().registry_enabled is False
    generations = container.step_settings().generations
    assert generations == container.generations()
    assert generations.config_family and generations.config_family.startswith("cf1-")
    other = build_container(Settings(backend="memory")).generations()
    assert other.config_family != generations.config_family, "the queue is in the family"
    assert build_container(Settings(backend="memory")).step_settings().registry_enabled


# --- metrics (C5) ---------------------------------------------------------------------------


@attrs.define
class Answering:
    """A step that answers each execution id with a scripted (outcome, disposition)."""

    answers: dict[str, tuple[str, Disposition]] = attrs.field(factory=dict)
    seen: list[str] = attrs.field(factory=list)

    async def __call__(
        self,
        envelope: TaskEnvelope,
        *,
        message_id: str | None = None,
        reclaimed: bool = False,
        deliveries: int = 1,
    ) -> DispatchResult:
        self.seen.append(envelope.execution_id)
        outcome, disposition = self.answers.get(
            envelope.execution_id, ("completed", Disposition.ACK)
        )
        return DispatchResult(disposition, outcome)


def resume(execution_id: str, kind: ResumeType, now_ms: int) -> TaskEnvelope:
    return TaskEnvelope.resume(
        execution_id=execution_id,
        flow_id="f",
        resume_type=kind,
        now_ms=now_ms,
        generations=LEGACY_GENERATIONS,
    )


def sample(metrics: PrometheusWorkerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def metered_worker(
    queue: MemoryTaskQueue, step: Answering, clock: FakeClock, metrics: PrometheusWorkerMetrics
) -> Worker:
    """A worker whose gauges are refreshed every few milliseconds."""
    return Worker(
        queue=queue,
        process=step,  # type: ignore[arg-type]
        consumer="w1",
        clock=clock,
        read_block_ms=10,
        metrics=metrics,
        gauges_every_seconds=0.005,
    )


async def test_the_worker_counts_steps_failures_retries_conflicts_and_dead_letters(
    clock: FakeClock,
) -> None:
    queue = MemoryTaskQueue(clock)
    step = Answering(
        answers={
            "retry": ("retry_scheduled", Disposition.ACK),
            "busy": ("lease_conflict", Disposition.LEAVE_PENDING),
            "bad": ("failed", Disposition.ACK),
            "old": ("carrier_too_old", Disposition.DEAD_LETTER),
        }
    )
    for execution_id in ("done", "retry", "busy", "bad", "old"):
        await queue.enqueue(resume(execution_id, ResumeType.CONTINUE, clock.now_ms()))
    await queue.enqueue(resume("event", ResumeType.EVENT, clock.now_ms() - 20))
    await queue.enqueue_raw({"envelope": "{not json"})
    metrics = PrometheusWorkerMetrics()
    worker = metered_worker(queue, step, clock, metrics)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await eventually(lambda: sample(metrics, "plaita_stream_length") == 7 and len(step.seen) == 6)
    await eventually(lambda: sample(metrics, "plaita_dlq_length") == 2)
    assert sample(metrics, "plaita_worker_up") == 1
    stop.set()
    await asyncio.wait_for(running, 5)

    assert sample(metrics, "plaita_steps_total", outcome="completed") == 2
    assert sample(metrics, "plaita_steps_total", outcome="retry_scheduled") == 1
    assert sample(metrics, "plaita_retries_total") == 1
    assert sample(metrics, "plaita_lease_conflicts_total", disposition="leave_pending") == 1
    assert sample(metrics, "plaita_failures_total", outcome="failed") == 1
    assert sample(metrics, "plaita_failures_total", outcome="carrier_too_old") == 1
    assert sample(metrics, "plaita_dead_letters_total", reason="unguarded") == 2
    assert sample(metrics, "plaita_stream_pending") == 1, "the lease conflict's carrier"
    assert sample(metrics, "plaita_resume_latency_seconds_count") == 1
    assert sample(metrics, "plaita_resume_latency_seconds_sum") == pytest.approx(0.02)
    assert sample(metrics, "plaita_worker_up") == 0


async def test_the_dlq_gauge_is_the_queues_own_count_even_past_ten_thousand(
    clock: FakeClock,
) -> None:
    """C5, W10: the worker asks the queue port how long its DLQ is, whatever the cap; a
    listing of the newest entries stopped counting at 10,000."""
    queue = MemoryTaskQueue(clock, dead_letter_max_len=20_000)
    for _ in range(10_003):
        await queue.enqueue_raw({"envelope": "{not json"})
    for delivery in await queue.read("earlier", count=20_000, block_ms=0):
        await queue.dead_letter(delivery, "undecodable")
    metrics = PrometheusWorkerMetrics()
    worker = metered_worker(queue, Answering(), clock, metrics)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        await eventually(lambda: sample(metrics, "plaita_stream_length") == 10_003, timeout=2)
        await eventually(lambda: sample(metrics, "plaita_dlq_length") == 10_003, timeout=2)
    finally:
        stop.set()
        await asyncio.wait_for(running, 5)


# --- disk guard (W18) ------------------------------------------------------------------------


@attrs.define
class Disk:
    free_gib: float = 100.0
    broken: bool = False

    def __call__(self, path: str) -> int:
        if self.broken:
            raise FileNotFoundError(path)
        return int(self.free_gib * GIB)


def test_the_disk_guard_blocks_below_the_line_and_warns_once_per_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk = Disk(free_gib=5)
    metrics = PrometheusWorkerMetrics()
    guard = DiskGuard(min_free_gib=10, path="/data", probe=disk, metrics=metrics)
    with caplog.at_level(logging.WARNING, logger="plaita.worker.disk_guard"):
        assert not guard.allows() and not guard.allows()
        assert sample(metrics, "plaita_disk_guard_blocked") == 1
        disk.free_gib = 20
        assert guard.allows() and guard.allows()
    events = [r.getMessage().split()[0] for r in caplog.records]
    assert events == ["event=disk_guard.below", "event=disk_guard.recovered"]
    assert "free disk space on /data" in caplog.records[0].getMessage()
    assert sample(metrics, "plaita_disk_guard_blocked") == 0


def test_a_failing_probe_allows_and_zero_disables(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="plaita.worker.disk_guard"):
        broken = DiskGuard(min_free_gib=10, probe=Disk(broken=True))
        assert broken.allows() and broken.allows()
    assert len(caplog.records) == 1 and "probe_failed" in caplog.records[0].getMessage()
    assert DiskGuard(min_free_gib=0, probe=Disk(free_gib=0)).allows()


async def test_below_the_line_the_worker_neither_reads_nor_claims_and_resumes_above_it(
    clock: FakeClock,
) -> None:
    queue = MemoryTaskQueue(clock)
    await queue.enqueue(resume("x-1", ResumeType.CONTINUE, clock.now_ms()))
    await queue.enqueue(resume("x-2", ResumeType.CONTINUE, clock.now_ms()))
    await queue.read("dead-worker", count=1, block_ms=0)  # x-1 waits to be reclaimed
    clock.advance(120)
    disk = Disk(free_gib=1)
    step = Answering()
    worker = Worker(
        queue=queue,
        process=step,  # type: ignore[arg-type]
        consumer="w1",
        read_block_ms=10,
        disk_guard=DiskGuard(min_free_gib=10, probe=disk, poll_seconds=0.005),
    )
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await asyncio.sleep(0.05)
    assert step.seen == [] and (await queue.stats()).pending == 1, "nothing read or claimed"
    disk.free_gib = 50
    await eventually(lambda: sorted(step.seen) == ["x-1", "x-2"])
    stop.set()
    await asyncio.wait_for(running, 5)


# --- start-up check (W21) ---------------------------------------------------------------------


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.output


def test_the_worker_lists_every_invalid_setting_and_exits_2_before_connecting() -> None:
    code, out = invoke(
        "worker",
        "--redis-url",
        UNREACHABLE,
        "--queue-name",
        " ",
        "--lease-ttl-seconds",
        "0",
        "--claim-min-idle-ms",
        "-1",
        "--max-deliveries",
        "0",
        "--concurrency",
        "20000",
        "--min-free-disk-gib",
        "-1",
        env={"PLAITA_DISABLE_HOLDER_LIVENESS": "maybe"},
    )
    assert code == 2, out
    assert "cannot reach Redis" not in out, "nothing connected"
    for setting in (
        "queue_name",
        "lease_ttl_ms",
        "claim_min_idle_ms",
        "max_deliveries",
        "concurrency",
        "min_free_disk_gib",
        "disable_holder_liveness",
    ):
        assert f"  {setting}: " in out, (setting, out)
    assert "7 invalid setting(s)" in out


@pytest.mark.parametrize("dlq_key", ["elsewhere", "app:{other}:dlq", "app:{x}:{default}:dlq"])
def test_a_dlq_key_without_the_queues_hash_tag_is_refused(dlq_key: str) -> None:
    """The dead letter and its ack are one MULTI/EXEC: both keys need one hash tag."""
    code, out = invoke("worker", "--redis-url", UNREACHABLE, "--dlq-key", dlq_key)
    assert code == 2 and f"dlq_key: {dlq_key!r}" in out
    assert "'{default}'" in out and "plaita:q:{default}:dlq" in out


def test_a_dlq_key_with_the_queues_hash_tag_is_accepted() -> None:
    code, out = invoke("worker", "--redis-url", UNREACHABLE, "--dlq-key", "app:{default}:dead")
    assert code == 1 and "dlq_key" not in out and "cannot reach Redis" in out


def test_unusable_optional_settings_fall_back_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="plaita.worker"):
        code, out = invoke(
            "worker",
            "--redis-url",
            UNREACHABLE,
            "--metrics-port",
            "70000",
            "--disk-guard-path",
            " ",
        )
    assert code == 1 and "cannot reach Redis" in out, "valid apart from them: it connects"
    warned = [r.getMessage() for r in caplog.records if "event=config.fallback" in r.getMessage()]
    assert any("setting=metrics_port value=70000 used=0" in line for line in warned), warned
    assert any("setting=disk_guard_path value=' ' used='.'" in line for line in warned), warned


def test_worker_settings_apply_the_fallbacks_and_read_plaita_variables() -> None:
    settings, check = worker_settings(
        {"backend": "redis", "metrics_port": -5, "queue_name": "orders"},
        environ={"PLAITA_NAMESPACE": "tenant-a", "PLAITA_MAX_CARRIER_AGE_DAYS": "0"},
    )
    assert settings.metrics_port == 0 and settings.queue_name == "orders"
    assert [w.setting for w in check.warnings] == ["metrics_port", "max_carrier_age_ms"]
    with pytest.raises(InvalidConfigurationError) as refused:
        worker_settings({"backend": "redis"}, environ={"PLAITA_NAMESPACE": ""})
    assert "namespace" in str(refused.value)
