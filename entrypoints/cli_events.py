"""``plaita events publish|list|show``: publishing events, and stored events (V7, C4).

``publish`` stores an event and notifies the event filter, which resumes the executions
waiting for it. Events are kept 7 days. ``list`` reads the type index when ``--type`` is
given, else the time index across all types, and applies every other filter to the
candidates (AND); ``show`` prints one event. All three talk to Redis only, like the other
operator commands.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from plaita.application.ports import EventLog
from plaita.domain.errors import InvalidEventQueryError, InvalidTenantIdError, UnknownEventError
from plaita.domain.events import MAX_LISTING_LIMIT, Event, EventQuery
from plaita.domain.limits import EVENT_DATA_LIMIT
from plaita.domain.tenancy import validate_tenant_id
from plaita.entrypoints.cli_support import (
    EVENT_ID,
    echo_json,
    json_option,
    parse_json_object,
    redis_url_option,
    run_with_container,
    settings_from,
    tenant_option,
)

if TYPE_CHECKING:  # the container is built only when a command runs (a quick --help)
    from plaita.entrypoints.container import Container

JSON = Any
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EXAMPLES = "2025-10-09, 2025-10-09T14:30:00Z or 2025-10-09T16:30:00+02:00"


class IsoInstant(click.ParamType[int]):
    """An ISO 8601 date or date-time, as ms since the epoch; without an offset it is UTC."""

    name = "ISO8601"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            moment = datetime.fromisoformat(str(value).strip())
        except ValueError:
            self.fail(
                f"{value!r} is not an ISO 8601 date or date-time; expected e.g. {_EXAMPLES} "
                "(UTC when no offset is given)",
                param,
                ctx,
            )
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return (moment - _EPOCH) // timedelta(milliseconds=1)


def iso(timestamp_ms: int) -> str:
    """``timestamp_ms`` as an ISO 8601 UTC date-time with milliseconds."""
    moment = _EPOCH + timedelta(milliseconds=timestamp_ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def event_view(event: Event) -> dict[str, JSON]:
    return {**event.to_json(), "timestamp": iso(event.timestamp_ms)}


def _tenant(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return validate_tenant_id(value)
    except InvalidTenantIdError as exc:
        raise click.BadParameter(str(exc), param_hint="--tenant") from None


@click.command("list")
@click.option("--type", "event_type", default=None, help="Only events of this exact type.")
@click.option(
    "--since",
    "since_ms",
    type=IsoInstant(),
    default=None,
    help=f"Only events at or after this time (ISO 8601, e.g. {_EXAMPLES}; UTC without offset).",
)
@click.option(
    "--until",
    "until_ms",
    type=IsoInstant(),
    default=None,
    help="Only events before this time (exclusive; ISO 8601 like --since).",
)
@click.option("--correlation-id", default=None, help="Only events with this correlation id.")
@click.option(
    "--tenant",
    "tenant_id",
    envvar="PLAITA_TENANT",
    default=None,
    help="Only this tenant's events (env PLAITA_TENANT; default: every tenant).",
)
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LISTING_LIMIT),
    default=100,
    show_default=True,
    help="At most this many events, the oldest first.",
)
@redis_url_option
@json_option
def events_list(
    event_type: str | None,
    since_ms: int | None,
    until_ms: int | None,
    correlation_id: str | None,
    tenant_id: str | None,
    limit: int,
    redis_url: str | None,
    as_json: bool,
) -> None:
    """Stored events matching every given filter, oldest first (kept 7 days)."""
    try:
        query = EventQuery(
            event_type=event_type,
            correlation_id=correlation_id,
            tenant_id=_tenant(tenant_id),
            since_ms=since_ms,
            until_ms=until_ms,
            limit=limit,
        )
    except InvalidEventQueryError as exc:
        raise click.BadParameter(
            f"{exc}; give an --until later than --since", param_hint="--until"
        ) from None
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> list[Event]:
        log: EventLog = container.events()
        return list(await log.list(query))

    found = run_with_container(settings, body)
    if as_json:
        echo_json({"items": [event_view(event) for event in found], "count": len(found)})
        return
    if not found:
        click.echo("no stored event matches")
    for event in found:
        click.echo(
            f"{iso(event.timestamp_ms)}  {event.event_type}  {event.event_id}  "
            f"correlation={event.correlation_id or '-'}  tenant={event.tenant_id}  "
            f"source={event.source or '-'}"
        )


@click.command("show")
@click.argument("event_id", type=EVENT_ID)
@redis_url_option
@json_option
def events_show(event_id: str, redis_url: str | None, as_json: bool) -> None:
    """One stored event; exits 1 with UnknownEventError when there is none with EVENT_ID."""
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> Event:
        log: EventLog = container.events()
        event = await log.get(event_id)
        if event is None:
            raise UnknownEventError(
                f"no stored event has id {event_id!r}: it was never published here (check "
                "--redis-url and PLAITA_NAMESPACE) or its record expired after 7 days; "
                "`plaita events list` shows the stored ones"
            )
        return event

    view = event_view(run_with_container(settings, body))
    if as_json:
        echo_json(view)
        return
    for key, value in view.items():
        click.echo(f"{key:>14}: {json.dumps(value, sort_keys=True, default=str)}")


@click.command("publish")
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
    redis_url: str | None,
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
