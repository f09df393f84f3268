"""`plaita dev` (C4, C9): one real process runs worker, event filter, timers and console."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAITA = [sys.executable, "-m", "plaita.entrypoints.cli"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(check: Any, what: str, timeout: float = 20.0) -> Any:
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


def test_dev_runs_an_approval_from_start_to_finish_over_its_console(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "dev.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*PLAITA, "dev", "--port", str(port)],
            cwd=REPO_ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith("PLAITA_")},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        banner = wait_for(lambda: re.search(r"token:\s+(\S+)", log.read_text()), "the dev banner")
        text = log.read_text()
        assert f"console: http://127.0.0.1:{port}/" in text and "approval v1" in text
        api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {banner.group(1)}"},
            timeout=5,
        )
        assert api.get("/healthz").json() == {"status": "ok"}
        # The examples are deployment-wide: every tenant's executions can run them.
        for tenant in ("default", "acme"):
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
        assert api.get("/", headers={}).status_code == 200  # the page is served
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text()


def test_dev_names_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*PLAITA, "dev", "--port", str(port)],
            cwd=REPO_ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith("PLAITA_")},
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 1
    assert f"127.0.0.1:{port}" in done.stderr and "--port" in done.stderr
