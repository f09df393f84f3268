"""`plaita dev` as a dev server (C4, C9; ADR 0021): real processes, from a project directory.

Each test starts ``plaita dev`` as a process in a temporary directory and stops it by its
pid; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAITA = [sys.executable, "-m", "plaita.entrypoints.cli"]
#: A CLI process starts in a few seconds on a loaded machine; nothing here waits longer.
COMMAND_TIMEOUT_SECONDS = 60

TASKS = """
from plaita import DeterministicNodeError

def double(params, ctx):
    return {"value": params["n"] * 2}

def refuse(params, ctx):
    raise DeterministicNodeError("negative amounts are refused")
"""


def calc(version: str, output: str) -> str:
    return json.dumps(
        {
            "flow_id": "calc",
            "version": version,
            "start": "work",
            "nodes": [
                {
                    "id": "work",
                    "type": "task",
                    "handler": "app.tasks:double",
                    "params": {"n": "${n}"},
                    "next": "end",
                },
                {"id": "end", "type": "end", "output": output},
            ],
        }
    )


REFUSE = json.dumps(
    {
        "flow_id": "refuse",
        "start": "work",
        "nodes": [
            {"id": "work", "type": "task", "handler": "app.tasks:refuse", "next": "end"},
            {"id": "end", "type": "end"},
        ],
    }
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PLAITA_")}, **extra}


def wait_for(check: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {timeout} s; last seen {last!r}")


def publish_decision(api: httpx.Client, execution_id: str, *, approved: bool = True) -> None:
    published = api.post(
        "/api/v1/events",
        json={
            "event_type": "approval_decision",
            "correlation_id": execution_id,
            "data": {"approved": approved},
        },
    )
    assert published.status_code == 201, published.text


class DevProcess:
    """One ``plaita dev`` process, its log, and the CLI run in its directory."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.cwd = cwd
        self.log = cwd / f"dev-{time.monotonic_ns()}.log"
        self.port = free_port()
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [*PLAITA, "dev", "--port", str(self.port), *args],
                cwd=cwd,
                env=env or clean_env(),
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    def text(self) -> str:
        return self.log.read_text()

    def started(self) -> str:
        return str(
            wait_for(
                lambda: "stop:" in self.text() or self.process.poll() is not None,
                "the dev banner",
            )
            and self.text()
        )

    def api(self, token: str | None = None) -> httpx.Client:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", headers=headers, timeout=5)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*PLAITA, *args],
            cwd=self.cwd,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
        )

    def cli_json(self, *args: str) -> Any:
        done = self.cli(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            raise


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project: flows/ with two flow files, and app/tasks.py with their handlers."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "tasks.py").write_text(TASKS)
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "calc.json").write_text(calc("1", "$NODE['work']"))
    (tmp_path / "flows" / "refuse.json").write_text(REFUSE)
    return tmp_path


@pytest.fixture
def dev(project: Path) -> Iterator[DevProcess]:
    process = DevProcess(project)
    try:
        yield process
    finally:
        code = process.stop()
        assert code == 0, process.text()
        assert "Traceback" not in process.text(), process.text()
        assert not (project / ".plaita" / "dev.sock").exists()


def test_dev_serves_a_project_directory_and_picks_up_an_edited_flow(dev: DevProcess) -> None:
    banner = dev.started()
    assert "calc v1, refuse v1" in banner and "app.tasks" in banner, banner
    assert "no token needed" in banner

    # The CLI, run in the project directory, reaches this process through its socket.
    started = dev.cli_json("executions", "start", "calc", "--input", '{"n": 21}')
    assert started["version"] == "1"
    assert dev.cli_json("executions", "wait", started["execution_id"], "--timeout", "30") == {
        "execution_id": started["execution_id"],
        "status": "completed",
        "ended": True,
        "result": {"value": 42},
    }
    failed = dev.cli_json("executions", "start", "refuse")
    refused = dev.cli("executions", "wait", failed["execution_id"], "--timeout", "30")
    assert refused.returncode == 3 and "negative amounts are refused" in refused.stderr

    # A new version in the file registers and becomes the latest.
    (dev.cwd / "flows" / "calc.json").write_text(calc("2", "$NODE['work']['value']"))
    wait_for(lambda: "registered calc v2" in dev.text(), "the reload of calc.json")
    again = dev.cli_json("executions", "start", "calc", "--input", '{"n": 5}', "--priority", "high")
    assert again["version"] == "2"
    done = dev.cli("executions", "wait", again["execution_id"], "--timeout", "30")
    assert (done.returncode, done.stdout) == (0, "10\n")
    # The start option crosses the socket: the history records the high start.
    history = dev.cli("executions", "history", again["execution_id"], "--json")
    assert '"priority":"high"' in history.stdout.replace(" ", ""), history.stdout

    # An edit under a registered version is refused by name; the stored one stays.
    (dev.cwd / "flows" / "calc.json").write_text(calc("2", "'edited'"))
    line = wait_for(
        lambda: next(
            (ln for ln in dev.text().splitlines() if "FlowVersionConflictError" in ln), None
        ),
        "the refusal of the edit",
    )
    assert "calc.json" in line and 'bump "version"' in line
    [listed] = [f for f in dev.cli_json("flows", "list")["items"] if f["flow_id"] == "calc"]
    assert listed["version"] == "2"


def test_dev_shows_its_own_worker_and_needs_no_token_on_loopback(dev: DevProcess) -> None:
    banner = dev.started()
    instance = re.search(r"worker:\s+(\S+)", banner)
    assert instance, banner
    api = dev.api()  # no token at all
    assert api.get("/healthz").json() == {"status": "ok"}
    workers = api.get("/api/v1/workers")
    assert workers.status_code == 200, workers.text
    assert [(w["instance_id"], w["status"]) for w in workers.json()["items"]] == [
        (instance.group(1), "running")
    ]
    started = api.post("/api/v1/executions", json={"flow_id": "calc", "input": {"n": 1}})
    assert started.status_code == 201, started.text
    assert dev.api("not-a-token-of-this-console").get("/api/v1/workers").status_code == 401


def test_dev_runs_the_examples_from_any_directory_over_its_console(tmp_path: Path) -> None:
    process = DevProcess(
        tmp_path,
        "--flows",
        str(REPO_ROOT / "examples" / "flows"),
        env=clean_env(PYTHONPATH=str(REPO_ROOT)),
    )
    try:
        banner = process.started()
        assert "approval v1" in banner and "examples.handlers" in banner, banner
        api = process.api()
        for tenant in ("default", "acme"):  # deployment-wide: every tenant runs them
            flows = api.get("/api/v1/flows", params={"tenant": tenant}).json()["items"]
            assert {(f["flow_id"], f["shared"]) for f in flows} >= {("approval", True)}
        started = api.post(
            "/api/v1/executions", json={"flow_id": "approval", "input": {"amount": 5000}}
        )
        assert started.status_code == 201, started.text
        execution_id = started.json()["execution_id"]

        def status() -> str:
            return str(api.get(f"/api/v1/executions/{execution_id}").json()["status"])

        wait_for(lambda: status() == "suspended", "the wait for the decision")
        publish_decision(api, execution_id)
        wait_for(lambda: status() == "completed", "completion after the decision")
        assert api.get("/").status_code == 200  # the page is served
    finally:
        assert process.stop() == 0, process.text()
    assert "Traceback" not in process.text()


def test_dev_says_when_it_finds_no_flows(tmp_path: Path) -> None:
    process = DevProcess(tmp_path)
    try:
        banner = process.started()
        assert f"no folder flows/ in {tmp_path}" in banner, banner
        assert "handlers: none" in banner
        # A folder that appears later is read as any other.
        (tmp_path / "flows").mkdir()
        (tmp_path / "flows" / "end.json").write_text(
            json.dumps({"flow_id": "end", "start": "e", "nodes": [{"id": "e", "type": "end"}]})
        )
        wait_for(lambda: "registered end v1" in process.text(), "the new folder's flow")
    finally:
        assert process.stop() == 0, process.text()


def test_dev_beyond_loopback_requires_a_token(tmp_path: Path) -> None:
    refused = subprocess.run(
        [*PLAITA, "dev", "--host", "0.0.0.0", "--port", str(free_port())],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
    )
    assert refused.returncode == 2, refused.stderr
    assert "DevTokenRequiredError" in refused.stderr and "--token" in refused.stderr
    assert "Traceback" not in refused.stderr

    token = "a-dev-token-for-the-lan-0123"
    process = DevProcess(tmp_path, "--host", "0.0.0.0", env=clean_env(PLAITA_DEV_TOKEN=token))
    try:
        banner = process.started()
        assert "token required" in banner and token not in banner, banner
        missing = process.api().get("/api/v1/workers")
        assert missing.status_code == 401 and missing.json()["error"] == "MissingTokenError"
        assert process.api(token).get("/api/v1/workers").status_code == 200
    finally:
        assert process.stop() == 0, process.text()


def test_dev_names_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*PLAITA, "dev", "--port", str(port)],
            cwd=tmp_path,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
        )
    assert done.returncode == 1
    assert f"127.0.0.1:{port}" in done.stderr and "--port" in done.stderr
    assert "Traceback" not in done.stderr
