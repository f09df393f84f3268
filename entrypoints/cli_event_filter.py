"""``plaita event-filter``: turn published events into resume carriers (V4, V5, C4)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import click

from plaita.entrypoints.cli_support import (
    log_generations,
    run_with_container,
    service_redis_url_option,
    set_service_log_level,
    setting_default,
    settings_from,
    stop_on_signals,
)
from plaita.entrypoints.event_filter import EventFilterService

if TYPE_CHECKING:  # the container is built only when a command runs (a quick --help)
    from plaita.entrypoints.container import Container


@click.command("event-filter")
@service_redis_url_option
@click.option("--consumer-name", default=None, help="Default: host-pid-random, unique per start.")
@click.option(
    "--read-block-ms",
    type=click.IntRange(1, 60_000),
    default=None,
    show_default=setting_default("read_block_ms"),
    help="How long one read waits (env PLAITA_READ_BLOCK_MS).",
)
@click.option(
    "--claim-min-idle-ms",
    type=click.IntRange(1),
    default=None,
    show_default=setting_default("claim_min_idle_ms"),
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

    set_service_log_level(quiet)
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
            service: EventFilterService = container.event_filter(
                reconcile=container.reconcile_events(settings=reconcile_settings),
                reconcile_interval_ms=milliseconds["--reconcile-interval-seconds"],
                background=background,
                closeables=[container.subscriptions(), container.executions()],
            )
            await service.run(stop)

    run_with_container(settings, body)
