"""``plaita schedules create|list|show|pause|resume|delete|trigger`` and ``plaita scheduler``
(W22, C4).

The schedules commands act on one tenant's schedules (``--tenant``) on Redis — or on the
``plaita dev`` of this directory — through the same use cases as the console. A value the
schedule cannot take (a cron expression, a time zone, a policy, the input) is a usage error
naming its flag (exit 2); a refusal (an id taken, an unknown flow or schedule) is a named
error (exit 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import zoneinfo
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from plaita.application.use_cases.schedules import (
    DEFAULT_NEXT_RUNS,
    MAX_NEXT_RUNS,
    ScheduleView,
    TriggeredRun,
)
from plaita.domain.cron import DEFAULT_TIMEZONE, Cron
from plaita.domain.cron_schedules import (
    DEFAULT_CATCH_UP,
    DEFAULT_OVERLAP,
    CatchUpPolicy,
    OverlapPolicy,
    schedule_input_from_text,
)
from plaita.domain.errors import InvalidScheduleError, PayloadLimitError
from plaita.domain.ids import IdKind
from plaita.entrypoints.cli_support import (
    FLOW_ID,
    PRIORITY,
    IdParam,
    echo_json,
    echo_rows,
    human_time,
    json_option,
    log_generations,
    redis_url_option,
    run_with_container,
    service_redis_url_option,
    set_service_log_level,
    settings_from,
    stop_on_signals,
    tenant_option,
)

if TYPE_CHECKING:  # the container is built only when a command runs (a quick --help)
    from plaita.entrypoints.container import Container

JSON = Any
T = TypeVar("T")
SCHEDULE_ID = IdParam(IdKind.SCHEDULE)
#: The flag each setting of a schedule comes from, to name it in a usage error.
_FLAGS = {
    "cron": "--cron",
    "timezone": "--timezone",
    "overlap": "--overlap",
    "catch_up": "--catch-up",
    "input": "--input",
    "version": "--version",
}

schedule_id_argument = click.argument("schedule_id", type=SCHEDULE_ID)


def _run(body: Callable[[Container], Awaitable[T]], redis_url: str | None, tenant_id: str) -> T:
    # What operators change is audited: the lines show even at the default WARNING level.
    audit = logging.getLogger("plaita.audit")
    if audit.getEffectiveLevel() > logging.INFO:
        audit.setLevel(logging.INFO)
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def checked(container: Container) -> T:
        with _flag_errors():
            return await body(container)

    return run_with_container(settings, checked, tenant_id=tenant_id)


@contextlib.contextmanager
def _flag_errors() -> Iterator[None]:
    """A value the schedule refused becomes a usage error naming the flag (exit 2)."""
    try:
        yield
    except InvalidScheduleError as error:
        raise click.BadParameter(
            str(error).removeprefix(f"{error.setting}: "),
            param_hint=_FLAGS.get(error.setting, error.setting),
        ) from None


# --- create -------------------------------------------------------------------------------


@click.command("create")
@schedule_id_argument
@click.option("--flow", "flow_id", type=FLOW_ID, required=True, help="The flow each due starts.")
@click.option(
    "--cron",
    required=True,
    help="When: five fields (minute hour day month weekday), six with a trailing seconds "
    "field, or @hourly / @daily …, e.g. '0 3 * * *'. Quote it.",
)
@click.option(
    "--timezone",
    default=DEFAULT_TIMEZONE,
    show_default=True,
    help="The IANA time zone the expression is read in, e.g. Europe/Berlin.",
)
@click.option("--version", default=None, help="This flow version (default: the latest, each due).")
@click.option("--input", "input_text", default=None, help="The executions' input, a JSON object.")
@click.option(
    "--overlap",
    type=click.Choice([policy.value for policy in OverlapPolicy]),
    default=DEFAULT_OVERLAP.value,
    show_default=True,
    help="While the last execution runs: start anyway (allow), skip the due (skip), or keep "
    "one due waiting (buffer_one).",
)
@click.option(
    "--catch-up",
    type=click.Choice([policy.value for policy in CatchUpPolicy]),
    default=DEFAULT_CATCH_UP.value,
    show_default=True,
    help="Dues missed while no scheduler ran: skip them (none), start the most recent "
    "(latest), or start each of them, at most 100 (all).",
)
@click.option("--paused", is_flag=True, help="Create it paused (resume it to start).")
@click.option(
    "--priority",
    type=PRIORITY,
    default="normal",
    show_default=True,
    help="The priority of every start it makes (see `plaita executions start --priority`).",
)
@tenant_option
@redis_url_option
@json_option
def schedules_create(
    schedule_id: str,
    flow_id: str,
    cron: str,
    timezone: str,
    version: str | None,
    input_text: str | None,
    overlap: str,
    catch_up: str,
    paused: bool,
    priority: str,
    tenant_id: str,
    redis_url: str | None,
    as_json: bool,
) -> None:
    """Create a schedule that starts FLOW at every time its cron expression names."""
    with _flag_errors():
        # Checked before anything connects (exit 2 names the flag).
        Cron.parse(cron, timezone, hash_id=schedule_id)
        try:
            params = schedule_input_from_text(input_text)
        except PayloadLimitError as exc:
            raise click.BadParameter(f"{type(exc).__name__}: {exc}", param_hint="--input") from None

    async def body(container: Container) -> tuple[ScheduleView, int]:
        view = await container.create_schedule()(
            schedule_id,
            flow_id=flow_id,
            cron=cron,
            timezone=timezone,
            version=version,
            input=params,
            overlap=overlap,
            catch_up=catch_up,
            paused=paused,
            priority=priority,
        )
        return view, container.clock().now_ms()

    view, now_ms = _run(body, redis_url, tenant_id)
    if as_json:
        echo_json(view.to_json())
        return
    state = "paused" if view.state.paused else "active"
    click.echo(f"created schedule {schedule_id} ({state}) of flow {flow_id}")
    if view.next_runs:
        click.echo(f"next run: {_run_time(view, view.next_runs[0], now_ms)}")


# --- list, show ---------------------------------------------------------------------------


@click.command("list")
@tenant_option
@redis_url_option
@json_option
def schedules_list(tenant_id: str, redis_url: str | None, as_json: bool) -> None:
    """The tenant's schedules, each with its next run time."""

    async def body(container: Container) -> tuple[list[ScheduleView], int]:
        return await container.list_schedules()(), container.clock().now_ms()

    views, now_ms = _run(body, redis_url, tenant_id)
    if as_json:
        echo_json({"items": [view.to_json() for view in views]})
        return
    if not views:
        click.echo("no schedules (create one with `plaita schedules create`)")
    for view in views:
        schedule = view.schedule
        state = "paused" if view.state.paused else "active"
        following = _run_time(view, view.next_runs[0], now_ms) if view.next_runs else "never"
        click.echo(
            f"{schedule.schedule_id}  {state}  {schedule.flow_id}  '{schedule.cron.expression}' "
            f"{schedule.cron.timezone}  next {following}"
        )


@click.command("show")
@schedule_id_argument
@click.option(
    "--count",
    type=click.IntRange(0, MAX_NEXT_RUNS),
    default=DEFAULT_NEXT_RUNS,
    show_default=True,
    help="How many next run times to list.",
)
@tenant_option
@redis_url_option
@json_option
def schedules_show(
    schedule_id: str, count: int, tenant_id: str, redis_url: str | None, as_json: bool
) -> None:
    """A schedule: its definition, what the schedulers recorded, and its next run times."""

    async def body(container: Container) -> tuple[ScheduleView, int]:
        return await container.show_schedule()(schedule_id, count=count), container.clock().now_ms()

    view, now_ms = _run(body, redis_url, tenant_id)
    if as_json:
        echo_json(view.to_json())
        return
    echo_rows(_rows(view, now_ms))
    click.echo(
        "next runs:" if view.next_runs else "next runs: none (the expression names no later time)"
    )
    for due in view.next_runs:
        click.echo(f"  {_run_time(view, due, now_ms)}")


def _rows(view: ScheduleView, now_ms: int) -> Iterator[tuple[str, str]]:
    schedule, state = view.schedule, view.state
    yield "schedule", f"{schedule.schedule_id} (tenant {schedule.tenant_id})"
    yield "state", "paused" if state.paused else "active"
    version = schedule.flow_version or "latest"
    yield "flow", f"{schedule.flow_id} (version {version})"
    yield "cron", f"{schedule.cron.expression}  in {schedule.cron.timezone}"
    yield "overlap", schedule.overlap.value
    yield "catch-up", schedule.catch_up.value
    yield "priority", schedule.priority.value
    yield "input", _json(dict(schedule.input))
    yield "created", human_time(schedule.created_at_ms, now_ms)
    if state.last_due_ms is not None:
        yield "last due started", _run_time(view, state.last_due_ms, now_ms)
    if state.last_execution_id is not None:
        status = f" ({view.last_status.value})" if view.last_status else ""
        yield "last execution", f"{state.last_execution_id}{status}"
    if state.buffered_due_ms is not None:
        yield "waiting due", _run_time(view, state.buffered_due_ms, now_ms)
    yield "dues", f"{state.fired} started, {state.skipped} skipped, {state.failed} failed"
    if state.last_error:
        yield "last error", state.last_error


def _run_time(view: ScheduleView, due_ms: int, now_ms: int) -> str:
    """``2026-12-01 03:00:00 UTC (in 5 h 2 min)``, with the local time of the schedule's zone
    when it is not UTC."""
    text = human_time(due_ms, now_ms)
    zone = view.schedule.cron.timezone
    if zone in ("UTC", "Etc/UTC"):
        return text
    return f"{text}, {local_time(due_ms, zone)}"


def _json(value: JSON) -> str:
    return json.dumps(value, sort_keys=True)


def local_time(due_ms: int, zone: str) -> str:
    """``03:00 Europe/Berlin``: a due's wall-clock time in the schedule's zone."""
    moment = datetime.fromtimestamp(due_ms / 1000, tz=UTC).astimezone(zoneinfo.ZoneInfo(zone))
    return f"{moment:%Y-%m-%d %H:%M:%S} {zone}"


# --- pause, resume, delete, trigger -------------------------------------------------------


def _control(
    verb: str, help_text: str, act: Callable[[Container, str], Awaitable[Any]]
) -> click.Command:
    @click.command(verb, help=help_text)
    @schedule_id_argument
    @tenant_option
    @redis_url_option
    @json_option
    def command(schedule_id: str, tenant_id: str, redis_url: str | None, as_json: bool) -> None:
        async def body(container: Container) -> Any:
            return await act(container, schedule_id)

        answer = _run(body, redis_url, tenant_id)
        _echo_control(verb, schedule_id, answer, as_json)

    return command


def _echo_control(verb: str, schedule_id: str, answer: Any, as_json: bool) -> None:
    if isinstance(answer, TriggeredRun):
        started = answer.started
        if as_json:
            echo_json(
                {
                    "schedule_id": answer.schedule_id,
                    "dedup_key": answer.dedup_key,
                    "execution_id": started.execution_id,
                    "flow_id": started.flow_id,
                    "version": started.version,
                }
            )
        else:
            click.echo(started.execution_id)
        return
    if isinstance(answer, ScheduleView):
        if as_json:
            echo_json(answer.to_json())
        else:
            click.echo(f"schedule {schedule_id} is {'paused' if answer.state.paused else 'active'}")
        return
    if as_json:
        echo_json({"schedule_id": schedule_id, "deleted": True})
    else:
        click.echo(f"deleted schedule {schedule_id}")


schedules_pause = _control(
    "pause",
    "Pause SCHEDULE_ID: no due starts until it is resumed.",
    lambda container, sid: container.pause_schedule()(sid, paused=True),
)
schedules_resume = _control(
    "resume",
    "Resume SCHEDULE_ID: dues from now on start; those that fell while it was paused do not.",
    lambda container, sid: container.pause_schedule()(sid, paused=False),
)
schedules_delete = _control(
    "delete",
    "Delete SCHEDULE_ID; the executions it started are left as they are.",
    lambda container, sid: container.delete_schedule()(sid),
)
schedules_trigger = _control(
    "trigger",
    "Start one execution of SCHEDULE_ID now (paused or not) and print its id.",
    lambda container, sid: container.trigger_schedule()(sid),
)

SCHEDULE_COMMANDS = (
    schedules_create,
    schedules_list,
    schedules_show,
    schedules_pause,
    schedules_resume,
    schedules_delete,
    schedules_trigger,
)


# --- plaita scheduler ---------------------------------------------------------------------


@click.command("scheduler")
@service_redis_url_option
@click.option(
    "--consumer-name",
    default=None,
    help="Who this scheduler claims dues as. Default: host-pid-random, unique per start.",
)
@click.option(
    "--poll-interval-seconds",
    type=click.FloatRange(0.05, 60.0),
    default=None,
    help="How often it looks for dues, 0.05-60 (env PLAITA_SCHEDULER_POLL_INTERVAL_SECONDS; "
    "default 1): a due starts within about this long of its time.",
)
@click.option(
    "--claim-ttl-seconds",
    type=click.FloatRange(0.1, 3600.0),
    default=None,
    help="How long its claim of a due keeps other schedulers off it (env "
    "PLAITA_SCHEDULER_CLAIM_TTL_SECONDS; default 30): a scheduler killed mid-tick delays "
    "the dues it claimed by this much.",
)
@click.option("--quiet", is_flag=True, help="Log WARNING and above only (default: INFO).")
def scheduler(
    redis_url: str,
    consumer_name: str | None,
    poll_interval_seconds: float | None,
    claim_ttl_seconds: float | None,
    quiet: bool,
) -> None:
    """Start the executions of every schedule of the deployment when they are due.

    Several schedulers may run against one deployment: each due is claimed by one of them,
    and a due fired twice still starts one execution (its dedup key is the due time).
    Stops on SIGTERM/SIGINT after the tick in progress.
    """
    set_service_log_level(quiet)
    settings = settings_from(
        backend="redis",
        redis_url=redis_url,
        consumer_name=consumer_name,
        scheduler_poll_interval_seconds=poll_interval_seconds,
        scheduler_claim_ttl_seconds=claim_ttl_seconds,
    )

    async def body(container: Container) -> None:
        log_generations(logging.getLogger("plaita.scheduler"), "scheduler", container.generations())
        stop = asyncio.Event()
        with stop_on_signals(stop):
            await container.scheduler().run(stop)

    run_with_container(settings, body)
