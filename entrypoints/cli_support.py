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
from collections.abc import Awaitable, Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import redis.exceptions
from click.core import ParameterSource
from pydantic import ValidationError

from plaita.application.actor import Actor, actor_scope
from plaita.application.tenancy import tenant_scope
from plaita.domain.budgets import DEFAULT_RETRIES
from plaita.domain.envelope import CarrierGenerations
from plaita.domain.errors import (
    InvalidIdError,
    InvalidPriorityError,
    InvalidRedisUrlError,
    PayloadLimitError,
    PlaitaError,
    UnknownHandlerError,
)
from plaita.domain.execution import ExecutionState
from plaita.domain.flow import Flow
from plaita.domain.ids import IdKind, validate_id
from plaita.domain.limits import JsonLimit, check_json_text
from plaita.domain.priorities import PRIORITIES, parse_priority
from plaita.domain.startup import ConfigWarning
from plaita.domain.store_urls import check_redis_url
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.settings import Settings, optional_fallbacks

if TYPE_CHECKING:  # the container is built only when a command runs (a quick --help)
    from plaita.entrypoints.container import Container

JSON = Any
log = logging.getLogger("plaita.cli")


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
        # A parallel node's open branches each wait on their own (E12).
        "branch_waits": [] if state.fork is None else [w.to_json() for w in state.fork.waits],
        # The execution whose subflow or map node started this one (E13, E14).
        "parent": None if state.parent is None else state.parent.to_json(),
        "result": state.result,
        "error": None if state.error is None else state.error.to_json(),
        "last_failure": None if state.last_failure is None else state.last_failure.to_json(),
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


def handler_search_path() -> str:
    """Let handler modules be imported from the cwd too (as ``celery -A``); returns the cwd."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    return cwd


def import_handler_modules(modules: tuple[str, ...]) -> None:
    """Import the allowlisted modules now, from the cwd too (as ``celery -A``), to fail fast."""
    cwd = handler_search_path()
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UnknownHandlerError(
                f"handler module {module!r} cannot be imported from {cwd} or the installed "
                f"packages: {exc}"
            ) from None


T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class IdParam(click.ParamType[str]):
    """An execution, event or flow id, held to the id rule before anything connects (exit 2)."""

    def __init__(self, kind: IdKind) -> None:
        self.kind = kind
        self.name = kind.label

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return validate_id(self.kind, value)
        except InvalidIdError as exc:
            self.fail(f"{type(exc).__name__}: {exc}", param, ctx)


EXECUTION_ID = IdParam(IdKind.EXECUTION)
EVENT_ID = IdParam(IdKind.EVENT)
FLOW_ID = IdParam(IdKind.FLOW)


class PriorityParam(click.ParamType[str]):
    """A start's priority, held to ``parse_priority`` before anything connects (exit 2)."""

    name = "|".join(level.value for level in PRIORITIES)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return parse_priority(value).value
        except InvalidPriorityError as exc:
            self.fail(f"{type(exc).__name__}: {exc}", param, ctx)


PRIORITY = PriorityParam()


def parse_json_object(option: str, text: str | None, limit: JsonLimit) -> dict[str, JSON]:
    """``text`` as a JSON object within ``limit``, or a usage error naming ``option`` (exit 2).

    The limit is checked on the text first: the parser recurses, and a 10,000-deep document
    would crash it instead of being refused by name.
    """
    if text is None:
        return {}
    try:
        check_json_text(text, limit, field=option)
        value = json.loads(text)
    except PayloadLimitError as exc:
        raise click.BadParameter(f"{type(exc).__name__}: {exc}", param_hint=option) from None
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON ({exc}): {text!r}", param_hint=option) from None
    if not isinstance(value, dict):
        raise click.BadParameter(
            f"must be a JSON object such as '{{\"amount\": 10}}', got {text!r}", param_hint=option
        )
    return value


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


_REDIS_CLUSTER_META = "plaita.redis_cluster"


def _remember_cluster(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[_REDIS_CLUSTER_META] = True


#: ``--redis-cluster`` (env PLAITA_REDIS_CLUSTER=1): the Redis URL is a seed node of a cluster.
#: Not a parameter of the command functions: ``settings_from`` (and every other builder of a
#: command's settings, through ``cluster_flag``) reads it from the click context.
redis_cluster_option = click.option(
    "--redis-cluster",
    is_flag=True,
    default=False,
    expose_value=False,
    callback=_remember_cluster,
    help="The Redis URL is a seed node of a Redis Cluster (env PLAITA_REDIS_CLUSTER=1).",
)


_PARTITIONS_META = "plaita.partitions"


def _remember_partitions(ctx: click.Context, _param: click.Parameter, value: int | None) -> None:
    if value is not None:
        ctx.meta[_PARTITIONS_META] = value


#: ``--partitions`` (env PLAITA_PARTITIONS): the task queue's partition count. Beside
#: ``--redis-url``, since every command that enqueues must lay carriers out as the workers
#: read them; read from the click context as ``--redis-cluster`` is (``cluster_flag``).
redis_partitions_option = click.option(
    "--partitions",
    type=click.IntRange(1, 1024),
    default=None,
    expose_value=False,
    callback=_remember_partitions,
    help="The partitions of the task queue and the event notification stream, 1-1024 (env "
    "PLAITA_PARTITIONS; default 1). Every process of a deployment uses the same count; a "
    "worker refuses another one while carriers wait in the layout of the recorded count.",
)


class RedisUrlParam(click.ParamType[str]):
    """A Redis URL, held to the scheme rule before anything connects (exit 2)."""

    name = "URL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return check_redis_url(str(value))
        except InvalidRedisUrlError as exc:
            self.fail(f"{type(exc).__name__}: {exc}", param, ctx)


REDIS_URL = RedisUrlParam()

# --- where a command goes: a Redis, or the plaita dev of this directory (ADR 0021) ----------

_DEV_ASKED_META = "plaita.dev_asked"
_DEV_SOCKET_META = "plaita.dev_socket"
_DEV_TARGET_META = "plaita.dev_target"


def _remember_dev(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[_DEV_ASKED_META] = True


def _remember_dev_socket(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    if value is not None:
        ctx.meta[_DEV_SOCKET_META] = value


#: ``plaita --dev``: every command goes to the plaita dev of this directory.
dev_option = click.option(
    "--dev",
    is_flag=True,
    default=False,
    envvar="PLAITA_DEV",
    expose_value=False,
    callback=_remember_dev,
    help="Send the command to the plaita dev running in this directory (its control socket "
    ".plaita/dev.sock), even when PLAITA_REDIS_URL is set (env PLAITA_DEV=1). Without "
    "--redis-url and PLAITA_REDIS_URL a command goes there anyway when the socket exists.",
)
#: ``plaita --dev-socket PATH``: the control socket of a plaita dev started elsewhere.
dev_socket_option = click.option(
    "--dev-socket",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="PLAITA_DEV_SOCKET",
    default=None,
    expose_value=False,
    callback=_remember_dev_socket,
    help="The control socket of the plaita dev to use (env PLAITA_DEV_SOCKET; default "
    ".plaita/dev.sock in the current directory).",
)


def _dev_socket(ctx: click.Context) -> Path:
    from plaita.entrypoints.dev_control import SOCKET_PATH

    socket_path: Path = ctx.find_root().meta.get(_DEV_SOCKET_META, SOCKET_PATH)
    return socket_path


def _redis_url_or_dev(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Decide where the command goes (ADR 0021); the URL, or None for the dev process.

    ``--redis-url`` on the command line goes to that Redis (and refuses ``--dev`` beside it);
    ``--dev`` goes to the dev process even when PLAITA_REDIS_URL is set; PLAITA_REDIS_URL goes
    to its Redis; else the dev process whose socket is given (``--dev-socket``) or found in
    this directory; else the URL is missing (exit 2).
    """
    meta = ctx.find_root().meta
    source = ctx.get_parameter_source(param.name or "redis_url")
    asked = bool(meta.get(_DEV_ASKED_META))
    if value is not None and source is ParameterSource.COMMANDLINE:
        if asked:
            raise click.UsageError(
                "--dev sends the command to plaita dev and --redis-url to a Redis: give one"
            )
        return value
    socket_path = _dev_socket(ctx)
    if asked or (
        value is None
        and (_DEV_SOCKET_META in meta or socket_path.exists() or socket_path.is_symlink())
    ):
        meta[_DEV_TARGET_META] = socket_path
        return None
    if value is not None:
        return value
    raise click.MissingParameter(
        param=param,
        ctx=ctx,
        message="Give the Redis to use (or set PLAITA_REDIS_URL), or run the command in the "
        "directory of a running `plaita dev` (or with --dev / --dev-socket).",
    )


def dev_target() -> Path | None:
    """The control socket this command goes to, or None when it goes to a Redis."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    target: Path | None = ctx.find_root().meta.get(_DEV_TARGET_META)
    return target


def _redis_url_option(command: F, **option: Any) -> F:
    """``--redis-url`` (env PLAITA_REDIS_URL) held to the URL rule, with ``--redis-cluster`` and
    ``--partitions`` beside it."""
    command = redis_partitions_option(command)
    command = redis_cluster_option(command)
    return click.option("--redis-url", envvar="PLAITA_REDIS_URL", type=REDIS_URL, **option)(command)


def redis_url_option(command: F) -> F:
    """``--redis-url`` of an operator command: without a URL the command goes to the plaita
    dev of this directory (ADR 0021)."""
    return _redis_url_option(
        command,
        default=None,
        callback=_redis_url_or_dev,
        help="Redis to use, e.g. redis://127.0.0.1:6379/0 (env PLAITA_REDIS_URL). Without "
        "one, the plaita dev running in this directory (see plaita --dev).",
    )


def _no_dev(ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if ctx.find_root().meta.get(_DEV_ASKED_META):
        raise click.UsageError(
            f"`plaita {ctx.info_name}` is a service of a Redis deployment; plaita dev runs its "
            "own worker, event filter and console: drop --dev (PLAITA_DEV)"
        )
    return value


def service_redis_url_option(command: F) -> F:
    """``--redis-url`` of a long-running service (worker, event filter, console): required,
    since a service never runs against another process's memory."""
    return _redis_url_option(
        command,
        required=True,
        callback=_no_dev,
        help="Redis to use, e.g. redis://127.0.0.1:6379/0 (env PLAITA_REDIS_URL).",
    )


def cluster_flag() -> dict[str, Any]:
    """The settings of the flags beside ``--redis-url`` that this command was given:
    ``{"redis_cluster": True}`` for ``--redis-cluster``, ``{"partitions": P}`` for
    ``--partitions P``; ``{}`` without them (so PLAITA_REDIS_CLUSTER and PLAITA_PARTITIONS,
    read by ``Settings``, decide)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return {}
    meta = ctx.find_root().meta
    flags: dict[str, Any] = {}
    if meta.get(_REDIS_CLUSTER_META):
        flags["redis_cluster"] = True
    if meta.get(_PARTITIONS_META) is not None:
        flags["partitions"] = meta[_PARTITIONS_META]
    return flags


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
#: W20: a worker's and a console's flow cache; an unusable value falls back with a WARNING.
flow_cache_size_option = click.option(
    "--flow-cache-size",
    envvar="PLAITA_FLOW_CACHE_SIZE",
    default=None,
    help="Flow definitions kept in memory, by tenant, flow and version (default 100).",
)
flow_cache_ttl_option = click.option(
    "--flow-cache-ttl-seconds",
    envvar="PLAITA_FLOW_CACHE_TTL_SECONDS",
    default=None,
    help="How long a cached definition is used before it is read again, so a new latest "
    "registered elsewhere is seen within it (default 300).",
)
tenant_option = click.option(
    "--tenant",
    "tenant_id",
    envvar="PLAITA_TENANT",
    default=DEFAULT_TENANT,
    show_default=True,
    help="The tenant whose executions the command acts on (env PLAITA_TENANT).",
)

#: E15: a node without ``retryTimes`` is retried this often (env PLAITA_DEFAULT_RETRIES).
default_retries_option = click.option(
    "--default-retries",
    type=click.IntRange(0, 100),
    envvar="PLAITA_DEFAULT_RETRIES",
    default=DEFAULT_RETRIES,
    show_default=True,
    help="Retries of a node that sets no retryTimes (transient failures only, with backoff "
    "min(30 s, 2^(n-1) s)).",
)


def setting_default(name: str) -> str:
    """The default a flag falls back to when neither it nor PLAITA_<NAME> is set (for --help)."""
    return str(Settings.model_fields[name].default)


def set_service_log_level(quiet: bool) -> None:
    """A long-running service (worker, event filter) logs INFO unless ``--quiet`` or an
    explicit ``--log-level`` says otherwise: its start-up and stop lines are what an operator
    reads first."""
    group = click.get_current_context().parent
    if quiet:
        logging.getLogger().setLevel(logging.WARNING)
    elif group is not None and (
        group.get_parameter_source("log_level") is click.core.ParameterSource.DEFAULT
    ):
        logging.getLogger().setLevel(logging.INFO)


def settings_from(**values: Any) -> Settings:
    """Settings from flags (unset ones fall back to PLAITA_*); every problem listed, exit 2.

    An unusable optional setting (the flow cache's, W20) falls back with a WARNING (W21).
    """
    if dev_target() is not None:
        _refuse_store_flags(values)
    values = {**cluster_flag(), **values}
    given, warnings = optional_fallbacks({k: v for k, v in values.items() if v is not None})
    warn_fallbacks(warnings)
    try:
        return Settings(**given)
    except ValidationError as exc:
        problems = "\n".join(_problem_line(e) for e in exc.errors())
        raise click.UsageError(f"invalid configuration:\n{problems}") from None


#: Values a command may give while it goes to plaita dev: where it goes, and what only the
#: command itself reads (an allowlist to check flow files against).
_DEV_COMMAND_VALUES = frozenset({"backend", "redis_url", "handler_modules"})


def _refuse_store_flags(values: dict[str, Any]) -> None:
    """A command sent to plaita dev runs with the dev process's settings: a flag that would
    shape the store (a queue, partitions, a lease TTL, a cluster) is refused, not ignored."""
    given = sorted(
        name
        for name, value in values.items()
        if value is not None and name not in _DEV_COMMAND_VALUES
    )
    given += sorted(cluster_flag())
    if given:
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in given)
        raise click.UsageError(
            f"{flags}: a command sent to plaita dev runs with the dev process's own settings; "
            "drop these flags, or give --redis-url to act on a Redis"
        )


def _problem_line(error: Any) -> str:
    """One line of a settings error: the field and its value, or a rule across fields alone."""
    if not error["loc"]:
        # A rule across settings (a model validator): its message names the values itself.
        return f"  {error['msg'].removeprefix('Value error, ')}"
    field = ".".join(str(part) for part in error["loc"])
    return f"  {field}: {error['msg']} (got {error.get('input')!r})"


def warn_fallbacks(warnings: Iterable[ConfigWarning], logger: logging.Logger = log) -> None:
    for warning in warnings:
        logger.warning(
            "event=config.fallback setting=%s value=%r used=%r: %s",
            warning.setting,
            warning.value,
            warning.used,
            warning.message,
        )


@contextlib.contextmanager
def named_errors(redis_url: str | None = None) -> Iterator[None]:
    """Named plaita errors and connection failures become a readable message and exit 1;
    bad input a use case refused (an id, a document over the JSON limits) exits 2, as a bad
    flag does."""
    try:
        yield
    except (InvalidIdError, PayloadLimitError) as exc:
        raise click.UsageError(f"{type(exc).__name__}: {exc}") from None
    except PlaitaError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        raise click.ClickException(
            f"cannot reach Redis at {redis_url}: {exc}. Is it running, and is the URL "
            "right (--redis-url / PLAITA_REDIS_URL)?"
        ) from None
    except redis.exceptions.RedisClusterException as exc:
        raise click.ClickException(
            f"cannot use the Redis Cluster whose seed is {redis_url}: {str(exc).rstrip('.')}. "
            "Is the cluster "
            "up, is the URL one of its nodes, and is it a cluster at all (for a single Redis, "
            "drop --redis-cluster / PLAITA_REDIS_CLUSTER)?"
        ) from None
    except (redis.exceptions.MovedError, redis.exceptions.AskError) as exc:
        raise click.ClickException(
            f"{redis_url} is a node of a Redis Cluster (it redirected a key to {exc.host}:"
            f"{exc.port}): add --redis-cluster (or PLAITA_REDIS_CLUSTER=1) so the client "
            "follows the cluster's slots"
        ) from None


def run_with_container(
    settings: Settings,
    body: Callable[[Container], Awaitable[T]],
    *,
    tenant_id: str | None = None,
) -> T:
    """Run ``body`` with a container built from ``settings``; Redis is pinged first. A command
    that goes to plaita dev (``dev_target``) runs ``body`` on the dev process's container.

    ``tenant_id`` opens that tenant's scope around ``body`` (W24); without it, ``body`` may
    not touch execution data (it fails closed with TenantContextMissingError).
    """
    target = dev_target()
    if target is not None:
        from plaita.entrypoints.dev_control import run_on_dev

        with named_errors(f"the plaita dev on {target}"), actor_scope(Actor.os_user("cli")):
            return run_on_dev(target, body, tenant_id=tenant_id)

    async def go() -> T:
        from plaita.entrypoints.container import build_container

        container = build_container(settings)
        try:
            if settings.backend == "redis":
                await container.redis_client().ping()
            with (
                tenant_scope(tenant_id) if tenant_id is not None else contextlib.nullcontext(),
                actor_scope(Actor.os_user("cli")),
            ):
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


def echo_rows(rows: Iterable[tuple[str, str]]) -> None:
    """Label and value rows, the values aligned in one column (a command's human output)."""
    rows = list(rows)
    width = max((len(label) for label, _ in rows), default=0)
    for label, value in rows:
        click.echo(f"{label:<{width}}  {value}")


def human_time(timestamp_ms: int, now_ms: int) -> str:
    """``2026-12-01 21:03:04 UTC (2 min ago)``: to the second in UTC, and how far from now."""
    moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    offset_ms = now_ms - timestamp_ms
    if abs(offset_ms) < 1000:
        relative = "now"
    elif offset_ms > 0:
        relative = f"{human_duration(offset_ms)} ago"
    else:
        relative = f"in {human_duration(-offset_ms)}"
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC ({relative})"


def human_duration(duration_ms: int) -> str:
    """A duration as a person says it: ``850 ms``, ``12 s``, ``3 min 20 s``, ``2 h 5 min``,
    ``3 days 4 h`` (the two largest units)."""
    if duration_ms < 1000:
        return f"{duration_ms} ms"
    seconds = duration_ms // 1000
    units = (("day", 86_400), ("h", 3600), ("min", 60), ("s", 1))
    parts: list[str] = []
    for name, size in units:
        count, seconds = divmod(seconds, size)
        if count and len(parts) < 2:
            parts.append(f"{count} {name}{'s' if name == 'day' and count > 1 else ''}")
        elif parts:
            break
    return " ".join(parts)


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
