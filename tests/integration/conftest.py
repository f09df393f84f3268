"""Real processes against a real Redis: helpers that start, poll and always stop them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")

requires_redis = pytest.mark.skipif(
    not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"
)


def plaita_command() -> list[str]:
    script = Path(sys.executable).with_name("plaita")
    return [str(script)] if script.exists() else [sys.executable, "-m", "plaita.entrypoints.cli"]


class Plaita:
    """Runs ``plaita`` commands in one isolated namespace and owns the processes it starts."""

    def __init__(self, redis_url: str, namespace: str, log_dir: Path) -> None:
        self.redis_url = redis_url
        self.env = {**os.environ, "PLAITA_REDIS_URL": redis_url, "PLAITA_NAMESPACE": namespace}
        self.log_dir = log_dir
        self.processes: list[tuple[subprocess.Popen[bytes], Path]] = []

    def run(
        self, *args: str, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*plaita_command(), *args],
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"plaita {' '.join(args)} failed ({done.returncode}): {done.stderr}"
            )
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)

    def spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{name}-{len(self.processes)}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [*plaita_command(), "--log-level", "INFO", *args],
                cwd=REPO_ROOT,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.processes.append((process, log))
        return process

    def wait_for_status(self, execution_id: str, statuses: set[str], timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            done = self.run("executions", "show", execution_id, "--json", check=False)
            if done.returncode == 0:
                last = json.loads(done.stdout)
                if last["status"] in statuses:
                    return last
            time.sleep(0.2)
        raise AssertionError(
            f"execution {execution_id} never reached {statuses}; last seen {last}\n{self.logs()}"
        )

    def stop(self, process: subprocess.Popen[bytes], timeout: float = 15) -> int:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        return process.returncode

    def stop_all(self) -> None:
        for process, _ in self.processes:
            self.stop(process)

    def logs(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}"
            for _, log in self.processes
        )


@pytest.fixture
def plaita(tmp_path: Path) -> Iterator[Plaita]:
    assert REDIS_URL is not None
    runner = Plaita(REDIS_URL, f"plaita-it-{uuid.uuid4().hex[:12]}", tmp_path)
    try:
        yield runner
    finally:
        runner.stop_all()
