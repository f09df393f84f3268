"""Every setting does what it says (issue 12 item 9; W21).

A setting that is validated but read by nothing is a lie to the operator: they set it, the
start-up check accepts it, and nothing changes. So this audit lists every field of
``Settings`` and every setting the start-up check (W21) knows, each with a probe: a
non-default value and what the system built from it shows of it — the container's objects
(the worker, the step settings, the queue on a fake Redis, the janitor's plan …) or the
console app the ``plaita console`` command serves.

A new setting fails ``test_every_setting_is_audited`` until it gets a probe here; a setting
the start-up check validates but ``Settings`` does not have fails too: make it real or remove
it (and its docs).
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import fakeredis
import httpx
import pytest
from dependency_injector import providers

from plaita.application.tenancy import tenant_scope
from plaita.domain import startup
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.errors import UnknownHandlerError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints import settings as settings_module
from plaita.entrypoints.cli_console import console_app, load_tokens
from plaita.entrypoints.console.auth import TokenTable
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

from ..application.conftest import FakeClock, one_task

JSON = Any
#: Engines are built, never connected: no file is created there.
SCRATCH = Path(tempfile.gettempdir())
Observe = Callable[[Settings], Awaitable[object]]

#: What every probe builds on: nothing connects, nothing is imported.
BASE: dict[str, object] = {"backend": "memory"}
DEFAULT = object()


@attrs.frozen
class Probe:
    """``observe(settings)`` shows ``expected`` with ``value`` set, and not without it."""

    value: object
    observe: Observe
    expected: object
    #: Further settings the value needs (e.g. a database for ``storage=sql``).
    extra: Mapping[str, object] = attrs.field(factory=dict)
    #: The value to contrast with, when the field's default cannot be built in this context.
    contrast: object = DEFAULT


def container_of(settings: Settings) -> Container:
    container = build_container(settings)
    if settings.backend == "redis":
        client = fakeredis.FakeAsyncRedis(decode_responses=True)
        container.redis_client.override(providers.Object(client))
    return container


def carrier() -> TaskEnvelope:
    return TaskEnvelope.resume(
        execution_id="x-1",
        flow_id="f",
        resume_type=ResumeType.CONTINUE,
        now_ms=1,
        generations=LEGACY_GENERATIONS,
    )


def sync(read: Callable[[Container], object]) -> Observe:
    async def observe(settings: Settings) -> object:
        return read(container_of(settings))

    return observe


async def tenant_epochs(settings: Settings) -> object:
    """The epoch a tenant's status is written under, and the one the worker's gate judges by
    (W24)."""
    container = container_of(settings)
    written = await container.suspend_tenant()("acme")
    return written.record.epoch, container.step_settings().deployment_epoch


async def redis_keys_written(settings: Settings) -> object:
    """The keys a carrier and its dead letter land on (a fake Redis)."""
    container = container_of(settings)
    queue = container.queue()
    await queue.ensure_group()
    await queue.enqueue(carrier())
    [delivery] = await queue.read("w", count=1, block_ms=1)
    await queue.dead_letter(delivery, "audit")
    return sorted(await container.redis_client().keys("*"))


async def partition_keys_written(settings: Settings) -> object:
    """The keys a carrier, its dead letter and a delayed copy land on, and the family's
    partition count (a fake Redis)."""
    container = container_of(settings)
    queue = container.queue()
    await queue.ensure_group()
    await queue.enqueue(carrier())
    [delivery] = await queue.read("w", count=1, block_ms=1)
    await queue.dead_letter(delivery, "audit")
    await container.delay_queue().schedule(carrier(), due_ms=1)
    await queue.close()
    family = container.runtime_config().family_settings().get("partitions")
    return sorted(await container.redis_client().keys("*")), family


async def consumer_groups(settings: Settings) -> object:
    container = container_of(settings)
    await container.queue().ensure_group()
    client = container.redis_client()
    [stream] = await client.keys("*:stream")
    return [group["name"] for group in await client.xinfo_groups(stream)]


async def redis_address(settings: Settings) -> object:
    kwargs = container_of(settings).redis_client().connection_pool.connection_kwargs
    return (kwargs["host"], kwargs["port"], kwargs["db"])


async def redis_client_kind(settings: Settings) -> object:
    """The client the container builds (never connected): a single node's or a cluster's."""
    client = build_container(settings).redis_client()
    kind = type(client).__name__
    await client.aclose()
    return kind


async def dead_letters_kept(settings: Settings) -> object:
    """How many of three dead letters the DLQ keeps (its cap, W10)."""
    queue = container_of(settings).queue()
    for _ in range(3):
        await queue.enqueue(carrier())
    for delivery in await queue.read("w", count=3, block_ms=1):
        await queue.dead_letter(delivery, "audit")
    return len(await queue.dead_letters(count=100))


class CountingFlows:
    """The flow repository, counting the definitions read through it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.reads = 0

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await self._inner.get(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def flow(flow_id: str) -> Flow:
    return Flow.from_document(
        {"flow_id": flow_id, "start": "done", "nodes": [{"id": "done", "type": "end"}]}
    )


async def flow_reads(settings: Settings, *, lookups: tuple[str, ...], wait_s: float) -> int:
    """Definitions read from the store for ``lookups`` through the worker's catalog (W20)."""
    container = container_of(settings)
    clock = FakeClock()
    container.clock.override(providers.Object(clock))
    counting = CountingFlows(container.flow_repository())
    container.flow_repository.override(providers.Object(counting))
    for flow_id in set(lookups):
        await counting.put_if_absent(flow(flow_id), owner=SHARED)
    catalog = container.flows()
    with tenant_scope("default"):
        for flow_id in lookups:
            await catalog.get(flow_id)
            clock.advance(wait_s)
    return counting.reads


async def cache_size_reads(settings: Settings) -> object:
    return await flow_reads(settings, lookups=("a", "b", "a"), wait_s=0)


async def cache_ttl_reads(settings: Settings) -> object:
    return await flow_reads(settings, lookups=("a", "a"), wait_s=2)


async def terminal_kept_for_s(settings: Settings) -> object:
    """How long (seconds) a completed execution's state is kept (its retention, S5)."""
    container = container_of(settings)
    clock = FakeClock()
    container.clock.override(providers.Object(clock))
    completed = attrs.evolve(
        ExecutionState.new(
            execution_id="x-1",
            flow_id="f",
            flow_version="1",
            fingerprint="f" * 64,
            start_node_id="a",
            input={},
            now_ms=1,
        ),
        status=ExecutionStatus.COMPLETED,
    )
    with tenant_scope("default"):
        lease = await container.leases().acquire("x-1", "w", ttl_ms=60_000)
        assert lease is not None
        await container.executions().save(completed, fence=lease.generation)
        kept = 0
        for step_s in (3600,) * 24 * 8:
            if await container.executions().load("x-1") is None:
                return kept
            clock.advance(step_s)
            kept += step_s
    return kept


async def body_refused(settings: Settings) -> object:
    """Whether the console refuses a 200-byte request body as too large (413)."""
    token = {"token": "t" * 24, "name": "ops", "role": "admin", "tenants": ["*"]}
    tokens = TokenTable.from_json(json.dumps([token]), source="audit")
    app = console_app(container_of(settings), settings, tokens)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        response = await client.post(
            "/api/v1/executions",
            content=json.dumps({"flow_id": "f", "input": {"pad": "x" * 160}}),
            headers={
                "Authorization": f"Bearer {token['token']}",
                "Content-Type": "application/json",
            },
        )
    return response.status_code == 413


#: An allowlisted module that no process can import.
ABSENT_MODULE = "plaita_audit_absent_module"


async def unimportable_handler_registered(settings: Settings) -> object:
    """Whether the catalog registers a flow whose allowlisted handler module cannot be
    imported: only a names-only check (``handler_check=names``) does not look."""
    document = one_task(f"{ABSENT_MODULE}:run")
    try:
        await container_of(settings).flows().register(Flow.from_document(document), owner=SHARED)
    except UnknownHandlerError:
        return "refused"
    return "registered"


async def token_names(settings: Settings) -> object:
    return sorted(token.name for token in load_tokens(settings, None))


def tokens_named(name: str) -> str:
    return json.dumps([{"token": "s" * 24, "name": name, "role": "viewer", "tenants": ["*"]}])


async def hooks_known(settings: Settings) -> object:
    """The hooks the console serves: those of the hooks file, written here for the probe."""
    path = Path(settings.hooks_file) if settings.hooks_file else None
    if path is not None:
        hook = {
            "name": "audited",
            "event_type": "t",
            "correlation_id_pointer": "/id",
            "secret": "whsec-0123456789abcdef",
        }
        path.write_text(json.dumps({"hooks": [hook]}))
    try:
        listed = await container_of(settings).hook_catalog().list("default")
        return [item.hook.name for item in listed]
    finally:
        if path is not None:
            path.unlink()


PROBES: dict[str, Probe] = {
    "backend": Probe("redis", sync(lambda c: type(c.queue()).__name__), "RedisTaskQueue"),
    "redis_url": Probe("redis://10.1.2.3:6390/4", redis_address, ("10.1.2.3", 6390, 4)),
    "redis_cluster": Probe(
        True,
        redis_client_kind,
        "RedisCluster",
        extra={"backend": "redis", "redis_url": "redis://10.1.2.3:7000"},
    ),
    "storage": Probe(
        "sql",
        sync(lambda c: type(c.execution_store()).__name__),
        "SqlExecutionRepository",
        extra={"database_url": f"sqlite:///{SCRATCH / 'plaita-audit.db'}"},
    ),
    "database_url": Probe(
        f"sqlite:///{SCRATCH / 'plaita-audit-a.db'}",
        sync(lambda c: c.sql_engine().url.database),
        str(SCRATCH / "plaita-audit-a.db"),
        extra={"storage": "sql"},
        contrast=f"sqlite:///{SCRATCH / 'plaita-audit-b.db'}",
    ),
    "namespace": Probe(
        "acme",
        redis_keys_written,
        [
            "acme:q:{default}:dlq",
            "acme:q:{default}:stream",
            "acme:q:{default}:stream:high",
            "acme:q:{default}:stream:low",
        ],
        extra={"backend": "redis"},
    ),
    "handler_modules": Probe(
        ("examples.handlers",), sync(lambda c: c.handlers().allowed_modules), {"examples.handlers"}
    ),
    "handler_check": Probe(
        "names",
        unimportable_handler_registered,
        "registered",
        extra={"handler_modules": (ABSENT_MODULE,)},
    ),
    "queue_name": Probe(
        "orders",
        redis_keys_written,
        [
            "plaita:q:{orders}:dlq",
            "plaita:q:{orders}:stream",
            "plaita:q:{orders}:stream:high",
            "plaita:q:{orders}:stream:low",
        ],
        extra={"backend": "redis"},
    ),
    "consumer_group": Probe(
        "order-workers", consumer_groups, ["order-workers"], extra={"backend": "redis"}
    ),
    "partitions": Probe(
        3,
        partition_keys_written,
        (
            [
                "plaita:q:{default:p0}:stream",
                "plaita:q:{default:p0}:stream:high",
                "plaita:q:{default:p0}:stream:low",
                "plaita:q:{default:p1}:delayed",
                "plaita:q:{default:p1}:dlq",
                "plaita:q:{default:p1}:stream",
                "plaita:q:{default:p1}:stream:high",
                "plaita:q:{default:p1}:stream:low",
                "plaita:q:{default:p2}:stream",
                "plaita:q:{default:p2}:stream:high",
                "plaita:q:{default:p2}:stream:low",
                "plaita:q:{default}:partitions",
            ],
            3,
        ),
        extra={"backend": "redis"},
    ),
    "consumer_name": Probe(
        "w-7",
        sync(
            lambda c: (
                c.worker().options.consumer,
                c.step_settings().holder_id,
                c.presence().instance_id,
            )
        ),
        ("w-7", "w-7", "w-7"),
    ),
    "concurrency": Probe(7, sync(lambda c: c.worker().options.concurrency), 7),
    "read_block_ms": Probe(250, sync(lambda c: c.worker().options.read_block_ms), 250),
    "claim_min_idle_ms": Probe(
        90_000, sync(lambda c: c.worker().options.claim_min_idle_ms), 90_000
    ),
    "lease_ttl_seconds": Probe(
        6.0,
        sync(lambda c: (c.step_settings().lease_ttl_ms, c.presence().heartbeat_seconds)),
        (6_000, 2.0),
    ),
    "execution_deadline_seconds": Probe(
        60.0, sync(lambda c: c.step_settings().default_deadline_ms), 60_000
    ),
    "max_deliveries": Probe(3, sync(lambda c: c.step_settings().max_deliveries), 3),
    "default_retries": Probe(2, sync(lambda c: c.step_settings().default_retries), 2),
    "http_block_private": Probe(
        True, sync(lambda c: c.step_settings().http_policy.block_private), True
    ),
    "http_max_response_bytes": Probe(
        4096, sync(lambda c: c.step_settings().http_policy.max_response_bytes), 4096
    ),
    "affinity_max_handovers": Probe(3, sync(lambda c: c.step_settings().max_handovers), 3),
    "retention_days": Probe(0.5, terminal_kept_for_s, 12 * 3600),
    "stream_trim_interval_seconds": Probe(
        0.05, sync(lambda c: c.worker().options.trim_every_seconds), 0.05
    ),
    "slot_sweep_interval_seconds": Probe(
        0.5, sync(lambda c: c.worker().options.slot_sweep_every_seconds), 0.5
    ),
    "max_carrier_age_days": Probe(
        2.0, sync(lambda c: c.step_settings().max_carrier_age_ms), 2 * 24 * 3600 * 1000
    ),
    "disable_holder_liveness": Probe(
        True, sync(lambda c: c.step_settings().holder_liveness_disabled), True
    ),
    "dlq_key": Probe(
        "app:{default}:dead",
        redis_keys_written,
        [
            "app:{default}:dead",
            "plaita:q:{default}:stream",
            "plaita:q:{default}:stream:high",
            "plaita:q:{default}:stream:low",
        ],
        extra={"backend": "redis"},
    ),
    "alert_webhook_url": Probe(
        "http://alerts.test/hook",
        sync(lambda c: None if c.alerts() is None else c.alerts().url),
        "http://alerts.test/hook",
    ),
    "alert_queue_size": Probe(
        5,
        sync(lambda c: c.alerts().max_queue),
        5,
        extra={"alert_webhook_url": "http://alerts.test/hook"},
    ),
    "registry_enabled": Probe(
        False,
        sync(lambda c: (c.step_settings().registry_enabled, c.presence())),
        (False, None),
    ),
    "metrics_port": Probe(
        9187, sync(lambda c: type(c.metrics()).__name__), "PrometheusWorkerMetrics"
    ),
    "min_free_disk_gib": Probe(5.0, sync(lambda c: c.disk_guard().min_free_gib), 5.0),
    "disk_guard_path": Probe("/data", sync(lambda c: c.disk_guard().path), "/data"),
    "disk_guard_poll_seconds": Probe(3.0, sync(lambda c: c.disk_guard().poll_seconds), 3.0),
    "drain_timeout_seconds": Probe(
        5.0, sync(lambda c: c.worker().options.drain_timeout_seconds), 5.0
    ),
    "janitor_enabled": Probe(False, sync(lambda c: c.index_janitor().plan.enabled), False),
    "janitor_interval_seconds": Probe(
        15.0, sync(lambda c: c.index_janitor().plan.interval_seconds), 15.0
    ),
    "janitor_budget": Probe(50, sync(lambda c: c.index_janitor().plan.budget), 50),
    "console_tokens": Probe(
        tokens_named("auditor"), token_names, ["auditor"], contrast=tokens_named("other")
    ),
    "max_body_bytes": Probe(100, body_refused, True),
    "deployment_epoch": Probe(4, tenant_epochs, (4, 4)),
    "dlq_max_len": Probe(2, dead_letters_kept, 2),
    "hooks_file": Probe(
        str(SCRATCH / f"plaita-audit-hooks-{uuid.uuid4().hex}.json"), hooks_known, ["audited"]
    ),
    # A miss reads the tenant's own catalogue, then the shared one: two reads (ADR 0011).
    "flow_cache_size": Probe(1, cache_size_reads, 6),
    "flow_cache_ttl_seconds": Probe(1.0, cache_ttl_reads, 4),
    # W22: the scheduler's pace, and the claim its ticks take (and the grace both make).
    "scheduler_poll_interval_seconds": Probe(
        10.0,
        sync(lambda c: (c.scheduler().poll_interval_seconds, c.scheduler_tick().settings.grace_ms)),
        (10.0, 80_000),
    ),
    "scheduler_claim_ttl_seconds": Probe(
        2.5,
        sync(lambda c: (c.scheduler().claim_ttl_ms, c.scheduler_tick().settings.claim_ttl_ms)),
        (2500, 2500),
    ),
}


def startup_check_settings() -> set[str]:
    """What the start-up check validates, under the names ``Settings`` gives them."""
    checked = {
        *startup.IDENTITY_SETTINGS,
        *(name for name, _, _ in startup.RESOURCE_SETTINGS),
        *startup.SECURITY_SWITCHES,
        *startup.OPTIONAL_FALLBACKS,
    }
    as_settings = {check: field for field, (check, _) in settings_module._SCALED.items()}
    return {as_settings.get(name, name) for name in checked}


def test_every_setting_is_audited() -> None:
    """Every field of Settings and every setting the start-up check knows has a probe."""
    known = set(Settings.model_fields) | startup_check_settings()
    missing = sorted(known - set(PROBES))
    assert not missing, (
        f"settings without a probe: {missing}; add a Probe proving what reads each, or "
        "remove the setting (and its docs) if nothing does"
    )


@pytest.mark.parametrize(
    "name",
    [name for name in PROBES],
)
async def test_each_setting_is_read_by_what_it_configures(name: str) -> None:
    """Issue 12 item 9, W21: the value set is the value the built system runs with."""
    assert name in Settings.model_fields, (
        f"{name} is audited (and perhaps validated at start-up) but is no field of Settings: "
        "make it a setting that something reads, or remove it"
    )
    if name in startup_check_settings():
        assert name in settings_module._CHECKED, (
            f"the start-up check knows {name} but worker_settings never shows it to the check"
        )
    probe = PROBES[name]
    chosen = await probe.observe(Settings(**{**BASE, **probe.extra, name: probe.value}))  # type: ignore[arg-type]
    contrast = {} if probe.contrast is DEFAULT else {name: probe.contrast}
    other = await probe.observe(Settings(**{**BASE, **probe.extra, **contrast}))  # type: ignore[arg-type]
    assert chosen == probe.expected, f"{name}={probe.value!r} is not what runs: {chosen!r}"
    assert other != probe.expected, f"the probe of {name} does not depend on it: {other!r}"


def test_every_worker_flag_sets_the_setting_it_is_named_after() -> None:
    """C4, W21: a `plaita worker` flag is a setting (or says what else it is), never loose."""
    from plaita.entrypoints.cli import worker

    not_settings = {
        "flows_dir": "definitions registered at start-up",
        "no_registry": "registry_enabled=false",
        "quiet": "the log level",
    }
    loose = [
        param.name
        for param in worker.params
        if param.name not in Settings.model_fields and param.name not in not_settings
    ]
    assert loose == [], f"worker flags that set no setting: {loose}"
