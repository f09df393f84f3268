"""Running flows in this process: ``plaita run`` and ``plaita demo`` (C4).

Both use the in-memory twin, so they need no Redis: ``run`` runs one flow file and prints its
result (or one line per node with ``--stream``), ``demo`` runs the bundled approval example.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from plaita.domain.failures import FlowExecutionException
from plaita.domain.limits import EVENT_DATA_LIMIT, INPUT_LIMIT
from plaita.entrypoints.cli_support import (
    default_retries_option,
    load_flow_file,
    named_errors,
    parse_json_object,
    settings_from,
)
from plaita.entrypoints.run_flow import run_flow

JSON = Any


@click.command("demo")
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


@click.command("run")
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
@click.option(
    "--with-flow",
    "child_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE",
    help="A flow the run's subflow and map nodes start as children; repeat for several.",
)
@default_retries_option
def run_command(
    flow_file: Path,
    input_json: str | None,
    handler_modules: str | None,
    stream: bool,
    event_values: tuple[str, ...],
    child_files: tuple[Path, ...],
    default_retries: int,
) -> None:
    """Run FLOW_FILE in this process and print its result (no Redis needed)."""
    flow = load_flow_file(flow_file)
    children = [load_flow_file(path) for path in child_files]
    params = parse_json_object("--input", input_json, INPUT_LIMIT)
    events = _parse_events(event_values)
    if handler_modules is None:
        handler_modules = ",".join(
            sorted(flow.handler_modules().union(*(child.handler_modules() for child in children)))
        )
        if handler_modules:
            click.echo(
                f"note: trusting the handler modules {flow_file} names: {handler_modules} "
                "(restrict with --handler-modules)",
                err=True,
            )
    settings = settings_from(
        backend="memory", handler_modules=handler_modules, default_retries=default_retries
    )
    from plaita.entrypoints.container import build_container

    container = build_container(settings)
    with named_errors():
        try:
            result = run_flow(
                container, flow, params, events, stream=stream, emit=click.echo, children=children
            )
        except FlowExecutionException as exc:
            where = f" at node {exc.node_id!r}" if exc.node_id else ""
            raise click.ClickException(
                f"flow {flow.flow_id!r} failed{where}: {type(exc).__name__} ({exc.code}): {exc}"
            ) from None
    if not stream:
        click.echo(json.dumps(result, sort_keys=True, default=str))
