"""Helpers shared by the CLI commands and the demo: reading flow files, importing handlers."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
import redis.exceptions
from pydantic import ValidationError

from plaita.application.tenancy import tenant_scope
from plaita.domain.envelope import CarrierGenerations
from plaita.domain.errors import PlaitaError, UnknownHandlerError
from plaita.domain.execution import ExecutionState
from plaita.domain.flow import Flow
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

JSON = Any


def execution_view(state: ExecutionState) -> dict[str, JSON]:
    return {
        "execution_id": state.execution_id,
        "flow_id": state.flow_id,
        "flow_version": state.flow_version,
        "tenant_id": state.tenant_id,
        "status": state.status.value,
        "input": dict(state.input),
        "last_node_id": state.last_node_id,
        "next_node_id": state.next_node_id,
        "waiting_for": None if state.suspension is None else state.suspension.to_json(),
        "result": state.result,
        "error": None if state.error is None else state.error.to_json(),
        "node_results": dict(state.node_results),
        "steps": state.steps,
        "created_at_ms": state.created_at_ms,
        "updated_at_ms": state.updated_at_ms,
    }


def load_flow_file(path: Path) -> Flow:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc.strerror}. Run from the repository root or pass the "
            "right path"
        ) from None
    try:
        return Flow.from_json(text)
    except PlaitaError as exc:
        raise click.ClickException(f"{path}: {type(exc).__name__}: {exc}") from None


def import_handler_modules(modules: tuple[str, ...]) -> None:
    """Import the allowlisted modules now, from the cwd too (as ``celery -A``), to fail fast."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UnknownHandlerError(
                f"handler module {module!r} cannot be imported from {cwd} or the installed "
                f"packages: {exc}"
            ) from None


T = TypeVar("T")


def log_generations(log: logging.Logger, service: str, generations: CarrierGenerations) -> None:
    """The generations this process stamps on the carriers it writes (W12), at start-up.

    Compare them across the pool: a worker leaves pending every carrier whose family or budget
    generation is not its own, so every producer must log the workers' values.
    """
    log.info(
        "event=config.effective service=%s config_family=%s config_generation=%s "
        "budget_generation=%s",
        service,
        generations.config_family,
        generations.config_generation,
        generations.budget_generation,
    )


redis_url_option = click.option(
    "--redis-url",
    envvar="PLAITA_REDIS_URL",
    required=True,
    help="Redis to use, e.g. redis://127.0.0.1:6379/0 (env PLAITA_REDIS_URL).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
tenant_option = click.option(
    "--tenant",
    "tenant_id",
    envvar="PLAITA_TENANT",
    default=DEFAULT_TENANT,
    show_default=True,
    help="The tenant whose executions the command acts on (env PLAITA_TENANT).",
)


def settings_from(**values: Any) -> Settings:
    """Settings from flags (unset ones fall back to PLAITA_*); every problem listed, exit 2."""
    try:
        return Settings(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        problems = "\n".join(
            f"  {'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {e.get('input')!r})"
            for e in exc.errors()
        )
        raise click.UsageError(f"invalid configuration:\n{problems}") from None


@contextlib.contextmanager
def named_errors(redis_url: str | None = None) -> Iterator[None]:
    """Named plaita errors and connection failures become a readable message and exit 1."""
    try:
        yield
    except PlaitaError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        raise click.ClickException(
            f"cannot reach Redis at {redis_url}: {exc}. Is it running, and is the URL "
            "right (--redis-url / PLAITA_REDIS_URL)?"
        ) from None


def run_with_container(
    settings: Settings,
    body: Callable[[Container], Awaitable[T]],
    *,
    tenant_id: str | None = None,
) -> T:
    """Run ``body`` with a container built from ``settings``; Redis is pinged first.

    ``tenant_id`` opens that tenant's scope around ``body`` (W24); without it, ``body`` may
    not touch execution data (it fails closed with TenantContextMissingError).
    """

    async def go() -> T:
        container = build_container(settings)
        try:
            if settings.backend == "redis":
                await container.redis_client().ping()
            with tenant_scope(tenant_id) if tenant_id is not None else contextlib.nullcontext():
                return await body(container)
        finally:
            if settings.backend == "redis":
                await container.redis_client().aclose()
            if settings.storage == "sql":
                await container.sql_engine().dispose()

    with named_errors(settings.redis_url):
        return asyncio.run(go())


def echo_json(value: JSON) -> None:
    click.echo(json.dumps(value, sort_keys=True, default=str))


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM/SIGINT while the body runs (the services drain on it)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
