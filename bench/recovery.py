"""Recovery after ``kill -9`` with the default settings (P6): how long a killed worker's
executions wait before another worker runs them again.

One run: in a fresh namespace on a real Redis, two ``plaita worker`` processes with nothing
but the namespace, a flows directory and a handler module given (every timing is the
default: claim idle, lease TTL, heartbeats). K executions of a flow whose one task sleeps
``--hold`` seconds start; the handler records, in Redis, each start with its worker's pid
and a wall-clock time. Once every execution runs, the worker running the most of them gets
``SIGKILL``. For each of its executions the recovery time is from the kill to the handler's
next start on the other worker; every execution must then complete. Both processes are
stopped by pid at the end, whatever happened, and the namespace is deleted.

    .venv/bin/python bench/recovery.py                      # 3 runs of 4 executions
    .venv/bin/python bench/recovery.py --runs 1 --executions 2 --hold 8   # the smoke test's

Performance is measured here, never in timed unit tests (the P requirements).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import redis

REPO_ROOT = Path(__file__).resolve().parents[1]
HANDLER_MODULE = "plaita_bench_recovery"

HANDLER_SOURCE = '''
"""The recovery bench's handler: records each start (pid, time) in Redis, then sleeps."""

import asyncio
import os
import time

import redis.asyncio as redis

_client = None


async def hold(params, ctx):
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["PLAITA_REDIS_URL"])
    key = f"{os.environ['PLAITA_NAMESPACE']}:bench:starts:{ctx.execution_id}"
    await _client.rpush(key, f"{os.getpid()}:{time.time()}")
    await asyncio.sleep(float(params.get("hold", 3)))
    return {"pid": os.getpid()}
'''


def flow_document(hold: float) -> dict[str, Any]:
    return {
        "flow_id": "bench_recovery",
        "version": "1",
        "start": "work",
        "nodes": [
            {
                "id": "work",
                "type": "task",
                "handler": f"{HANDLER_MODULE}:hold",
                "params": {"hold": hold},
                "next": "done",
            },
            {"id": "done", "type": "end"},
        ],
    }


def plaita() -> list[str]:
    return [str(Path(sys.executable).with_name("plaita"))]


class Run:
    """One namespace, its two workers and their logs; ``close`` stops them by pid."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.namespace = f"bench-recovery-{uuid.uuid4().hex[:8]}"
        self.workdir = workdir
        self.env = {
            **os.environ,
            "PLAITA_REDIS_URL": args.redis_url,
            "PLAITA_NAMESPACE": self.namespace,
            "PYTHONPATH": f"{workdir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        self.client = redis.Redis.from_url(args.redis_url, decode_responses=True)
        self.workers: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [
                    *plaita(),
                    "--log-level",
                    "INFO",
                    "worker",
                    "--flows",
                    str(self.workdir / "flows"),
                    "--handler-modules",
                    HANDLER_MODULE,
                ],
                cwd=REPO_ROOT,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.workers.append((process, log))
        return process

    def wait_started(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            logs = [log.read_text(errors="replace") for _, log in self.workers]
            if all("worker.started" in text for text in logs):
                return
            if any(process.poll() is not None for process, _ in self.workers):
                break
            time.sleep(0.1)
        raise RuntimeError(f"the workers did not start:\n{self.logs()}")

    def start_executions(self, count: int) -> list[str]:
        ids = []
        for _ in range(count):
            done = subprocess.run(
                [*plaita(), "executions", "start", "bench_recovery", "--input", "{}", "--json"],
                cwd=REPO_ROOT,
                env=self.env,
                capture_output=True,
                timeout=30,
                check=True,
            )
            ids.append(json.loads(done.stdout)["execution_id"])
        return ids

    def starts(self, execution_id: str) -> list[tuple[int, float]]:
        raw = self.client.lrange(f"{self.namespace}:bench:starts:{execution_id}", 0, -1)
        found = []
        for entry in raw:  # type: ignore[union-attr]
            pid, _, at = str(entry).partition(":")
            found.append((int(pid), float(at)))
        return found

    def status(self, execution_id: str) -> str | None:
        done = subprocess.run(
            [*plaita(), "executions", "show", execution_id, "--json"],
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            timeout=30,
            check=False,
        )
        return json.loads(done.stdout)["status"] if done.returncode == 0 else None

    def logs(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-20000:]}" for _, log in self.workers
        )

    def close(self) -> None:
        for process, _ in self.workers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, _ in self.workers:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        keys = list(self.client.scan_iter(match=f"{self.namespace}:*", count=1000))
        for first in range(0, len(keys), 500):
            self.client.unlink(*keys[first : first + 500])
        self.client.close()


def poll(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


def one_run(args: argparse.Namespace) -> list[float]:
    """The recovery times (s) of the killed worker's executions in one run."""
    with tempfile.TemporaryDirectory(prefix="plaita-recovery-") as tmp:
        workdir = Path(tmp)
        (workdir / "flows").mkdir()
        (workdir / "flows" / "bench_recovery.json").write_text(
            json.dumps(flow_document(args.hold)), encoding="utf-8"
        )
        (workdir / f"{HANDLER_MODULE}.py").write_text(
            textwrap.dedent(HANDLER_SOURCE), encoding="utf-8"
        )
        run = Run(args, workdir)
        try:
            first, second = run.start_worker("first"), run.start_worker("second")
            run.wait_started()
            ids = run.start_executions(args.executions)
            poll(lambda: all(run.starts(i) for i in ids), 30, "every execution to start")
            by_pid: dict[int, list[str]] = {}
            for execution_id in ids:
                by_pid.setdefault(run.starts(execution_id)[0][0], []).append(execution_id)
            victim = max((first, second), key=lambda p: len(by_pid.get(p.pid, [])))
            doomed = by_pid.get(victim.pid, [])
            killed_at = time.time()
            if any(at + args.hold <= killed_at for i in doomed for _, at in run.starts(i)[:1]):
                raise RuntimeError("an execution ended before the kill: raise --hold")
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait(timeout=10)
            poll(
                lambda: all(len(run.starts(i)) >= 2 for i in doomed),
                args.timeout,
                "the killed worker's executions to run again",
            )
            times = [run.starts(i)[1][1] - killed_at for i in doomed]
            poll(
                lambda: all(run.status(i) == "completed" for i in ids),
                args.timeout,
                "every execution to complete",
            )
            return times
        except Exception:
            print(run.logs(), file=sys.stderr)
            raise
        finally:
            run.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--executions", type=int, default=4)
    parser.add_argument(
        "--hold",
        type=float,
        default=20.0,
        help="seconds the task sleeps: longer than starting every execution (a CLI call each)",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per wait")
    args = parser.parse_args(argv)
    if not 1 <= args.executions <= 100:
        parser.error("--executions must be between 1 and 100")
    if not 0 < args.hold <= 60:
        parser.error("--hold must be in (0, 60] seconds")
    if not 1 <= args.runs <= 20:
        parser.error("--runs must be between 1 and 20")
    if not 0 < args.timeout <= 900:
        parser.error("--timeout must be in (0, 900] seconds")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    times: list[float] = []
    for number in range(1, args.runs + 1):
        measured = one_run(args)
        print(f"run {number}: " + ", ".join(f"{t:.2f} s" for t in measured))
        times += measured
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(
        f"\nplaita recovery after kill -9 — python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {load}, default settings\n"
    )
    print("| runs | executions recovered | median s | max s |")
    print("| ---: | ---: | ---: | ---: |")
    if times:
        print(f"| {args.runs} | {len(times)} | {statistics.median(times):.2f} | {max(times):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
