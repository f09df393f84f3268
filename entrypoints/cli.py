"""The ``plaita`` command line (C4). Names and flags here are a contract for docs and tools.

This module is the ``plaita`` group and where every subcommand is attached; the commands
live in modules named by their group: ``cli_run`` (run, demo), ``cli_worker``,
``cli_event_filter``, ``cli_catalog`` (flows, workers), ``cli_executions``, ``cli_events``,
``cli_ops`` (dlq, reap, executions delete), ``cli_schedules`` (schedules, scheduler),
``cli_hooks``, ``cli_tenants``, ``cli_console``, ``cli_db`` and ``cli_dev``.
"""

from __future__ import annotations

import logging
import sys

import click

from plaita.entrypoints.cli_catalog import flows_list, flows_register, flows_show, workers
from plaita.entrypoints.cli_console import console
from plaita.entrypoints.cli_db import db
from plaita.entrypoints.cli_dev import dev
from plaita.entrypoints.cli_event_filter import event_filter
from plaita.entrypoints.cli_events import events_list, events_publish, events_show
from plaita.entrypoints.cli_executions import (
    executions_bulk,
    executions_cancel,
    executions_history,
    executions_list,
    executions_pause,
    executions_resume,
    executions_retry,
    executions_show,
    executions_start,
    executions_unpause,
    executions_wait,
)
from plaita.entrypoints.cli_hooks import hooks_create, hooks_delete, hooks_list, hooks_show
from plaita.entrypoints.cli_ops import delete_execution, dlq, reap, recover
from plaita.entrypoints.cli_run import demo, run_command
from plaita.entrypoints.cli_schedules import SCHEDULE_COMMANDS, scheduler
from plaita.entrypoints.cli_support import dev_option, dev_socket_option
from plaita.entrypoints.cli_tenants import tenants
from plaita.entrypoints.cli_worker import worker


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="plaita", prog_name="plaita", message="%(prog)s %(version)s")
@dev_option
@dev_socket_option
@click.option(
    "--log-level",
    envvar="PLAITA_LOG_LEVEL",
    default="WARNING",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def main(log_level: str) -> None:
    """plaita: a durable suspend/resume flow engine on Redis Streams.

    Commands that take --redis-url act on that Redis; without one (and without
    PLAITA_REDIS_URL) they act on the `plaita dev` running in the current directory.
    Shell completion: eval "$(_PLAITA_COMPLETE=bash_source plaita)" (zsh_source, fish_source).
    """
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


@main.group()
def flows() -> None:
    """Flow definitions."""


@main.group()
def executions() -> None:
    """Start and inspect executions."""


@main.group()
def events() -> None:
    """Publish events."""


@main.group()
def schedules() -> None:
    """Cron schedules: create, list, show, pause, resume, delete, trigger (W22)."""


@main.group()
def hooks() -> None:
    """Inbound webhooks: POST /hooks/NAME on the console publishes an event."""


for _command in (demo, run_command, worker, event_filter, scheduler, dlq, reap, recover, workers):
    main.add_command(_command)
main.add_command(dev)  # `plaita dev`
main.add_command(db)  # `plaita db upgrade|current`
main.add_command(console)  # `plaita console`
main.add_command(tenants)  # `plaita tenants list|show|suspend|resume|quota`

for _command in (flows_register, flows_list, flows_show):
    flows.add_command(_command)

# W23 operator controls sit next to start, show, history and wait: `plaita executions
# start|show|history|wait|list|resume|cancel|pause|unpause|retry|bulk|delete`.
for _command in (
    executions_start,
    executions_show,
    executions_history,
    executions_wait,
    executions_list,
    executions_resume,
    executions_cancel,
    executions_pause,
    executions_unpause,
    executions_retry,
    executions_bulk,
    delete_execution,
):
    executions.add_command(_command)

for _command in (events_publish, events_list, events_show):
    events.add_command(_command)

# `plaita schedules create|list|show|pause|resume|delete|trigger` (W22).
for _command in SCHEDULE_COMMANDS:
    schedules.add_command(_command)

for _command in (hooks_list, hooks_show, hooks_create, hooks_delete):
    hooks.add_command(_command)

if __name__ == "__main__":
    main()
