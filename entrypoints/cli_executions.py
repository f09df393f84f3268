"""The ``plaita executions`` commands: start and show, and the operator controls list, resume,
cancel, pause, unpause, retry, bulk.

``cli.py`` attaches each command to its ``executions`` group. They act on one tenant's
executions (``--tenant``) on Redis, through the same use cases as the console (W23, C4).
Refusals are named errors (exit 1, with what to do); bad flags are usage errors (exit 2).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs
import click

from plaita.application.use_cases.operator_controls import (
    BulkProgress,
    BulkResult,
    ControlResult,
    ExecutionListing,
)
from plaita.domain.envelope import validate_target_instance_id
from plaita.domain.errors import (
    ExecutionFailedError,
    InvalidOperatorRequestError,
    InvalidTargetInstanceError,
    ResultTimeoutError,
    UnknownExecutionError,
    UnknownFlowError,
)
from plaita.domain.execution import ExecutionStatus
from plaita.domain.failures import ExecutionCancelledError
from plaita.domain.flow import EventNode, SleepNode
from plaita.domain.history import (
    HISTORY_CAP,
    MAX_HISTORY_PAGE,
    HistoryEntry,
    HistorySummary,
    summarize,
)
from plaita.domain.limits import INPUT_LIMIT
from plaita.domain.operator_controls import (
    MAX_BULK_LIMIT,
    MAX_PAGE_LIMIT,
    OperatorAction,
    PageCursor,
)
from plaita.domain.priorities import Priority
from plaita.entrypoints.cli_support import (
    EXECUTION_ID,
    FLOW_ID,
    PRIORITY,
    echo_json,
    echo_rows,
    execution_view,
    human_time,
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
_STATUSES = [status.value for status in ExecutionStatus]
#: ``executions history --follow``: the bounds of its poll interval.
FOLLOW_MIN_INTERVAL_S = 0.2
FOLLOW_MAX_INTERVAL_S = 10.0

status_option = click.option(
    "--status",
    type=click.Choice(_STATUSES),
    default=None,
    help="Only executions with this status.",
)
flow_option = click.option(
    "--flow", "flow_id", type=FLOW_ID, default=None, help="Only executions of this flow."
)


def _run(body: Callable[[Container], Awaitable[Any]], redis_url: str | None, tenant_id: str) -> Any:
    # Operator actions are audited: their lines show even at the default WARNING level.
    audit = logging.getLogger("plaita.audit")
    if audit.getEffectiveLevel() > logging.INFO:
        audit.setLevel(logging.INFO)
    settings = settings_from(backend="redis", redis_url=redis_url)
    return run_with_container(settings, body, tenant_id=tenant_id)


def _when(timestamp_ms: int) -> str:
    moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _check_cursor(cursor: str | None) -> None:
    if cursor is None:
        return
    try:
        PageCursor.decode(cursor)
    except InvalidOperatorRequestError as exc:
        raise click.BadParameter(str(exc), param_hint="--cursor") from None


# --- list ----------------------------------------------------------------------------------


@click.command("list")
@flow_option
@status_option
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_PAGE_LIMIT),
    default=50,
    show_default=True,
    help="At most this many executions, newest first.",
)
@click.option("--cursor", default=None, help="Go on from a previous page's next cursor.")
@tenant_option
@redis_url_option
@json_option
def executions_list(
    flow_id: str | None,
    status: str | None,
    limit: int,
    cursor: str | None,
    tenant_id: str,
    redis_url: str | None,
    as_json: bool,
) -> None:
    """List a tenant's executions, newest first, a page at a time."""
    _check_cursor(cursor)

    async def body(container: Container) -> ExecutionListing:
        listing: ExecutionListing = await container.list_executions()(
            flow_id=flow_id,
            status=None if status is None else ExecutionStatus(status),
            limit=limit,
            cursor=cursor,
        )
        return listing

    listing: ExecutionListing = _run(body, redis_url, tenant_id)
    if as_json:
        echo_json(listing.to_json())
        return
    if not listing.items:
        click.echo("no executions match")
    for state, flags in listing.items:
        marks = "".join(
            f"  [{mark}]"
            for mark, on in (("paused", flags.paused), ("cancel requested", flags.cancel_requested))
            if on
        )
        node = state.suspension.node_id if state.suspension else state.next_node_id
        click.echo(
            f"{state.execution_id}  {state.flow_id}@{state.flow_version}  {state.status.value:<9}  "
            f"node={node or '-'}  updated={_when(state.updated_at_ms)}{marks}"
        )
    if listing.next_cursor:
        click.echo(f"more: --cursor {listing.next_cursor}")


# --- one execution ---------------------------------------------------------------------------


def _echo_result(result: ControlResult, as_json: bool) -> None:
    if as_json:
        echo_json(result.to_json())
        return
    flags = "paused" if result.flags.paused else "not paused"
    click.echo(
        f"{result.outcome}: {result.execution_id} ({result.status.value}, {flags}) {result.detail}"
    )


def _single(action: OperatorAction, help_text: str) -> click.Command:
    @click.command(action.value, help=help_text)
    @click.argument("execution_id", type=EXECUTION_ID)
    @tenant_option
    @redis_url_option
    @json_option
    def command(execution_id: str, tenant_id: str, redis_url: str | None, as_json: bool) -> None:
        async def body(container: Container) -> ControlResult:
            act: Callable[[str], Awaitable[ControlResult]]
            if action is OperatorAction.RESUME:
                act = container.continue_execution()
            elif action is OperatorAction.CANCEL:
                act = container.cancel_execution()
            elif action is OperatorAction.PAUSE:
                act = container.pause_execution()
            else:
                act = container.unpause_execution()
            return await act(execution_id)

        _echo_result(_run(body, redis_url, tenant_id), as_json)

    return command


executions_resume = _single(
    OperatorAction.RESUME,
    "Enqueue a continue for a running (e.g. stuck) execution; it goes on from its checkpoint.",
)
executions_cancel = _single(
    OperatorAction.CANCEL,
    "Cancel a running or suspended execution: the cancel is flagged at once, then a worker "
    "ends it as cancelled under the lease.",
)
executions_pause = _single(
    OperatorAction.PAUSE,
    "Pause an execution: it takes no new step; carriers that arrive meanwhile (events, "
    "timers, retries) are kept until unpause. A step already running finishes.",
)
executions_unpause = _single(
    OperatorAction.UNPAUSE,
    "Unpause an execution: every carrier kept while paused is enqueued again (or a continue "
    "when none was). Safe to run again.",
)


@click.command("retry")
@click.argument("execution_id", type=EXECUTION_ID)
@click.option(
    "--from-node",
    default=None,
    help="Run again from this node (default: where it failed or was cancelled).",
)
@tenant_option
@redis_url_option
@json_option
def executions_retry(
    execution_id: str, from_node: str | None, tenant_id: str, redis_url: str | None, as_json: bool
) -> None:
    """Run a failed, cancelled or suspended execution again under the same id (W23).

    Without --from-node an execution in error is woken up at its failed node (at most twice,
    W7); --from-node restarts it at that node with a fresh retry budget for the node.
    """
    if from_node is not None and not from_node.strip():
        raise click.BadParameter(
            "must name a node of the execution's flow", param_hint="--from-node"
        )

    async def body(container: Container) -> ControlResult:
        result: ControlResult = await container.retry_execution()(execution_id, from_node=from_node)
        return result

    _echo_result(_run(body, redis_url, tenant_id), as_json)


# --- bulk ------------------------------------------------------------------------------------


class _ProgressBar:
    """A click progress bar on stderr, opened at the first report (the total is known then)."""

    def __init__(self, enabled: bool, label: str) -> None:
        self._enabled = enabled
        self._label = label
        self._bar: Any = None

    def __call__(self, progress: BulkProgress) -> None:
        if not self._enabled:
            return
        if self._bar is None:
            self._bar = click.progressbar(length=progress.total, label=self._label, file=sys.stderr)
            self._bar.__enter__()
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


@click.command("bulk")
@click.argument("action", type=click.Choice([action.value for action in OperatorAction]))
@flow_option
@status_option
@click.option("--all", "every", is_flag=True, help="Act on every execution of the tenant.")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_BULK_LIMIT),
    default=100,
    show_default=True,
    help="Act on at most this many matching executions, newest first.",
)
@click.option("--dry-run", is_flag=True, help="List the matching executions; change nothing.")
@tenant_option
@redis_url_option
@json_option
def executions_bulk(
    action: str,
    flow_id: str | None,
    status: str | None,
    every: bool,
    limit: int,
    dry_run: bool,
    tenant_id: str,
    redis_url: str | None,
    as_json: bool,
) -> None:
    """Apply ACTION (resume, retry, cancel, pause, unpause) to every matching execution.

    Name --flow and/or --status, or --all. Failures are listed and never stop the batch;
    exits 1 when any execution failed.
    """
    if flow_id is None and status is None and not every:
        raise click.UsageError(
            "name the executions to act on with --flow and/or --status, or pass --all for "
            f"every execution of tenant {tenant_id!r}"
        )
    bar = _ProgressBar(not as_json and sys.stderr.isatty(), f"{action}")

    async def body(container: Container) -> BulkResult:
        try:
            result: BulkResult = await container.bulk_action()(
                OperatorAction(action),
                flow_id=flow_id,
                status=None if status is None else ExecutionStatus(status),
                dry_run=dry_run,
                limit=limit,
                progress=bar,
            )
        finally:
            bar.close()
        return result

    result: BulkResult = _run(body, redis_url, tenant_id)
    if as_json:
        echo_json(result.to_json())
    elif dry_run:
        for execution_id in result.matched:
            click.echo(f"would {action} {execution_id}")
        click.echo(f"{len(result.matched)} executions match (dry run, nothing changed)")
    else:
        for failure in result.failed:
            click.echo(f"failed {failure.execution_id}: {failure.error}", err=True)
        outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(result.outcomes.items()))
        click.echo(
            f"{action}: {len(result.matched)} matched, {result.done} done"
            f"{f' ({outcomes})' if outcomes else ''}, {len(result.failed)} failed"
        )
    if result.failed:
        raise SystemExit(1)


class _TargetInstance(click.ParamType[str]):
    """A worker instance id (W25), held to the id rule before anything connects (exit 2)."""

    name = "instance id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return validate_target_instance_id(value)
        except InvalidTargetInstanceError as exc:
            self.fail(f"{type(exc).__name__}: {exc}", param, ctx)


@click.command("start")
@click.argument("flow_id", type=FLOW_ID)
@click.option("--version", default=None, help="Flow version (default: the latest registered).")
@click.option("--input", "input_json", default=None, help="Input parameters as a JSON object.")
@click.option("--dedup-key", default=None, help="Starting twice with one key starts once.")
@click.option(
    "--execution-id",
    type=EXECUTION_ID,
    default=None,
    help="Choose the id (default: a new uuid); letters, digits, '_', '.', ':' and '-'.",
)
@click.option(
    "--target-instance",
    "target_instance_id",
    type=_TargetInstance(),
    default=None,
    help="Run it on this worker instance (its --consumer-name, see `plaita workers list`); "
    "any other worker passes it on, and runs it itself when that one is not running.",
)
@click.option(
    "--priority",
    type=PRIORITY,
    default=Priority.NORMAL.value,
    show_default=True,
    help="Which starts workers take first: of every 10 taken while all three levels wait, "
    "7 are high, 2 normal and 1 low.",
)
@tenant_option
@redis_url_option
@json_option
def executions_start(
    flow_id: str,
    version: str | None,
    input_json: str | None,
    dedup_key: str | None,
    execution_id: str | None,
    target_instance_id: str | None,
    priority: str,
    tenant_id: str,
    redis_url: str | None,
    as_json: bool,
) -> None:
    """Start an execution of FLOW_ID; prints its id."""
    params = parse_json_object("--input", input_json, INPUT_LIMIT)
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> Any:
        return await container.start_execution()(
            flow_id,
            version=version,
            params=params,
            execution_id=execution_id,
            dedup_key=dedup_key,
            tenant_id=tenant_id,
            target_instance_id=target_instance_id,
            priority=priority,
        )

    started = run_with_container(settings, body, tenant_id=tenant_id)
    if as_json:
        echo_json(
            {
                "execution_id": started.execution_id,
                "flow_id": started.flow_id,
                "version": started.version,
                "deduplicated": started.deduplicated,
            }
        )
    else:
        click.echo(started.execution_id)


@click.command("show")
@click.argument("execution_id", type=EXECUTION_ID)
@tenant_option
@redis_url_option
@json_option
def executions_show(
    execution_id: str, tenant_id: str, redis_url: str | None, as_json: bool
) -> None:
    """Show an execution's status, position, times, result and error, its last failure
    (attempt, error, next retry) and what its history adds up to.

    --json prints every field (execution_view: status, input, node_results, waiting_for,
    result, error, last_failure, the *_ms times, paused, cancel_requested, parked, held_back
    (why a limit keeps it waiting: reason, detail, key, holders, limit, due_ms), and
    history: entries, dropped, attempts, failures, retries, events, operator_actions,
    last_kind, last_at_ms).
    """
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> tuple[dict[str, Any], int]:
        state = await container.get_execution()(execution_id)
        flags = await container.controls().get(execution_id)  # W23: paused, cancel asked
        held_back = await container.waiting_notes().get(execution_id)
        summary = await _history_summary(container, execution_id)
        view = {**execution_view(state), **flags.to_json(), "history": summary.to_json()}
        view["held_back"] = None if held_back is None or state.is_terminal else held_back.as_dict()
        await _name_the_waits(container, view)
        return view, container.clock().now_ms()

    view, now_ms = run_with_container(settings, body, tenant_id=tenant_id)
    if as_json:
        echo_json(view)
        return
    echo_rows(execution_rows(view, now_ms))


async def _name_the_waits(container: Container, view: dict[str, Any]) -> None:
    """Say what each wait of ``view`` is — an event node's (``kind: event``, its
    ``event_type``) or a sleep node's (``kind: timer``) — from the execution's flow. A timer
    and an event wait both keep an id and may have a wake-up time; only the node tells them
    apart. A flow that cannot be read leaves the waits as they are."""
    waits = [w for w in (view.get("waiting_for"), *(view.get("branch_waits") or [])) if w]
    if not waits:
        return
    try:
        entry = await container.flows().lookup(view["flow_id"], view["flow_version"])
    except UnknownFlowError:
        return
    for wait in waits:
        if not entry.flow.has_node(wait["node_id"]):
            continue
        node = entry.flow.node(wait["node_id"])
        if isinstance(node, EventNode):
            wait.update(kind="event", event_type=node.event_type)
        elif isinstance(node, SleepNode):
            wait["kind"] = "timer"


async def _history_summary(container: Container, execution_id: str) -> HistorySummary:
    """Read the whole kept history (at most the cap, a few pages) and sum it up."""
    read = container.execution_history()
    entries: list[HistoryEntry] = []
    page = await read(execution_id, limit=MAX_HISTORY_PAGE)
    entries += page.entries
    for _ in range(HISTORY_CAP // MAX_HISTORY_PAGE + 1):
        if page.next_cursor is None:
            break
        page = await read(execution_id, after=page.next_cursor, limit=MAX_HISTORY_PAGE)
        entries += page.entries
    return summarize(entries, dropped=page.dropped)


def execution_rows(view: dict[str, Any], now_ms: int) -> list[tuple[str, str]]:
    """``executions show`` for a person: one aligned row per fact, times in UTC and relative."""
    rows = [
        ("execution", view["execution_id"]),
        ("flow", f"{view['flow_id']} version {view['flow_version']}"),
        ("tenant", view["tenant_id"]),
        ("status", _status_line(view)),
    ]
    parent = view.get("parent")
    if parent:
        item = "" if parent.get("index") is None else f", item {parent['index']}"
        rows.append(("parent", f"{parent['execution_id']} (node {parent['node_id']}{item})"))
    waiting = view.get("waiting_for")
    held_back = view.get("held_back")
    if waiting:
        rows.append(("waiting", _waiting_line(waiting, now_ms)))
    elif view["status"] == ExecutionStatus.PENDING.value and not held_back:
        rows.append(("waiting", "for a worker to pick it up (accepted, not started yet)"))
    if held_back:
        rows.append(("held back", _held_back_line(held_back, now_ms)))
    for branch in view.get("branch_waits") or []:
        if branch != waiting:
            rows.append(("branch waits", _waiting_line(branch, now_ms)))
    if view.get("next_node_id") and ExecutionStatus(view["status"]).advances_on_continue:
        rows.append(("next node", view["next_node_id"]))
    failure = view.get("last_failure")
    if failure:
        rows += _failure_rows(failure, now_ms)
    rows += [
        ("last node", view.get("last_node_id") or "-"),
        ("steps", str(view.get("steps", 0))),
        ("created", human_time(view["created_at_ms"], now_ms)),
        ("updated", human_time(view["updated_at_ms"], now_ms)),
    ]
    error = view.get("error")
    if error:
        at = f" at node {error['node_id']}" if error.get("node_id") else ""
        rows.append(("error", f"{error['kind']} (code {error['code']}){at}: {error['message']}"))
    if view["status"] == ExecutionStatus.COMPLETED.value:
        rows.append(("result", json.dumps(view.get("result"), sort_keys=True, default=str)))
    summary = view.get("history")
    if summary:
        rows.append(("history", _summary_line(summary, now_ms)))
        if summary.get("priority"):
            rows.append(("priority", f"{summary['priority']} (asked for at its start)"))
    return rows


def _failure_rows(failure: dict[str, Any], now_ms: int) -> list[tuple[str, str]]:
    kind = "transient" if failure["transient"] else "not transient"
    rows = [
        (
            "last failure",
            f"attempt {failure['attempt']} of node {failure['node_id']}, "
            f"{human_time(failure['at_ms'], now_ms)}",
        ),
        ("last error", f"{failure['error_class']} ({kind}): {failure['message']}"),
    ]
    retry_at = failure.get("retry_at_ms")
    rows.append(
        ("next retry", "none scheduled" if retry_at is None else human_time(retry_at, now_ms))
    )
    return rows


def _summary_line(summary: dict[str, Any], now_ms: int) -> str:
    parts = [f"{summary['entries']} entries"]
    parts += [
        f"{summary[field]} {label}"
        for field, label in (
            ("attempts", "node runs"),
            ("failures", "failures"),
            ("retries", "retries scheduled"),
            ("events", "events received"),
            ("operator_actions", "operator actions"),
        )
        if summary.get(field)
    ]
    if summary.get("dropped"):
        parts.append(f"{summary['dropped']} oldest dropped")
    line = ", ".join(parts)
    if summary.get("last_kind"):
        line += f"; last: {summary['last_kind']} {human_time(summary['last_at_ms'], now_ms)}"
    return line + " (plaita executions history ID)"


def _status_line(view: dict[str, Any]) -> str:
    marks = [
        mark
        for mark, on in (
            ("paused", view.get("paused")),
            ("cancel requested", view.get("cancel_requested")),
            (f"{view.get('parked')} carriers parked", view.get("parked")),
        )
        if on
    ]
    return str(view["status"]) + (f"  ({', '.join(marks)})" if marks else "")


def _held_back_line(held_back: dict[str, Any], now_ms: int) -> str:
    """Why a limit keeps the execution waiting (flow control), for a person."""
    detail = str(held_back["detail"]).rstrip(".")
    parts = [
        f"{held_back['reason']}: {detail}",
        f"since {human_time(held_back['since_ms'], now_ms)}",
    ]
    if held_back.get("due_ms"):
        parts.append(f"runs again {human_time(held_back['due_ms'], now_ms)}")
    if held_back.get("holders"):
        parts.append(f"held by {', '.join(held_back['holders'])}")
    return "; ".join(parts)


def _waiting_line(waiting: dict[str, Any], now_ms: int) -> str:
    node = waiting["node_id"]
    wake_at_ms = waiting.get("wake_at_ms")
    if waiting.get("child_id"):
        return f"at node {node} for its child execution {waiting['child_id']}"
    progress = waiting.get("map")
    if progress:
        ended = progress["succeeded"] + progress["failed"]
        return (
            f"at node {node} for its children: {ended} of {progress['total']} items ended "
            f"({progress['failed']} failed), {progress['started'] - ended} running"
        )
    kind = waiting.get("kind")
    if kind == "timer" and wake_at_ms:
        return f"at node {node} (a timer) until {human_time(wake_at_ms, now_ms)}"
    if kind == "event" or (kind is None and waiting.get("subscription_id")):
        event = f" {waiting['event_type']}" if waiting.get("event_type") else ""
        until = f", at most until {human_time(wake_at_ms, now_ms)}" if wake_at_ms else ""
        return f"at node {node} for an event{event}{until}"
    if wake_at_ms:
        return f"at node {node} until {human_time(wake_at_ms, now_ms)}"
    return f"at node {node}"


# --- wait ------------------------------------------------------------------------------------

#: ``plaita executions wait`` exits 0 when the execution completed and with these when it did
#: not (1 is any other named error, 2 bad input, as for every command).
EXIT_FAILED = 3
EXIT_CANCELLED = 4
EXIT_TIMED_OUT = 5
#: Ctrl-C while waiting: the shell's code for SIGINT; the execution goes on.
EXIT_INTERRUPTED = 130


@attrs.frozen
class WaitOutcome:
    """How a wait ended: the JSON ``--json`` prints, the line a person reads, the exit code."""

    view: dict[str, Any]
    line: str
    exit_code: int


def _outcome(execution_id: str, timeout_s: float | None, wait: Awaitable[Any]) -> Any:
    async def waited() -> WaitOutcome:
        base: dict[str, Any] = {"execution_id": execution_id}
        try:
            result = await wait
        except ExecutionFailedError as exc:
            error = None if exc.error is None else exc.error.to_json()
            view = {**base, "status": "error", "ended": True, "error": error}
            return WaitOutcome(view, str(exc), EXIT_FAILED)
        except ExecutionCancelledError as exc:
            view = {**base, "status": "cancelled", "ended": True, "node_id": exc.node_id}
            return WaitOutcome(view, str(exc), EXIT_CANCELLED)
        except ResultTimeoutError as exc:
            view = {
                **base,
                "status": exc.status,
                "ended": False,
                "timeout_seconds": timeout_s,
            }
            where = "its start is still queued" if exc.status is None else f"it is {exc.status}"
            line = (
                f"execution {execution_id!r} had not ended after {timeout_s:g} s: {where}. It "
                f"goes on: wait again, or see `plaita executions show {execution_id}`"
            )
            return WaitOutcome(view, line, EXIT_TIMED_OUT)
        view = {**base, "status": "completed", "ended": True, "result": result}
        return WaitOutcome(view, json.dumps(result, sort_keys=True, default=str), 0)

    return waited()


@click.command("wait")
@click.argument("execution_id", type=EXECUTION_ID)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0),
    default=None,
    help="Stop waiting after this many seconds (exit 5); the execution goes on. Default: "
    "until it ends.",
)
@tenant_option
@redis_url_option
@json_option
def executions_wait(
    execution_id: str,
    timeout_s: float | None,
    tenant_id: str,
    redis_url: str | None,
    as_json: bool,
) -> None:
    """Wait until EXECUTION_ID ends, then print its result (as JSON).

    \b
    Exit codes:
      0  completed; its result is printed
      3  it ended in error (ExecutionFailedError; the error is printed)
      4  it was cancelled (ExecutionCancelledError)
      5  it had not ended after --timeout (ResultTimeoutError); it goes on
      1  another named error (no such execution, an unreachable store)
      2  bad input (an invalid id, a negative --timeout)
    With --json one object on stdout whatever the outcome: execution_id, status, ended, and
    result, error, node_id (cancelled) or timeout_seconds.
    """
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> WaitOutcome:
        wait = container.await_result()(execution_id, timeout_s=timeout_s)
        outcome: WaitOutcome = await _outcome(execution_id, timeout_s, wait)
        return outcome

    try:
        outcome: WaitOutcome = run_with_container(settings, body, tenant_id=tenant_id)
    except KeyboardInterrupt:
        click.echo(f"stopped waiting for {execution_id}; it goes on", err=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
    if as_json:
        echo_json(outcome.view)
    elif outcome.exit_code == 0:
        click.echo(outcome.line)
    else:
        click.echo(f"Error: {outcome.line}", err=True)
    if outcome.exit_code:
        raise SystemExit(outcome.exit_code)


# --- history -------------------------------------------------------------------------------


def _is_time(name: str, value: object) -> bool:
    """A fact that is a moment (``due_ms``, ``timer_due_ms``), printed as a UTC time."""
    return (name == "due_ms" or name.endswith("_due_ms")) and isinstance(value, int)


def _history_line(entry: HistoryEntry) -> str:
    where = f" {entry.node_id}" if entry.node_id else ""
    attempt = f" attempt {entry.attempt}" if entry.attempt is not None else ""
    facts = " ".join(
        f"{name[:-3] if _is_time(name, value) else name}="
        f"{_when(value) if _is_time(name, value) else json.dumps(value, default=str)}"
        for name, value in entry.detail.items()
        if name != "traceback"
    )
    line = f"{entry.seq:>5}  {_when(entry.at_ms)}  {entry.kind.value:<15}{where}{attempt}  {facts}"
    traceback = entry.detail.get("traceback")
    if isinstance(traceback, str):
        line += "\n" + "\n".join(f"       | {row}" for row in traceback.rstrip().splitlines())
    return line


@click.command("history")
@click.argument("execution_id", type=EXECUTION_ID)
@click.option(
    "--follow",
    is_flag=True,
    help="Keep printing new entries until the execution ends (or Ctrl-C).",
)
@click.option(
    "--interval",
    type=click.FloatRange(FOLLOW_MIN_INTERVAL_S, FOLLOW_MAX_INTERVAL_S),
    default=1.0,
    show_default=True,
    help="Seconds between two polls of --follow.",
)
@tenant_option
@redis_url_option
@json_option
def executions_history(
    execution_id: str,
    follow: bool,
    interval: float,
    tenant_id: str,
    redis_url: str,
    as_json: bool,
) -> None:
    """What happened to an execution, oldest first: node runs and their attempts, failures
    with their tracebacks, retries, waits, events, timers, operator actions, the end.

    --json prints one JSON object per entry (a line each), after a first line with the
    number of entries the cap dropped.
    """
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> None:
        read = container.execution_history()
        after: int | None = None
        announced = False
        while True:
            page = await read(execution_id, after=after, limit=MAX_HISTORY_PAGE)
            if not announced:
                announced = True
                if as_json:
                    echo_json({"execution_id": execution_id, "dropped": page.dropped})
                elif page.dropped:
                    click.echo(f"({page.dropped} older entries were dropped by the cap)")
            for entry in page.entries:
                if as_json:
                    click.echo(json.dumps(entry.to_json(), separators=(",", ":"), default=str))
                else:
                    click.echo(_history_line(entry))
                after = entry.seq
            if page.next_cursor is not None:
                continue  # more is stored already: no wait
            if not follow:
                return
            try:
                state = await container.get_execution()(execution_id)
            except UnknownExecutionError:
                return  # deleted (or expired) while followed: nothing more will be written
            if state.is_terminal:
                if page.entries:
                    return
                # Ended: one more read catches the entries of its last checkpoint.
                last = await read(execution_id, after=after, limit=MAX_HISTORY_PAGE)
                if not last.entries:
                    return
                continue
            await asyncio.sleep(interval)

    try:
        run_with_container(settings, body, tenant_id=tenant_id)
    except KeyboardInterrupt:
        click.echo("", err=True)
