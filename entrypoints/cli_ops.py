"""Operator commands of the ``plaita`` CLI: the DLQ, deleting an execution, the reaper (C4).

Each family is a click group or command that ``cli.py`` attaches with one line; they talk to
Redis only (the memory twin lives in one process and has nothing to operate on).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from plaita.application.use_cases.delete_execution import DeletedExecution
from plaita.application.use_cases.dlq import (
    DeadLetterView,
    ListDeadLetters,
    ReplayDeadLetter,
    ReplayResult,
    ShowDeadLetter,
)
from plaita.application.use_cases.reap import DEFAULT_LIMIT, ReapReport, ReapZombies
from plaita.application.use_cases.recover import RecoveryReport
from plaita.domain.dead_letter import ReplayOutcome
from plaita.entrypoints.cli_support import (
    EXECUTION_ID,
    echo_json,
    json_option,
    redis_url_option,
    run_with_container,
    settings_from,
    tenant_option,
)
from plaita.entrypoints.settings import Settings

if TYPE_CHECKING:  # the container is built only when a command runs (a quick --help)
    from plaita.entrypoints.container import Container

T = TypeVar("T")
JSON = Any

queue_option = click.option(
    "--queue-name",
    default=None,
    help="The workers' queue (env PLAITA_QUEUE_NAME, default 'default').",
)


def _settings(**values: Any) -> Settings:
    return settings_from(backend="redis", **values)


def _run(
    settings: Settings,
    body: Callable[[Container], Awaitable[T]],
    *,
    tenant_id: str | None = None,
) -> T:
    # Operator actions are audited: their lines show even at the default WARNING level.
    audit = logging.getLogger("plaita.audit")
    if audit.getEffectiveLevel() > logging.INFO:
        audit.setLevel(logging.INFO)
    return run_with_container(settings, body, tenant_id=tenant_id)


# --- dlq -----------------------------------------------------------------------------


@click.group("dlq")
def dlq() -> None:
    """Inspect and replay dead letters (W10)."""


@dlq.command("list")
@click.option("--count", type=click.IntRange(1, 10_000), default=20, show_default=True)
@queue_option
@redis_url_option
@json_option
def dlq_list(count: int, queue_name: str | None, redis_url: str | None, as_json: bool) -> None:
    """The newest dead letters, newest first."""
    settings = _settings(redis_url=redis_url, queue_name=queue_name)

    async def body(container: Container) -> list[DeadLetterView]:
        use_case: ListDeadLetters = container.list_dead_letters()
        return await use_case(count=count)

    views = _run(settings, body)
    if as_json:
        echo_json({"items": [view.to_json() for view in views]})
        return
    if not views:
        click.echo("the dead-letter queue is empty")
    for view in views:
        carrier = view.kind if view.resume_type is None else f"{view.kind}/{view.resume_type}"
        replayed = "  [replayed]" if view.replayed is not None else ""
        click.echo(
            f"{view.dlq_id}  {carrier or '?'}  execution={view.execution_id or '-'}  "
            f"flow={view.flow_id or '-'}  reason={view.reason!r}{replayed}"
        )


@dlq.command("show")
@click.argument("dlq_id")
@queue_option
@redis_url_option
@json_option
def dlq_show(dlq_id: str, queue_name: str | None, redis_url: str | None, as_json: bool) -> None:
    """One dead letter: why it was dead-lettered, its carrier and its replay marker."""
    settings = _settings(redis_url=redis_url, queue_name=queue_name)

    async def body(container: Container) -> DeadLetterView:
        use_case: ShowDeadLetter = container.show_dead_letter()
        return await use_case(dlq_id)

    view = _run(settings, body).to_json()
    if as_json:
        echo_json(view)
        return
    for key, value in view.items():
        click.echo(f"{key:>14}: {json.dumps(value, sort_keys=True, default=str)}")


@dlq.command("replay")
@click.argument("dlq_id")
@click.option("--tenant", default=None, help="Replay only if the entry is this tenant's.")
@queue_option
@redis_url_option
@json_option
def dlq_replay(
    dlq_id: str, tenant: str | None, queue_name: str | None, redis_url: str | None, as_json: bool
) -> None:
    """Put a dead letter's carrier back on the task stream, once (the entry is kept).

    Exits 1 when the replay is refused (already_replayed, schema_too_new, execution_deleted,
    execution_ended: its execution has already ended and the carrier would do nothing,
    tenant_mismatch).
    """
    settings = _settings(redis_url=redis_url, queue_name=queue_name)

    async def body(container: Container) -> ReplayResult:
        use_case: ReplayDeadLetter = container.replay_dead_letter()
        return await use_case(dlq_id, tenant_id=tenant)

    result = _run(settings, body)
    if as_json:
        echo_json(result.to_json())
    elif result.outcome is ReplayOutcome.REPLAYED:
        click.echo(
            f"replayed {dlq_id} as execution {result.execution_id} (message {result.message_id})"
        )
    else:
        click.echo(f"{result.outcome.value}: {dlq_id}: {result.detail}", err=True)
    if result.outcome not in (ReplayOutcome.REPLAYED, ReplayOutcome.ALREADY_REPLAYED):
        raise SystemExit(1)


# --- executions delete -----------------------------------------------------------------


@click.command("delete")
@click.argument("execution_id", type=EXECUTION_ID)
@click.option("--reason", default="deleted by operator", show_default=True)
@tenant_option
@redis_url_option
@json_option
def delete_execution(
    execution_id: str, reason: str, tenant_id: str, redis_url: str | None, as_json: bool
) -> None:
    """Delete an execution: revoke its lease, remove its state, leave a tombstone (W13).

    Carriers still queued for it are dropped by the workers while the tombstone lasts
    (at least 30 days, at most PLAITA_MAX_CARRIER_AGE_DAYS). Deleting twice keeps the first
    deleted_at.
    """
    settings = _settings(redis_url=redis_url)

    async def body(container: Container) -> DeletedExecution:
        # The container's: dedup release (W6) and control flags cleared (W23) included.
        return await container.delete_execution()(execution_id, reason=reason)

    deleted = _run(settings, body, tenant_id=tenant_id)
    if as_json:
        echo_json(deleted.to_json())
        return
    tombstone = deleted.tombstone
    when = "deleted" if deleted.deleted_now else "already deleted"
    click.echo(
        f"{when} {execution_id} (tenant {tombstone.tenant_id}, deleted_at_ms "
        f"{tombstone.deleted_at_ms}, reason {tombstone.reason!r})"
    )
    if deleted.revoked_holder:
        click.echo(f"revoked the lease of {deleted.revoked_holder}")
    if deleted.released_dedup_key:
        click.echo(f"released the dedup key {deleted.released_dedup_key!r}")


# --- reap ------------------------------------------------------------------------------


@click.command("reap")
@click.option("--dry-run", is_flag=True, help="List what would be done; change nothing.")
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=DEFAULT_LIMIT,
    show_default=True,
    help="Look at this many running executions, newest first.",
)
@click.option(
    "--lease-ttl-seconds",
    type=click.FloatRange(min=0.1),
    default=None,
    help="The workers' lease TTL (env PLAITA_LEASE_TTL_SECONDS, default 120); an execution "
    "idle for 3 TTLs without a lease counts as having lost its carrier.",
)
@queue_option
@tenant_option
@redis_url_option
@json_option
def reap(
    dry_run: bool,
    limit: int,
    lease_ttl_seconds: float | None,
    queue_name: str | None,
    tenant_id: str,
    redis_url: str | None,
    as_json: bool,
) -> None:
    """Give one tenant's stuck executions their way forward again (W19).

    Running executions with no lease and no step for 3 lease TTLs get a resume-continue
    carrier (or end in error when their flow is gone); running or suspended executions whose
    lease no dispatch holds have it revoked.
    """
    settings = _settings(
        redis_url=redis_url, queue_name=queue_name, lease_ttl_seconds=lease_ttl_seconds
    )

    async def body(container: Container) -> ReapReport:
        use_case: ReapZombies = container.reap_zombies()
        return await use_case(dry_run=dry_run, limit=limit)

    report = _run(settings, body, tenant_id=tenant_id)
    if as_json:
        echo_json(report.to_json())
        return
    verb = "would " if dry_run else ""
    for item in report.orphans:
        click.echo(
            f"{verb}{item.action.value} {item.execution_id}  flow={item.flow_id}  "
            f"idle={item.idle_ms // 1000}s"
        )
    counts = ", ".join(f"{n} {action}" for action, n in report.counts().items() if n)
    looked = len(report.items)
    click.echo(f"{looked} execution{'' if looked == 1 else 's'} looked at: {counts or 'none'}")


# --- recover ----------------------------------------------------------------------------


@click.command("recover")
@queue_option
@tenant_option
@redis_url_option
@json_option
def recover(queue_name: str | None, tenant_id: str, redis_url: str | None, as_json: bool) -> None:
    """Give every live execution of one tenant its way forward again, from its checkpoint.

    For after a Redis failover or restart that lost acknowledged writes: a carrier, a timer or
    an event subscription may be gone while the checkpoint stayed. Every running execution
    gets a continue carrier; every suspended one its timer again (due at once when its time
    passed) and its event wait's subscription under its own id. What still exists is
    unharmed: a second carrier or timer meets the checkpoint and changes nothing.
    """
    settings = _settings(redis_url=redis_url, queue_name=queue_name)

    async def body(container: Container) -> RecoveryReport:
        report: RecoveryReport = await container.recover_after_restart()()
        return report

    report = _run(settings, body, tenant_id=tenant_id)
    if as_json:
        echo_json(report.to_json())
        return
    click.echo(
        f"{report.reindexed} executions put back into the listing index, "
        f"{report.continued} running executions continued, {report.timers} timers and "
        f"{report.subscriptions} event waits restored, {report.skipped} skipped"
    )
