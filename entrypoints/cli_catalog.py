"""What a deployment holds: ``plaita flows list|show`` and ``plaita workers list`` (C4).

Flows and the worker registry are shared by every tenant of a deployment (they live in the
base namespace), so these commands take no ``--tenant``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from plaita.domain.errors import UnknownFlowError
from plaita.domain.flow import Flow
from plaita.entrypoints.cli_support import (
    FLOW_ID,
    echo_json,
    json_option,
    redis_url_option,
    run_with_container,
    settings_from,
)
from plaita.entrypoints.container import Container

JSON = Any


def flow_summary(flow: Flow) -> dict[str, JSON]:
    return {
        "flow_id": flow.flow_id,
        "version": flow.version,
        "fingerprint": flow.fingerprint,
        "node_count": sum(1 for _ in flow.nodes()),
    }


def flow_detail(flow: Flow) -> dict[str, JSON]:
    nodes = list(flow.nodes())
    return {
        **flow_summary(flow),
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
@redis_url_option
@json_option
def flows_list(redis_url: str, as_json: bool) -> None:
    """Registered flows, each at its latest version."""
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> list[Flow]:
        repository = container.flow_repository()
        found = [await repository.get(flow_id) for flow_id in await repository.list_ids()]
        return [flow for flow in found if flow is not None]

    flows = run_with_container(settings, body)
    if as_json:
        echo_json({"items": [flow_summary(flow) for flow in flows]})
        return
    if not flows:
        click.echo("no flows are registered (register one with `plaita flows register FILE`)")
    for flow in flows:
        summary = flow_summary(flow)
        click.echo(
            f"{flow.flow_id}  version {flow.version}  {summary['node_count']} nodes  "
            f"{flow.fingerprint[:12]}"
        )


@click.command("show")
@click.argument("flow_id", type=FLOW_ID)
@click.option("--version", default=None, help="This version (default: the latest registered).")
@redis_url_option
@json_option
def flows_show(flow_id: str, version: str | None, redis_url: str, as_json: bool) -> None:
    """One flow definition: its fingerprint, nodes and edges, and the document."""
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> Flow:
        repository = container.flow_repository()
        flow: Flow | None = await repository.get(flow_id, version)
        if flow is None:
            which = f"{flow_id!r}" if version is None else f"{flow_id!r} version {version!r}"
            known = ", ".join(await repository.list_ids()) or "none"
            raise UnknownFlowError(
                f"flow {which} is not registered (registered flows: {known}); register it "
                "with `plaita flows register FILE`"
            )
        return flow

    flow = run_with_container(settings, body)
    detail = flow_detail(flow)
    if as_json:
        echo_json(detail)
        return
    click.echo(f"{flow.flow_id} version {flow.version} (start {detail['start']})")
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
def workers_list(redis_url: str, as_json: bool) -> None:
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
