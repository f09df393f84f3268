"""The CLI against a ``plaita dev`` on the memory twin, through its control socket (ADR 0021).

A dev process runs on a thread of this test process (``run_dev``, as ``plaita dev`` runs it)
from a temporary project directory, and the commands run in that directory as an operator
types them — without ``--redis-url`` — so they go to its control socket: the same output,
``--json`` and named errors as against Redis, with the dev process's stores behind them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner

from plaita.domain.errors import (
    DevServerMismatchError,
    DevServerRunningError,
    DevServerUnreachableError,
    ExecutionFailedError,
)
from plaita.domain.operator_controls import OperatorAction
from plaita.domain.store_urls import check_redis_url
from plaita.entrypoints.cli import main
from plaita.entrypoints.cli_executions import EXIT_CANCELLED, EXIT_FAILED, EXIT_TIMED_OUT
from plaita.entrypoints.container import build_container
from plaita.entrypoints.dev import DevOptions, dev_settings, run_dev
from plaita.entrypoints.dev_control import (
    SOCKET_PATH,
    ControlServer,
    RemoteContainer,
    dumps,
    hello_of,
    loads,
    read_frame,
    write_frame,
)
from plaita.entrypoints.settings import Settings

from .test_dev import TASKS

T = TypeVar("T")
#: Every wait here is bounded: a broken dev process fails a test in seconds.
START_TIMEOUT_SECONDS = 20.0


def flow(flow_id: str, handler: str, *, version: str = "1", wait: bool = False) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = [
        {"id": "work", "type": "task", "handler": handler, "params": {"n": "${n}"}, "next": "end"},
        {"id": "end", "type": "end", "output": "$NODE['work']"},
    ]
    if wait:
        nodes[0]["next"] = "hold"
        nodes.insert(1, {"id": "hold", "type": "event", "event_type": "go", "next": "end"})
    return {"flow_id": flow_id, "version": version, "start": "work", "nodes": nodes}


class DevThread:
    """``run_dev`` on a thread of its own, in the project directory the test made current."""

    def __init__(self, project: Path, module: str) -> None:
        self.project = project
        self.lines: list[str] = []
        self._module = module
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="plaita-dev-under-test", daemon=True)

    def start(self) -> None:
        self._thread.start()
        deadline = START_TIMEOUT_SECONDS
        waited = 0.0
        while not any(line.startswith("plaita dev: worker") for line in self.lines):
            if self._failure is not None or not self._thread.is_alive():
                raise AssertionError(f"plaita dev failed to start: {self._failure!r}")
            if waited >= deadline:
                raise AssertionError(f"plaita dev did not start within {deadline} s")
            threading.Event().wait(0.05)
            waited += 0.05

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(START_TIMEOUT_SECONDS)
        assert not self._thread.is_alive(), "plaita dev did not stop"
        if self._failure is not None:
            raise AssertionError(f"plaita dev failed: {self._failure!r}")

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the test thread by start() / stop()
            self._failure = exc

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        settings = dev_settings(redis_url=None, handler_modules=[self._module])
        options = DevOptions(port=0, flows_dir=self.project / "flows")
        await run_dev(settings=settings, options=options, echo=self.lines.append, stop=self._stop)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """A project directory, current for the test: flows/ and a handler module of its own."""
    module = f"dev_tasks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(TASKS)
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "calc.json").write_text(json.dumps(flow("calc", f"{module}:double")))
    (tmp_path / "flows" / "refuse.json").write_text(json.dumps(flow("refuse", f"{module}:refuse")))
    (tmp_path / "flows" / "hold.json").write_text(
        json.dumps(flow("hold", f"{module}:double", wait=True))
    )
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("PLAITA_")]:
        monkeypatch.delenv(name)
    yield tmp_path, module


@pytest.fixture
def dev(project: tuple[Path, str]) -> Iterator[DevThread]:
    server = DevThread(*project)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def plaita(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def plaita_json(*args: str) -> Any:
    code, out, err = plaita(*args, "--json")
    assert code == 0, out + err
    return json.loads(out)


def on_dev_loop(dev: DevThread, work: Callable[[], Awaitable[T]]) -> T:
    assert dev._loop is not None
    return asyncio.run_coroutine_threadsafe(work(), dev._loop).result(START_TIMEOUT_SECONDS)


# --- the README's commands -------------------------------------------------------------------


def test_the_readme_commands_act_on_the_dev_process_without_a_url(dev: DevThread) -> None:
    assert sorted(i["flow_id"] for i in plaita_json("flows", "list")["items"]) == [
        "calc",
        "hold",
        "refuse",
    ]
    code, started, _ = plaita("executions", "start", "hold", "--input", '{"n": 4}')
    assert code == 0
    execution_id = started.strip()
    waited = plaita("executions", "wait", execution_id, "--timeout", "0.2", "--json")
    assert waited[0] == EXIT_TIMED_OUT and json.loads(waited[1])["status"] == "suspended"

    shown = plaita_json("executions", "show", execution_id)
    assert (shown["status"], shown["waiting_for"]["node_id"]) == ("suspended", "hold")
    assert (shown["waiting_for"]["kind"], shown["waiting_for"]["event_type"]) == ("event", "go")
    code, out, _ = plaita("executions", "show", execution_id)
    assert code == 0
    rows = dict(line.split(None, 1) for line in out.splitlines() if " " in line)
    assert rows["execution"] == execution_id and rows["status"] == "suspended"
    assert rows["waiting"].startswith("at node hold for an event go")
    assert "UTC (" in rows["created"]

    event = plaita_json("events", "publish", "go", "--correlation-id", execution_id)
    assert plaita_json("events", "show", event["event_id"])["event_type"] == "go"
    assert plaita_json("executions", "wait", execution_id, "--timeout", "10") == {
        "execution_id": execution_id,
        "status": "completed",
        "ended": True,
        "result": {"value": 8},
    }
    listed = plaita_json("executions", "list", "--status", "completed")["items"]
    assert [item["execution_id"] for item in listed] == [execution_id]
    [found] = plaita_json("events", "list", "--correlation-id", execution_id)["items"]
    assert found["event_id"] == event["event_id"]


def test_the_dev_worker_is_in_the_worker_registry(dev: DevThread) -> None:
    [worker] = plaita_json("workers", "list")["items"]
    assert worker["status"] == "running"
    assert any(worker["instance_id"] in line for line in dev.lines)


def test_wait_prints_the_result_or_exits_with_the_outcome_code(dev: DevThread) -> None:
    code, out, _ = plaita("executions", "start", "calc", "--input", '{"n": 21}')
    assert code == 0
    assert plaita("executions", "wait", out.strip(), "--timeout", "10") == (
        0,
        '{"value": 42}\n',
        "",
    )

    failed_id = plaita("executions", "start", "refuse", "--input", '{"n": 1}')[1].strip()
    code, out, err = plaita("executions", "wait", failed_id, "--timeout", "10")
    assert (code, out) == (EXIT_FAILED, "")
    assert "failed at node 'work'" in err and "negative amounts are refused" in err
    view = json.loads(plaita("executions", "wait", failed_id, "--json")[1])
    assert view["status"] == "error" and view["error"]["node_id"] == "work"

    held = plaita("executions", "start", "hold", "--input", '{"n": 1}')[1].strip()
    code, _, err = plaita("executions", "wait", held, "--timeout", "0.3")
    assert code == EXIT_TIMED_OUT and "had not ended after 0.3 s" in err and "goes on" in err
    assert plaita("executions", "cancel", held)[0] == 0
    code, _, err = plaita("executions", "wait", held, "--timeout", "10")
    assert code == EXIT_CANCELLED and "was cancelled" in err

    code, _, err = plaita("executions", "wait", "no-such-execution", "--timeout", "0.1")
    assert code == EXIT_TIMED_OUT and "its start is still queued" in err


def test_a_schedule_created_through_the_socket_is_fired_by_the_dev_scheduler(
    dev: DevThread,
) -> None:
    """W22: plaita dev runs a scheduler; a per-second schedule starts an execution per due,
    each under its due's key, and the dev worker runs them."""
    code, out, err = plaita(
        "schedules", "create", "tick", "--flow", "calc", "--cron", "* * * * * *",
        "--input", '{"n": 4}',
    )  # fmt: skip
    assert code == 0, out + err
    waited = 0.0
    shown = plaita_json("schedules", "show", "tick")
    while shown["fired"] < 2 or shown["last_status"] != "completed":
        assert waited < START_TIMEOUT_SECONDS, shown
        threading.Event().wait(0.2)
        waited += 0.2
        shown = plaita_json("schedules", "show", "tick")
    assert plaita("executions", "wait", shown["last_execution_id"], "--timeout", "10") == (
        0,
        '{"value": 8}\n',
        "",
    )
    assert plaita("schedules", "pause", "tick")[0] == 0
    assert plaita("schedules", "delete", "tick")[0] == 0


def test_named_errors_come_back_as_they_are_raised(dev: DevThread) -> None:
    code, _, out = plaita("executions", "retry", "nope")
    assert code == 1 and "UnknownExecutionError" in out
    code, _, out = plaita("flows", "show", "nope")
    assert code == 1 and "UnknownFlowError" in out


def test_flows_register_over_the_socket_is_run_by_the_next_start(
    dev: DevThread, project: tuple[Path, str]
) -> None:
    path, module = project
    document = flow("calc", f"{module}:double", version="2")
    document["nodes"][1]["output"] = "$NODE['work']['value']"
    (path / "calc-v2.json").write_text(json.dumps(document))
    [registered] = plaita_json(
        "flows", "register", "calc-v2.json", "--shared", "--handler-modules", module
    )["items"]
    assert (registered["version"], registered["created"]) == ("2", True)
    code, out, _ = plaita("flows", "register", "calc-v2.json", "--shared")
    assert code == 0 and "already registered" in out

    started = plaita_json("executions", "start", "calc", "--input", '{"n": 5}')
    assert started["version"] == "2"
    assert plaita("executions", "wait", started["execution_id"], "--timeout", "10")[1] == "10\n"


def test_a_bulk_action_reports_its_progress_back_to_the_command(dev: DevThread) -> None:
    held = [plaita("executions", "start", "hold", "--input", '{"n": 1}')[1].strip() for _ in "ab"]
    for execution_id in held:
        plaita("executions", "wait", execution_id, "--timeout", "0.5")

    seen: list[Any] = []

    async def bulk() -> Any:
        from plaita.application.tenancy import tenant_scope

        with tenant_scope("default"):
            return await RemoteContainer(SOCKET_PATH).bulk_action()(
                OperatorAction.CANCEL, flow_id="hold", progress=seen.append
            )

    result = asyncio.run(bulk())
    assert sorted(result.matched) == sorted(held)
    assert [(report.done, report.total) for report in seen] == [(1, 2), (2, 2)]


def test_every_family_of_commands_works_against_the_dev_process(dev: DevThread) -> None:
    """Each provider a command asks for is one the control socket serves (CLI_PROVIDERS)."""
    held = plaita("executions", "start", "hold", "--input", '{"n": 1}')[1].strip()
    plaita("executions", "wait", held, "--timeout", "0.5")
    # Served, and refused by the dev process: a suspended execution waits for its event.
    code, _, err = plaita("executions", "resume", held)
    assert code == 1 and "publish the event it waits for" in err, err
    for args, says in [
        (("executions", "pause", held), "paused"),
        (("executions", "unpause", held), "unpaused"),
        (("executions", "history", held), "started"),
        (("executions", "bulk", "cancel", "--flow", "hold", "--dry-run"), "would cancel"),
        (("executions", "cancel", held), "cancel_requested"),
        (("executions", "history", held, "--follow", "--interval", "0.2"), "ended"),
        (("executions", "delete", held), "deleted"),
        (("flows", "show", "calc"), "fingerprint"),
        (("dlq", "list"), "the dead-letter queue is empty"),
        (("reap", "--dry-run"), "looked at"),
        (("recover",), "restored"),
        (("events", "list"), "no stored event matches"),
        (("workers", "list"), "running"),
        (("hooks", "list"), "no hook of tenant 'default'"),
        (("tenants", "suspend", "acme"), "suspended: tenant acme"),
        (("tenants", "quota", "acme", "--max-running", "2"), "quota_set"),
        (("tenants", "show", "acme"), "max running  2"),
        (("tenants", "list"), "acme"),
        (("tenants", "resume", "acme"), "resumed: tenant acme"),
    ]:
        code, out, err = plaita(*args)
        assert code == 0 and says in out, (args, out, err)
    code, _, err = plaita("executions", "retry", held)
    assert code == 1 and "UnknownExecutionError" in err  # deleted: gone for every command


# --- where a command goes --------------------------------------------------------------------


def test_a_flag_that_shapes_the_store_is_refused_not_ignored(dev: DevThread) -> None:
    code, _, out = plaita("executions", "list", "--partitions", "3")
    assert code == 2 and "--partitions" in out and "the dev process's own settings" in out
    code, _, out = plaita("dlq", "list", "--queue-name", "other")
    assert code == 2 and "--queue-name" in out


def test_dev_and_a_redis_url_on_the_command_line_are_refused_together(dev: DevThread) -> None:
    code, _, out = plaita("--dev", "executions", "list", "--redis-url", "redis://127.0.0.1:1/0")
    assert code == 2 and "give one" in out


def test_a_service_refuses_to_run_against_a_dev_process() -> None:
    code, _, out = plaita("--dev", "worker", "--redis-url", "redis://127.0.0.1:1/0")
    assert code == 2 and "plaita dev runs" in out


def test_without_a_url_or_a_dev_process_the_url_is_missing(project: tuple[Path, str]) -> None:
    code, _, out = plaita("executions", "list")
    assert code == 2 and "Missing option '--redis-url'" in out and "plaita dev" in out


def test_dev_without_a_running_dev_process_is_a_named_error(project: tuple[Path, str]) -> None:
    code, _, out = plaita("--dev", "executions", "list")
    assert code == 1 and "DevServerUnreachableError" in out and "start `plaita dev`" in out


def test_a_stale_socket_is_named_and_a_new_dev_process_takes_it_over(
    project: tuple[Path, str],
) -> None:
    SOCKET_PATH.parent.mkdir()
    with socket.socket(socket.AF_UNIX) as left_behind:
        left_behind.bind(str(SOCKET_PATH))  # bound, never listening: a dev process killed -9
    code, _, out = plaita("executions", "list")
    assert code == 1 and "DevServerUnreachableError" in out

    server = DevThread(*project)
    server.start()
    try:
        assert plaita_json("executions", "list")["items"] == []
    finally:
        server.stop()
    assert not SOCKET_PATH.exists()


def test_a_second_dev_process_in_the_directory_is_refused(dev: DevThread) -> None:
    async def second() -> None:
        container = build_container(Settings(backend="memory"))
        await ControlServer(container, about={}).start()

    with pytest.raises(DevServerRunningError, match="already serves"):
        asyncio.run(second())
    assert plaita_json("executions", "list")["items"] == []  # the first one still answers


def test_the_socket_is_reachable_by_its_user_only(dev: DevThread) -> None:
    assert SOCKET_PATH.parent.stat().st_mode & 0o777 == 0o700
    assert SOCKET_PATH.stat().st_mode & 0o777 == 0o600


def test_the_socket_of_a_dev_process_elsewhere_is_named_by_dev_socket(
    dev: DevThread, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    socket_path = (dev.project / SOCKET_PATH).resolve()
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    code, out, _ = plaita("--dev-socket", str(socket_path), "flows", "list")
    assert code == 0 and "calc  version 1" in out
    code, out, _ = plaita("flows", "list", env={"PLAITA_DEV_SOCKET": str(socket_path)})
    assert code == 0 and "calc  version 1" in out


# --- the protocol ----------------------------------------------------------------------------


def test_another_plaita_version_is_refused_before_any_value_is_read(dev: DevThread) -> None:
    async def hello(version: str) -> dict[str, Any]:
        reader, writer = await asyncio.open_unix_connection(str(SOCKET_PATH))
        try:
            await write_frame(writer, json.dumps({"protocol": 1, "version": version}).encode())
            answer: dict[str, Any] = json.loads(await read_frame(reader))
            return answer
        finally:
            writer.close()

    answer = asyncio.run(hello("0.0.0-other"))
    assert "0.0.0-other" in answer["refused"] and answer["pid"] == os.getpid()
    assert asyncio.run(hello(json.loads(hello_of())["version"]))["refused"] is None


def test_a_client_names_a_dev_process_that_refused_its_version(tmp_path: Path) -> None:
    async def refusing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_frame(reader)
        await write_frame(writer, json.dumps({"refused": "plaita 9.9 (protocol 99)"}).encode())
        writer.close()

    async def ask() -> None:
        path = tmp_path / "old.sock"
        server = await asyncio.start_unix_server(refusing, path=str(path))
        async with server:
            await RemoteContainer(path).hello()

    with pytest.raises(DevServerMismatchError, match=r"refused this command: plaita 9\.9"):
        asyncio.run(ask())


def test_only_plaita_classes_and_plain_values_are_read_back() -> None:
    assert loads(dumps({"a": [1, 2.5, None], "b": frozenset({"x"})})) == {
        "a": [1, 2.5, None],
        "b": frozenset({"x"}),
    }
    for refused in (os.system, check_redis_url, print, pickle.loads):
        with pytest.raises(pickle.UnpicklingError, match="plaita's own values only"):
            loads(pickle.dumps(refused))


def test_an_error_with_keyword_fields_keeps_them(dev: DevThread) -> None:
    failed_id = plaita("executions", "start", "refuse", "--input", '{"n": 1}')[1].strip()

    async def wait() -> Any:
        from plaita.application.tenancy import tenant_scope

        with tenant_scope("default"):
            return await RemoteContainer(SOCKET_PATH).await_result()(failed_id, timeout_s=10)

    with pytest.raises(ExecutionFailedError) as raised:
        asyncio.run(wait())
    assert raised.value.execution_id == failed_id
    assert raised.value.error is not None and raised.value.error.node_id == "work"


def test_a_provider_outside_the_cli_list_is_refused_by_name(dev: DevThread) -> None:
    async def ask() -> Any:
        return await RemoteContainer(SOCKET_PATH).queue().close()

    with pytest.raises(Exception, match="does not serve 'queue'"):
        asyncio.run(ask())


def test_a_command_that_stops_waiting_ends_its_call_in_the_dev_process(dev: DevThread) -> None:
    held = plaita("executions", "start", "hold", "--input", '{"n": 1}')[1].strip()

    async def wait_then_give_up() -> None:
        from plaita.application.tenancy import tenant_scope

        with tenant_scope("default"):
            waiting = asyncio.ensure_future(
                RemoteContainer(SOCKET_PATH).await_result()(held, timeout_s=None)
            )
            await asyncio.sleep(0.3)
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting

    asyncio.run(wait_then_give_up())

    async def open_calls() -> int:
        for _ in range(100):
            if not dev_server_connections(dev):
                return 0
            await asyncio.sleep(0.05)
        return dev_server_connections(dev)

    assert on_dev_loop(dev, open_calls) == 0


def dev_server_connections(dev: DevThread) -> int:
    """The calls the dev process's control socket is still answering."""
    return sum(
        1
        for task in asyncio.all_tasks(dev._loop)
        if task.get_coro().__qualname__.startswith("ControlServer._connection")  # type: ignore[union-attr]
    )


def test_nothing_answers_on_a_missing_socket(tmp_path: Path) -> None:
    with pytest.raises(DevServerUnreachableError, match="no plaita dev answers"):
        asyncio.run(RemoteContainer(tmp_path / "none.sock").hello())
