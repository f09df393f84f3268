"""What a deployment holds: ``plaita flows register|list|show`` and ``plaita workers list`` (C4).

Flow definitions belong to a tenant or to the whole deployment (ADR 0011): the flows
commands act for one tenant (``--tenant``, env ``PLAITA_TENANT``, default ``default``) and
show what that tenant's executions run — its own definitions, else the deployment-wide
ones — or, with ``--shared``, the deployment-wide catalogue alone. The worker registry is
shared by every tenant, so ``workers list`` takes no tenant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from plaita.application.handlers import HandlerRegistry
from plaita.application.use_cases.flows import (
    CatalogEntry,
    FlowCatalog,
    Registration,
    validate_registration,
)
from plaita.domain.errors import InvalidTenantIdError
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED, FlowOwner
from plaita.domain.flow_versions import LatestReason
from plaita.entrypoints.cli_support import (
    FLOW_ID,
    echo_json,
    handler_search_path,
    json_option,
    load_flow_file,
    named_errors,
    redis_url_option,
    run_with_container,
    settings_from,
)

if TYPE_CHECKING:  # the container is built only when a command runs (a quick --help)
    from plaita.entrypoints.container import Container

JSON = Any

shared_option = click.option(
    "--shared",
    is_flag=True,
    help="The deployment-wide catalogue, which every tenant falls back to (no --tenant).",
)
flows_tenant_option = click.option(
    "--tenant",
    "tenant_id",
    envvar="PLAITA_TENANT",
    default="default",
    show_default=True,
    help="The tenant whose flow catalogue the command acts on (env PLAITA_TENANT).",
)


def flow_owner(tenant_id: str, shared: bool) -> FlowOwner:
    """The catalogue a flows command acts on: ``--shared``, else the ``--tenant``'s."""
    if shared:
        source = click.get_current_context().get_parameter_source("tenant_id")
        if source is ParameterSource.COMMANDLINE:
            raise click.UsageError(
                "--shared acts on the deployment-wide catalogue and --tenant on one tenant's; "
                "give one of them"
            )
        return SHARED
    try:
        return FlowOwner.tenant(tenant_id)
    except InvalidTenantIdError as exc:
        raise click.BadParameter(str(exc), param_hint="--tenant") from None


def for_owner(owner: FlowOwner) -> str:
    """``deployment-wide`` or ``for tenant 'acme'``, to follow what was registered."""
    return str(owner) if owner.shared else f"for {owner}"


def flow_summary(flow: Flow, owner: FlowOwner) -> dict[str, JSON]:
    return {
        "flow_id": flow.flow_id,
        "version": flow.version,
        "fingerprint": flow.fingerprint,
        "node_count": sum(1 for _ in flow.nodes()),
        **owner.to_json(),
    }


def flow_detail(flow: Flow, owner: FlowOwner) -> dict[str, JSON]:
    nodes = list(flow.nodes())
    return {
        **flow_summary(flow, owner),
        "start": flow.start_node.id,
        "document": flow.to_document(),
        "graph": {
            "nodes": [{"id": node.id, "type": node.type, "label": node.id} for node in nodes],
            "edges": [
                {"from": node.id, "to": target, "label": ""}
                for node in nodes
                for target in node.targets()
            ],
        },
    }


@click.command("list")
@flows_tenant_option
@shared_option
@redis_url_option
@json_option
def flows_list(tenant_id: str, shared: bool, redis_url: str | None, as_json: bool) -> None:
    """The flows a tenant's executions can run, each at its latest version, and whose."""
    owner = flow_owner(tenant_id, shared)
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> list[CatalogEntry]:
        return await container.flows().listing(shared_only=owner.shared)

    entries = run_with_container(settings, body, tenant_id=owner.tenant_id)
    if as_json:
        echo_json({"items": [flow_summary(e.flow, e.owner) for e in entries]})
        return
    if not entries:
        click.echo("no flows are registered (register one with `plaita flows register FILE`)")
    for entry in entries:
        flow = entry.flow
        summary = flow_summary(flow, entry.owner)
        click.echo(
            f"{flow.flow_id}  version {flow.version}  {summary['node_count']} nodes  "
            f"{flow.fingerprint[:12]}  {entry.owner}"
        )


@click.command("show")
@click.argument("flow_id", type=FLOW_ID)
@click.option("--version", default=None, help="This version (default: the latest registered).")
@flows_tenant_option
@shared_option
@redis_url_option
@json_option
def flows_show(
    flow_id: str,
    version: str | None,
    tenant_id: str,
    shared: bool,
    redis_url: str | None,
    as_json: bool,
) -> None:
    """The definition a tenant's executions of FLOW_ID run: fingerprint, nodes, edges, document."""
    owner = flow_owner(tenant_id, shared)
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> CatalogEntry:
        return await container.flows().lookup(flow_id, version, shared_only=owner.shared)

    entry = run_with_container(settings, body, tenant_id=owner.tenant_id)
    flow = entry.flow
    detail = flow_detail(flow, entry.owner)
    if as_json:
        echo_json(detail)
        return
    click.echo(f"{flow.flow_id} version {flow.version} ({entry.owner}, start {detail['start']})")
    click.echo(f"fingerprint {flow.fingerprint}")
    for node in flow.nodes():
        targets = ", ".join(node.targets())
        click.echo(f"  {node.id:<20} {node.type:<7}{f' -> {targets}' if targets else ''}")
    click.echo(json.dumps(detail["document"], indent=2, sort_keys=True))


@click.group("workers")
def workers() -> None:
    """Worker processes in the registry (W16)."""


@workers.command("list")
@redis_url_option
@json_option
def workers_list(redis_url: str | None, as_json: bool) -> None:
    """Registered workers: status, heartbeat age and config generations (W12, W16)."""
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> list[dict[str, JSON]]:
        now_ms = container.clock().now_ms()
        instances = sorted(await container.registry().list(), key=lambda i: i.instance_id)
        return [
            {
                "instance_id": instance.instance_id,
                "status": instance.status,
                "heartbeat_age_ms": max(0, now_ms - instance.heartbeat_ms),
                "started_ms": instance.started_ms,
                "config_family": instance.config_family,
                "config_generation": instance.config_generation,
                "budget_generation": instance.budget_generation,
            }
            for instance in instances
        ]

    items = run_with_container(settings, body)
    if as_json:
        echo_json({"items": items})
        return
    if not items:
        click.echo("no worker is registered (workers started with --no-registry are not listed)")
    for item in items:
        age_seconds = item["heartbeat_age_ms"] / 1000
        click.echo(
            f"{item['instance_id']}  {item['status']:<9}  heartbeat {age_seconds:.1f}s ago  "
            f"family={item['config_family'][:12] or '-'}  "
            f"budget={item['budget_generation'][:12] or '-'}"
        )


#: How to choose a deployment-wide version as the latest, for the processes that register
#: their flows by the rule (``plaita worker --flows``, ``plaita dev``).
SHARED_ROLLBACK = "register it with `plaita flows register FILE --shared --latest`"


def latest_note(registration: Registration, *, how: str = "pass --latest") -> str:
    """What became of the latest, for a line about a registration (V1-V5 of
    ``plaita.domain.flow_versions``); ``how`` says how to choose this version instead."""
    decision = registration.latest
    reason = decision.reason
    if reason is LatestReason.LOWER:
        return f"latest stays version {decision.latest} (higher); {how} to make it the latest"
    if reason is LatestReason.HIGHER:
        return f"it is the latest (higher than version {decision.current})"
    if reason is LatestReason.CHOSEN:
        return f"it is the latest (chosen; it was version {decision.current})"
    if reason is LatestReason.FIRST:
        return "it is the latest (the first version)"
    return "it is the latest"


def registration_summary(registration: Registration) -> dict[str, JSON]:
    flow, decision = registration.flow, registration.latest
    return {
        "flow_id": flow.flow_id,
        "version": flow.version,
        "fingerprint": flow.fingerprint,
        **registration.owner.to_json(),
        "created": registration.created,
        "latest_version": decision.latest,
        "is_latest": decision.is_latest,
        "latest_reason": decision.reason.value,
    }


@click.command("register")
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
    help="When given, refuse flows whose handlers come from other modules, or that a module "
    "lacks: the modules the flows name are imported (from the cwd too) to find each function.",
)
@click.option(
    "--latest",
    is_flag=True,
    help="Make each file's version the latest even when a higher version is registered "
    "(a rollback). Without it a version becomes the latest only when it is higher.",
)
@json_option
def flows_register(
    files: tuple[Path, ...],
    tenant_id: str,
    shared: bool,
    redis_url: str | None,
    handler_modules: str | None,
    latest: bool,
    as_json: bool,
) -> None:
    """Validate and register flow definition files for a tenant, or deployment-wide.

    A registered (flow_id, version) never changes: the same document again changes nothing,
    another document is refused (FlowVersionConflictError, exit 1). Every file is checked
    first, so a refusal writes nothing. A version becomes the latest when it is higher than
    the latest in the version order ("2" < "10", "1.9" < "1.10", "v2" < "v3"), or with
    --latest.
    """
    owner = flow_owner(tenant_id, shared)
    settings = settings_from(backend="redis", redis_url=redis_url, handler_modules=handler_modules)
    loaded = [load_flow_file(path) for path in files]
    if latest:
        refuse_two_latest(loaded)
    handlers = None
    if handler_modules is not None:
        handler_search_path()
        handlers = HandlerRegistry(settings.handler_modules)
    with named_errors():
        for flow in loaded:
            validate_registration(flow, handlers)

    async def body(container: Container) -> list[Registration]:
        catalog: FlowCatalog = container.flow_registration(handlers)
        for flow in loaded:
            await catalog.check_registration(flow, owner=owner)
        return [await catalog.register(flow, owner=owner, latest=latest) for flow in loaded]

    registrations = run_with_container(settings, body)
    if as_json:
        echo_json({"items": [registration_summary(registration) for registration in registrations]})
        return
    for registration in registrations:
        flow = registration.flow
        if registration.created:
            click.echo(
                f"registered {flow.flow_id} version {flow.version} ({flow.fingerprint[:12]}) "
                f"{for_owner(owner)}; {latest_note(registration)}"
            )
        else:
            change = latest_note(registration)
            if not registration.latest.moves:
                change = f"nothing changed; {change}"
            click.echo(
                f"{flow.flow_id} version {flow.version} ({flow.fingerprint[:12]}) was already "
                f"registered {for_owner(owner)} with this document; {change}"
            )


def refuse_two_latest(flows: list[Flow]) -> None:
    """--latest with two versions of one flow would leave the latest to the files' order."""
    versions: dict[str, list[str]] = {}
    for flow in flows:
        versions.setdefault(flow.flow_id, []).append(flow.version)
    both = {flow_id: found for flow_id, found in versions.items() if len(set(found)) > 1}
    if both:
        named = "; ".join(f"{flow_id}: versions {', '.join(v)}" for flow_id, v in both.items())
        raise click.UsageError(
            f"--latest makes each file's version the latest, but several files are versions "
            f"of one flow ({named}): give one version of each flow with --latest"
        )
