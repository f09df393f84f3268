"""The ``plaita`` command line (C4). Names and flags here are a contract for docs and tools."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any, TypeVar

import click

from plaita.application.handlers import HandlerRegistry
from plaita.application.use_cases.flows import FlowCatalog, Registration, validate_flow
from plaita.domain.failures import FlowExecutionException
from plaita.domain.flow_owners import SHARED
from plaita.domain.limits import EVENT_DATA_LIMIT, INPUT_LIMIT
from plaita.entrypoints.cli_catalog import (
    flow_owner,
    flows_list,
    flows_show,
    flows_tenant_option,
    for_owner,
    shared_option,
    workers,
)
from plaita.entrypoints.cli_console import console
from plaita.entrypoints.cli_db import db
from plaita.entrypoints.cli_dev import dev
from plaita.entrypoints.cli_events import events_list, events_show
from plaita.entrypoints.cli_executions import (
    executions_bulk,
    executions_cancel,
    executions_list,
    executions_pause,
    executions_resume,
    executions_retry,
    executions_unpause,
)
from plaita.entrypoints.cli_ops import delete_execution, dlq, reap
from plaita.entrypoints.cli_support import (
    EXECUTION_ID,
    FLOW_ID,
    default_retries_option,
    echo_json,
    execution_view,
    flow_cache_size_option,
    flow_cache_ttl_option,
    import_handler_modules,
    json_option,
    load_flow_file,
    log_generations,
    named_errors,
    parse_json_object,
    redis_url_option,
    run_with_container,
    settings_from,
    stop_on_signals,
    tenant_option,
    warn_fallbacks,
)
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.event_filter import EventFilterService
from plaita.entrypoints.run_flow import run_flow
from plaita.entrypoints.settings import Settings
from plaita.entrypoints.timeline import LogListener

T = TypeVar("T")
JSON = Any


def _setting_default(name: str) -> str:
    """The default a flag falls back to when neither it nor PLAITA_<NAME> is set (for --help)."""
    return str(Settings.model_fields[name].default)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--log-level",
    envvar="PLAITA_LOG_LEVEL",
    default="WARNING",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def main(log_level: str) -> None:
    """plaita: a durable suspend/resume flow engine on Redis Streams."""
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


@main.command()
@click.option(
    "--examples-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("examples"),
    show_default=True,
    help="Folder holding flows/approval.json and handlers.py.",
)
def demo(examples_dir: Path) -> None:
    """Run two approval executions on the in-memory twin and print their timeline."""
    from plaita.entrypoints.demo import run_demo

    raise SystemExit(run_demo(examples_dir, click.echo))


def _parse_events(values: tuple[str, ...]) -> list[tuple[str, dict[str, JSON]]]:
    events = []
    for value in values:
        event_type, sep, data = value.partition("=")
        if not sep or not event_type.strip():
            raise click.BadParameter(
                f"expected TYPE=JSON such as 'approval_decision={{\"approved\": true}}', "
                f"got {value!r}",
                param_hint="--event",
            )
        events.append((event_type.strip(), parse_json_object("--event", data, EVENT_DATA_LIMIT)))
    return events


@main.command("run")
@click.argument("flow_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--input", "input_json", default=None, help="Input parameters as a JSON object.")
@click.option(
    "--handler-modules",
    envvar="PLAITA_HANDLER_MODULES",
    default=None,
    help="Modules handlers may come from (default: the modules FLOW_FILE names).",
)
@click.option("--stream", is_flag=True, help="Print one JSON line per node (Generator mode).")
@click.option(
    "--event",
    "event_values",
    multiple=True,
    metavar="TYPE=JSON",
    help="An event the run's event nodes can receive; repeat for several.",
)
@default_retries_option
def run_command(
    flow_file: Path,
    input_json: str | None,
    handler_modules: str | None,
    stream: bool,
    event_values: tuple[str, ...],
    default_retries: int,
) -> None:
    """Run FLOW_FILE in this process and print its result (no Redis needed)."""
    flow = load_flow_file(flow_file)
    params = parse_json_object("--input", input_json, INPUT_LIMIT)
    events = _parse_events(event_values)
    if handler_modules is None:
        handler_modules = ",".join(sorted(flow.handler_modules()))
        if handler_modules:
            click.echo(
                f"note: trusting the handler modules {flow_file} names: {handler_modules} "
                "(restrict with --handler-modules)",
                err=True,
            )
    settings = settings_from(
        backend="memory", handler_modules=handler_modules, default_retries=default_retries
    )
    container = build_container(settings)
    with named_errors():
        try:
            result = run_flow(container, flow, params, events, stream=stream, emit=click.echo)
        except FlowExecutionException as exc:
            where = f" at node {exc.node_id!r}" if exc.node_id else ""
            raise click.ClickException(
                f"flow {flow.flow_id!r} failed{where}: {type(exc).__name__} ({exc.code}): {exc}"
            ) from None
    if not stream:
        click.echo(json.dumps(result, sort_keys=True, default=str))


@main.command()
@redis_url_option
@click.option(
    "--flows",
    "flows_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Register every *.json flow in this folder at start-up, deployment-wide.",
)
@click.option(
    "--handler-modules",
    envvar="PLAITA_HANDLER_MODULES",
    default="",
    help="Comma-separated modules task handlers may come from (env PLAITA_HANDLER_MODULES).",
)
# Unset flags are None, so PLAITA_* (then the Settings default) apply: every process of a pool
# reads the same environment, and the console and CLI compute this worker's generations (W12).
@click.option("--concurrency", type=int, default=None, show_default=_setting_default("concurrency"))
@click.option(
    "--queue-name",
    default=None,
    show_default=_setting_default("queue_name"),
    help="The task queue (env PLAITA_QUEUE_NAME).",
)
@click.option(
    "--consumer-group",
    default=None,
    show_default=_setting_default("consumer_group"),
    help="The consumer group (env PLAITA_CONSUMER_GROUP).",
)
@click.option("--consumer-name", default=None, help="Default: host-pid-random, unique per start.")
@click.option(
    "--read-block-ms",
    type=int,
    default=None,
    show_default=_setting_default("read_block_ms"),
    help="How long one read waits; it also bounds how long a stop takes to begin.",
)
@click.option(
    "--claim-min-idle-ms",
    type=int,
    default=None,
    show_default=_setting_default("claim_min_idle_ms"),
    help="Reclaim carriers another worker left pending this long (env PLAITA_CLAIM_MIN_IDLE_MS).",
)
@click.option(
    "--lease-ttl-seconds",
    type=float,
    default=None,
    show_default=_setting_default("lease_ttl_seconds"),
    help="The execution lease's TTL (env PLAITA_LEASE_TTL_SECONDS); part of the budget "
    "generation, so set it in the environment of every process of the pool.",
)
@click.option(
    "--max-deliveries",
    type=int,
    envvar="PLAITA_MAX_DELIVERIES",
    default=5,
    show_default=True,
    help="Attempts of a step that crash their worker before it is given up: its execution "
    "ends in error and the carrier goes to the dead-letter queue. Skipped redeliveries never "
    "count; a handler's own failures count against its node's retryTimes. Part of the budget "
    "generation: set it in the environment of every process of the pool.",
)
@default_retries_option
@click.option(
    "--dlq-key",
    envvar="PLAITA_DLQ_KEY",
    default=None,
    help="The dead-letter stream (default: the queue's own, NAMESPACE:q:{QUEUE}:dlq).",
)
@click.option(
    "--dlq-max-len",
    type=int,
    envvar="PLAITA_DLQ_MAX_LEN",
    default=10_000,
    show_default=True,
    help="The dead-letter queue's length cap: beyond it the oldest entries are dropped "
    "unreplayed (counted in plaita_dlq_trimmed_total, with a WARNING).",
)
@click.option(
    "--retention-days",
    type=float,
    envvar="PLAITA_RETENTION_DAYS",
    default=7.0,
    show_default=True,
    help="How long a finished execution (completed, failed, cancelled) is kept, then it "
    "expires with everything it wrote; more than 0, fractions allowed.",
)
@click.option(
    "--min-free-disk-gib",
    type=float,
    envvar="PLAITA_MIN_FREE_DISK_GIB",
    default=0.0,
    show_default=True,
    help="Below this much free disk the worker neither reads nor claims; 0 disables.",
)
@click.option(
    "--disk-guard-path",
    envvar="PLAITA_DISK_GUARD_PATH",
    default=".",
    show_default=True,
    help="Where free disk is measured for --min-free-disk-gib.",
)
@click.option(
    "--no-registry",
    is_flag=True,
    help="Do not register in the worker registry; other workers then never take this one "
    "for a live lease holder, and a lease conflict never acks a carrier.",
)
@click.option(
    "--metrics-port",
    type=int,
    envvar="PLAITA_METRICS_PORT",
    default=0,
    show_default=True,
    help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics; 0 disables.",
)
@click.option(
    "--drain-timeout-seconds",
    type=float,
    envvar="PLAITA_DRAIN_TIMEOUT_SECONDS",
    default=30.0,
    show_default=True,
    help="After SIGTERM/SIGINT, how long to wait for running steps; then exit without "
    "acking them (their carriers stay pending for another worker).",
)
@click.option(
    "--alert-webhook-url",
    envvar="PLAITA_ALERT_WEBHOOK_URL",
    default=None,
    help="POST a JSON alert here for every dead letter (best effort; never slows consuming).",
)
@flow_cache_size_option
@flow_cache_ttl_option
@click.option("--quiet", is_flag=True, help="Log WARNING and above only (default: INFO).")
def worker(
    redis_url: str,
    flows_dir: Path | None,
    handler_modules: str,
    concurrency: int | None,
    queue_name: str | None,
    consumer_group: str | None,
    consumer_name: str | None,
    read_block_ms: int | None,
    claim_min_idle_ms: int | None,
    lease_ttl_seconds: float | None,
    max_deliveries: int,
    default_retries: int,
    dlq_key: str | None,
    dlq_max_len: int,
    retention_days: float,
    min_free_disk_gib: float,
    disk_guard_path: str,
    no_registry: bool,
    metrics_port: int,
    drain_timeout_seconds: float,
    alert_webhook_url: str | None,
    flow_cache_size: str | None,
    flow_cache_ttl_seconds: str | None,
    quiet: bool,
) -> None:
    """Advance executions from the task stream until SIGTERM/SIGINT."""
    from plaita.domain.errors import InvalidConfigurationError
    from plaita.entrypoints.settings import worker_settings

    log = logging.getLogger("plaita.worker")
    group = click.get_current_context().parent
    if quiet:
        logging.getLogger().setLevel(logging.WARNING)
    elif group is not None and (
        group.get_parameter_source("log_level") is click.core.ParameterSource.DEFAULT
    ):
        logging.getLogger().setLevel(logging.INFO)
    try:
        settings, check = worker_settings(
            {
                "backend": "redis",
                "redis_url": redis_url,
                "handler_modules": handler_modules,
                "concurrency": concurrency,
                "queue_name": queue_name,
                "consumer_group": consumer_group,
                "consumer_name": consumer_name,
                "read_block_ms": read_block_ms,
                "claim_min_idle_ms": claim_min_idle_ms,
                "lease_ttl_seconds": lease_ttl_seconds,
                "max_deliveries": max_deliveries,
                "default_retries": default_retries,
                "dlq_key": dlq_key,
                "dlq_max_len": dlq_max_len,
                "retention_days": retention_days,
                "min_free_disk_gib": min_free_disk_gib,
                "disk_guard_path": disk_guard_path,
                # Unset unless the flag is given, so PLAITA_REGISTRY_ENABLED=0 works too.
                "registry_enabled": False if no_registry else None,
                "metrics_port": metrics_port,
                "drain_timeout_seconds": drain_timeout_seconds,
                "alert_webhook_url": alert_webhook_url,
                "flow_cache_size": flow_cache_size,
                "flow_cache_ttl_seconds": flow_cache_ttl_seconds,
            }
        )
    except InvalidConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    warn_fallbacks(check.warnings, log)
    flows = [load_flow_file(p) for p in sorted(flows_dir.glob("*.json"))] if flows_dir else []

    async def body(container: Container) -> None:
        import_handler_modules(settings.handler_modules)
        container.listeners.override(lambda: [LogListener()])
        log_generations(log, "worker", container.generations())
        for flow in flows:
            # The worker serves every tenant: its --flows are deployment-wide (ADR 0011).
            registered = await container.flows().register(flow, owner=SHARED)
            done = "registered" if registered.created else "already registered"
            click.echo(
                f"{done} flow {flow.flow_id} version {flow.version} (deployment-wide)", err=True
            )
        exporter = container.metrics_exporter()
        alerts = container.alerts()
        stop = asyncio.Event()
        sender = asyncio.create_task(alerts.run(stop)) if alerts is not None else None
        try:
            try:
                exporter.serve()
            except OSError as exc:
                raise click.ClickException(
                    f"cannot serve metrics on 127.0.0.1:{settings.metrics_port}: {exc}; "
                    "choose another --metrics-port (0 disables)"
                ) from None
            with stop_on_signals(stop):
                await container.worker().run(stop)
        finally:
            stop.set()
            if sender is not None and alerts is not None:
                await sender
                await alerts.close()
            exporter.close()

    run_with_container(settings, body)


@main.command("event-filter")
@redis_url_option
@click.option("--consumer-name", default=None, help="Default: host-pid-random, unique per start.")
@click.option(
    "--read-block-ms",
    type=click.IntRange(1, 60_000),
    default=None,
    show_default=_setting_default("read_block_ms"),
    help="How long one read waits (env PLAITA_READ_BLOCK_MS).",
)
@click.option(
    "--claim-min-idle-ms",
    type=click.IntRange(1),
    default=None,
    show_default=_setting_default("claim_min_idle_ms"),
    help="Reclaim notifications another event filter left pending this long "
    "(env PLAITA_CLAIM_MIN_IDLE_MS).",
)
@click.option(
    "--reconcile-interval-seconds",
    type=float,
    envvar="PLAITA_RECONCILE_INTERVAL_SECONDS",
    default=30.0,
    show_default=True,
    help="Re-scan stored events this often and filter them again, recovering lost "
    "notifications (V5).",
)
@click.option(
    "--reconcile-lookback-seconds",
    type=float,
    envvar="PLAITA_RECONCILE_LOOKBACK_SECONDS",
    default=3600.0,
    show_default=True,
    help="How far back the first re-scan reads when no cursor is stored yet.",
)
@click.option(
    "--reconcile-settle-seconds",
    type=float,
    envvar="PLAITA_RECONCILE_SETTLE_SECONDS",
    default=5.0,
    show_default=True,
    help="Events younger than this are left to the notification stream.",
)
@click.option(
    "--reconcile-overlap-seconds",
    type=float,
    envvar="PLAITA_RECONCILE_OVERLAP_SECONDS",
    default=10.0,
    show_default=True,
    help="Each re-scan also re-reads this much before the stored cursor (late writes, "
    "clock skew between publishers).",
)
@click.option("--quiet", is_flag=True, help="Log WARNING and above only (default: INFO).")
def event_filter(
    redis_url: str,
    consumer_name: str | None,
    read_block_ms: int | None,
    claim_min_idle_ms: int | None,
    reconcile_interval_seconds: float,
    reconcile_lookback_seconds: float,
    reconcile_settle_seconds: float,
    reconcile_overlap_seconds: float,
    quiet: bool,
) -> None:
    """Turn published events into resume carriers for the executions waiting on them.

    Reads the notification stream, and every --reconcile-interval-seconds re-scans the stored
    events by time to recover notifications that were lost. Stops on SIGTERM/SIGINT after the
    notification in flight.
    """
    from plaita.domain.reconcile import (
        InvalidReconcileSettingsError,
        ReconcileSettings,
        seconds_to_ms,
    )

    group = click.get_current_context().parent
    if quiet:
        logging.getLogger().setLevel(logging.WARNING)
    elif group is not None and (
        group.get_parameter_source("log_level") is click.core.ParameterSource.DEFAULT
    ):
        logging.getLogger().setLevel(logging.INFO)
    milliseconds = {}
    for flag, value, allow_zero in (
        ("--reconcile-interval-seconds", reconcile_interval_seconds, False),
        ("--reconcile-lookback-seconds", reconcile_lookback_seconds, True),
        ("--reconcile-settle-seconds", reconcile_settle_seconds, True),
        ("--reconcile-overlap-seconds", reconcile_overlap_seconds, True),
    ):
        try:
            milliseconds[flag] = seconds_to_ms(flag, value, allow_zero=allow_zero)
        except InvalidReconcileSettingsError as exc:
            raise click.UsageError(str(exc)) from None
    try:
        reconcile_settings = ReconcileSettings(
            lookback_ms=milliseconds["--reconcile-lookback-seconds"],
            settle_ms=milliseconds["--reconcile-settle-seconds"],
            overlap_ms=milliseconds["--reconcile-overlap-seconds"],
        )
    except InvalidReconcileSettingsError as exc:
        raise click.UsageError(str(exc)) from None
    settings = settings_from(
        backend="redis",
        redis_url=redis_url,
        consumer_name=consumer_name,
        read_block_ms=read_block_ms,
        claim_min_idle_ms=claim_min_idle_ms,
    )

    async def body(container: Container) -> None:
        from plaita.entrypoints.janitor import (
            run_index_janitor,
            run_notification_trim,
            run_state_sweeper,
        )

        log_generations(
            logging.getLogger("plaita.event_filter"), "event-filter", container.generations()
        )

        async def index_janitor(stop: asyncio.Event) -> None:
            await run_index_janitor(container, stop)

        async def state_sweeper(stop: asyncio.Event) -> None:
            await run_state_sweeper(container, stop)

        async def notification_trim(stop: asyncio.Event) -> None:
            await run_notification_trim(container, stop)

        background = {"index_janitor": index_janitor, "notification_trim": notification_trim}
        if settings.storage == "sql":  # Redis expires state itself; a database needs a sweep
            background["state_sweeper"] = state_sweeper

        stop = asyncio.Event()
        with stop_on_signals(stop):
            await EventFilterService(
                events=container.events(),
                filter_event=container.filter_event(),
                consumer=settings.consumer_name,
                read_block_ms=settings.read_block_ms,
                claim_min_idle_ms=settings.claim_min_idle_ms,
                reconcile=container.reconcile_events(settings=reconcile_settings),
                reconcile_interval_ms=milliseconds["--reconcile-interval-seconds"],
                background=background,
                closeables=[container.subscriptions(), container.executions()],
                outages=container.outages(),
            ).run(stop)

    run_with_container(settings, body)


@main.group()
def flows() -> None:
    """Flow definitions."""


@flows.command("register")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@flows_tenant_option
@shared_option
@redis_url_option
@click.option(
    "--handler-modules",
    envvar="PLAITA_HANDLER_MODULES",
    default=None,
    help="When given, refuse flows whose handlers come from other modules.",
)
@json_option
def flows_register(
    files: tuple[Path, ...],
    tenant_id: str,
    shared: bool,
    redis_url: str,
    handler_modules: str | None,
    as_json: bool,
) -> None:
    """Validate and register flow definition files for a tenant, or deployment-wide.

    A registered (flow_id, version) never changes: the same document again changes nothing,
    another document is refused (FlowVersionConflictError, exit 1). Every file is checked
    first, so a refusal writes nothing.
    """
    owner = flow_owner(tenant_id, shared)
    settings = settings_from(backend="redis", redis_url=redis_url, handler_modules=handler_modules)
    loaded = [load_flow_file(path) for path in files]
    allowlist = None if handler_modules is None else HandlerRegistry(settings.handler_modules)
    with named_errors():
        for flow in loaded:
            validate_flow(flow, allowlist)

    async def body(container: Container) -> list[Registration]:
        catalog = FlowCatalog(container.flow_repository(), allowlist, clock=container.clock())
        for flow in loaded:
            await catalog.check_registration(flow, owner=owner)
        return [await catalog.register(flow, owner=owner) for flow in loaded]

    for registration in run_with_container(settings, body):
        flow = registration.flow
        if as_json:
            echo_json(
                {
                    "flow_id": flow.flow_id,
                    "version": flow.version,
                    "fingerprint": flow.fingerprint,
                    **owner.to_json(),
                    "created": registration.created,
                }
            )
        elif registration.created:
            click.echo(
                f"registered {flow.flow_id} version {flow.version} ({flow.fingerprint[:12]}) "
                f"{for_owner(owner)}"
            )
        else:
            click.echo(
                f"{flow.flow_id} version {flow.version} ({flow.fingerprint[:12]}) was already "
                f"registered {for_owner(owner)} with this document; nothing changed"
            )


@main.group()
def executions() -> None:
    """Start and inspect executions."""


@executions.command("start")
@click.argument("flow_id", type=FLOW_ID)
@click.option("--version", default=None, help="Flow version (default: the latest registered).")
@click.option("--input", "input_json", default=None, help="Input parameters as a JSON object.")
@click.option("--dedup-key", default=None, help="Starting twice with one key starts once.")
@click.option(
    "--execution-id",
    type=EXECUTION_ID,
    default=None,
    help="Choose the id (default: a new uuid); letters, digits, '_', '.', ':' and '-'.",
)
@tenant_option
@redis_url_option
@json_option
def executions_start(
    flow_id: str,
    version: str | None,
    input_json: str | None,
    dedup_key: str | None,
    execution_id: str | None,
    tenant_id: str,
    redis_url: str,
    as_json: bool,
) -> None:
    """Start an execution of FLOW_ID; prints its id."""
    params = parse_json_object("--input", input_json, INPUT_LIMIT)
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> Any:
        return await container.start_execution()(
            flow_id,
            version=version,
            params=params,
            execution_id=execution_id,
            dedup_key=dedup_key,
            tenant_id=tenant_id,
        )

    started = run_with_container(settings, body, tenant_id=tenant_id)
    if as_json:
        echo_json(
            {
                "execution_id": started.execution_id,
                "flow_id": started.flow_id,
                "version": started.version,
                "deduplicated": started.deduplicated,
            }
        )
    else:
        click.echo(started.execution_id)


@executions.command("show")
@click.argument("execution_id", type=EXECUTION_ID)
@tenant_option
@redis_url_option
@json_option
def executions_show(execution_id: str, tenant_id: str, redis_url: str, as_json: bool) -> None:
    """Show an execution's status, position, result and error."""
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> dict[str, Any]:
        state = await container.get_execution()(execution_id)
        flags = await container.controls().get(execution_id)  # W23: paused, cancel asked
        return {**execution_view(state), **flags.to_json()}

    view = run_with_container(settings, body, tenant_id=tenant_id)
    if as_json:
        echo_json(view)
        return
    for key in (
        "execution_id",
        "flow_id",
        "status",
        "paused",
        "cancel_requested",
        "last_node_id",
        "waiting_for",
        "result",
        "error",
    ):
        click.echo(f"{key:>13}: {json.dumps(view[key], default=str)}")


@main.group()
def events() -> None:
    """Publish events."""


@events.command("publish")
@click.argument("event_type")
@click.option("--correlation-id", required=True, help="Usually the waiting execution's id.")
@click.option("--data", "data_json", default=None, help="Event data as a JSON object.")
@click.option("--source", default="cli", show_default=True)
@tenant_option
@redis_url_option
@json_option
def events_publish(
    event_type: str,
    correlation_id: str,
    data_json: str | None,
    source: str,
    tenant_id: str,
    redis_url: str,
    as_json: bool,
) -> None:
    """Publish an event; executions waiting for it resume."""
    data = parse_json_object("--data", data_json, EVENT_DATA_LIMIT)
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> Any:
        return await container.publish_event()(
            event_type,
            data=data,
            correlation_id=correlation_id,
            source=source,
            tenant_id=tenant_id,
        )

    event = run_with_container(settings, body, tenant_id=tenant_id)
    if as_json:
        echo_json(event.to_json())
    else:
        click.echo(event.event_id)


main.add_command(dlq)
main.add_command(reap)
executions.add_command(delete_execution)  # `plaita executions delete`
events.add_command(events_list)
events.add_command(events_show)


main.add_command(dev)  # `plaita dev`
main.add_command(db)  # `plaita db upgrade|current`
main.add_command(console)  # `plaita console`

# W23 operator controls and the catalog (C4): `plaita executions list|resume|cancel|pause|
# unpause|retry|bulk`, `plaita flows list|show`, `plaita workers list`.
for _command in (
    executions_list,
    executions_resume,
    executions_cancel,
    executions_pause,
    executions_unpause,
    executions_retry,
    executions_bulk,
):
    executions.add_command(_command)
flows.add_command(flows_list)
flows.add_command(flows_show)
main.add_command(workers)

if __name__ == "__main__":
    main()
