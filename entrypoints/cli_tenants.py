"""``plaita tenants list|show|suspend|resume|quota`` (W24, C4).

A tenant's status and quota are the deployment's (not one tenant's data): the commands act on
a Redis — or on the ``plaita dev`` of this directory — through the same use cases as the
console. Every write is stamped with this process's deployment epoch
(``PLAITA_DEPLOYMENT_EPOCH``). A tenant id or quota the rules refuse is a usage error naming
its value (exit 2); a refusal (suspending the default tenant, a write that kept losing its
compare-and-set) is a named error (exit 1).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

from plaita.application.use_cases.tenants import TenantActionResult, TenantView
from plaita.domain.errors import InvalidTenantIdError, InvalidTenantQuotaError
from plaita.domain.tenancy import validate_tenant_id
from plaita.domain.tenant_status import MAX_TENANT_QUOTA, check_max_running
from plaita.entrypoints.cli_support import (
    echo_json,
    echo_rows,
    human_time,
    json_option,
    redis_url_option,
    run_with_container,
    settings_from,
)

if TYPE_CHECKING:  # the container is built only when a command runs (a quick --help)
    from plaita.entrypoints.container import Container

T = TypeVar("T")
JSON = Any


class TenantIdParam(click.ParamType[str]):
    """A tenant id, held to the tenant id rule before anything connects (exit 2)."""

    name = "TENANT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return validate_tenant_id(value)
        except InvalidTenantIdError as exc:
            self.fail(f"{type(exc).__name__}: {exc}", param, ctx)


class QuotaParam(click.ParamType[int]):
    """A quota (``--max-running``), held to the quota rule before anything connects (exit 2)."""

    name = "N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = value
        try:
            checked = check_max_running(number)
        except InvalidTenantQuotaError as exc:
            self.fail(f"{type(exc).__name__}: {exc}", param, ctx)
        assert checked is not None
        return checked


tenant_argument = click.argument("tenant_id", type=TenantIdParam())


def _run(body: Callable[[Container], Awaitable[T]], redis_url: str | None) -> T:
    # What operators change is audited: the lines show even at the default WARNING level.
    audit = logging.getLogger("plaita.audit")
    if audit.getEffectiveLevel() > logging.INFO:
        audit.setLevel(logging.INFO)
    return run_with_container(settings_from(backend="redis", redis_url=redis_url), body)


@click.group("tenants")
def tenants() -> None:
    """Tenants: suspend and resume them, and cap their running executions (quota)."""


@tenants.command("list")
@redis_url_option
@json_option
def tenants_list(redis_url: str | None, as_json: bool) -> None:
    """Every tenant with a status record (a tenant without one is active, with no quota)."""

    async def body(container: Container) -> list[TenantView]:
        return list(await container.list_tenants()())

    views = _run(body, redis_url)
    if as_json:
        echo_json({"items": [view.to_json() for view in views]})
        return
    if not views:
        click.echo("no tenant has a status record: every tenant is active, with no quota")
        return
    rows = [("TENANT", "STATUS", "MAX RUNNING", "EPOCH", "PARKED", "WORKERS")]
    for view in views:
        shown = view.to_json()
        rows.append(
            (
                view.tenant_id,
                shown["status"],
                _or_dash(shown["max_running"], "no limit"),
                _or_dash(shown["epoch"]),
                str(view.parked),
                view.gate.action.value,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


@tenants.command("show")
@tenant_argument
@redis_url_option
@json_option
def tenants_show(tenant_id: str, redis_url: str | None, as_json: bool) -> None:
    """One tenant: its status, quota, the epoch that wrote them, its parked carriers, and
    what this deployment's workers do with its carriers now."""

    async def body(container: Container) -> tuple[TenantView, int]:
        view: TenantView = await container.show_tenant()(tenant_id)
        return view, container.clock().now_ms()

    view, now_ms = _run(body, redis_url)
    if as_json:
        echo_json(view.to_json())
        return
    echo_rows(_view_rows(view, now_ms))


def _view_rows(view: TenantView, now_ms: int) -> Iterator[tuple[str, str]]:
    shown = view.to_json()
    yield "tenant", view.tenant_id
    recorded = "" if view.record is not None else " (no status record)"
    yield "status", f"{shown['status']}{recorded}"
    yield "max running", _or_dash(shown["max_running"], "no limit")
    yield "epoch", _or_dash(shown["epoch"], "none")
    if view.record is not None:
        yield "updated", human_time(view.record.updated_at_ms, now_ms)
    yield "parked", f"{view.parked} carrier{'' if view.parked == 1 else 's'}"
    yield "workers", f"{view.gate.action.value}: {view.gate.detail}"


@tenants.command("suspend")
@tenant_argument
@redis_url_option
@json_option
def tenants_suspend(tenant_id: str, redis_url: str | None, as_json: bool) -> None:
    """Suspend a tenant: its carriers are parked (no step runs, nothing is lost) until
    `plaita tenants resume`; its starts are accepted and held. Cancels still run. The
    default tenant cannot be suspended."""

    async def body(container: Container) -> TenantActionResult:
        result: TenantActionResult = await container.suspend_tenant()(tenant_id)
        return result

    _report(_run(body, redis_url), as_json)


@tenants.command("resume")
@tenant_argument
@redis_url_option
@json_option
def tenants_resume(tenant_id: str, redis_url: str | None, as_json: bool) -> None:
    """Resume a tenant: write it active under this deployment's epoch and enqueue its parked
    carriers again. Also how a tenant's status is written under a new deployment epoch."""

    async def body(container: Container) -> TenantActionResult:
        result: TenantActionResult = await container.resume_tenant()(tenant_id)
        return result

    _report(_run(body, redis_url), as_json)


@tenants.command("quota")
@tenant_argument
@click.option(
    "--max-running",
    type=QuotaParam(),
    default=None,
    help=f"At most this many of the tenant's executions running at once (1-{MAX_TENANT_QUOTA}); "
    "the others wait, never dropped.",
)
@click.option("--no-limit", is_flag=True, help="Clear the tenant's quota.")
@redis_url_option
@json_option
def tenants_quota(
    tenant_id: str, max_running: int | None, no_limit: bool, redis_url: str | None, as_json: bool
) -> None:
    """Set a tenant's quota (--max-running N) or clear it (--no-limit)."""
    if (max_running is None) == (not no_limit):
        raise click.UsageError("give exactly one of --max-running N and --no-limit")

    async def body(container: Container) -> TenantActionResult:
        result: TenantActionResult = await container.set_tenant_quota()(tenant_id, max_running)
        return result

    _report(_run(body, redis_url), as_json)


def _report(result: TenantActionResult, as_json: bool) -> None:
    if as_json:
        echo_json(result.to_json())
        return
    record = result.record
    quota = _or_dash(record.max_running, "no limit")
    epoch = _or_dash(record.epoch, "none")
    line = (
        f"{result.outcome}: tenant {result.tenant_id} is {record.status.value} "
        f"(max running: {quota}, epoch: {epoch})"
    )
    if result.requeued:
        line += f"; {result.requeued} parked carrier(s) enqueued again"
    if result.parked:
        line += f"; {result.parked} carrier(s) parked"
    click.echo(line)


def _or_dash(value: JSON, none: str = "-") -> str:
    return none if value is None else str(value)
