"""Standard-library helpers shared by ``run.py`` and the peer scripts.

The peer scripts run in the peers' own virtualenvs (no plaita there), so everything here
is standard library only: CPU time of a process tree read from ``/proc``, stopping a
process (and what it forked) by pid, bounded polls, and the one line a peer script prints
for ``run.py`` to read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

#: The Redis keys of the broker peers (their done lists) start with this.
PEER_KEY_PREFIX = "plaita_peer_bench"
#: Where the peer scripts live: the broker peers' workers run here.
HERE = Path(__file__).resolve().parent

#: The prefix of the one stdout line that carries a peer script's result as JSON.
RESULT_PREFIX = "PEER-RESULT "

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``samples`` (``fraction`` in [0, 1]); 0.0 if empty."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` split after the command name (which may hold spaces)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def descendants(root: int) -> list[int]:
    """Every live process whose ancestry leads to ``root`` (not ``root`` itself)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    frontier = [root]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found.extend(children)
        frontier.extend(children)
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of the live processes ``pids`` (``/proc``, all threads)."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            # Fields 14 and 15 of stat (utime, stime): indexes 11 and 12 after the name.
            total += int(fields[11]) + int(fields[12])
    return total / _TICKS


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and of its live descendants: a worker and its pool."""
    return cpu_seconds([root, *descendants(root)])


def server_cpu_seconds(root: int) -> float:
    """CPU seconds of a server (``root``) and its processes, those that already exited
    included: a reaped child's CPU is in its parent's cutime and cstime (fields 16, 17),
    so a PostgreSQL backend that ended with its connection still counts."""
    total = 0
    for pid in [root, *descendants(root)]:
        fields = _stat_fields(pid)
        if fields is not None:
            total += sum(int(value) for value in fields[11:15])
    return total / _TICKS


def stop_tree(process: subprocess.Popen[Any], *, grace: float = 15.0) -> None:
    """SIGTERM ``process``, wait ``grace`` s, then SIGKILL it; then every descendant that
    outlived it is killed by its pid (a pool child orphaned by a killed parent)."""
    children = descendants(process.pid) if process.poll() is None else []
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    for pid in children:
        if _stat_fields(pid) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def server_cpu_counter() -> Callable[[], float | None]:
    """Starts counting the CPU of the server whose pid ``run.py`` passes in
    ``PEER_SERVER_PID`` (Redis, or PostgreSQL's postmaster); the returned call says how
    much it used since, None without a server."""
    pid = int(os.environ.get("PEER_SERVER_PID") or 0)
    if pid <= 0:
        return lambda: None
    before = server_cpu_seconds(pid)
    return lambda: server_cpu_seconds(pid) - before


def wait_until(check: Callable[[], bool], *, timeout: float, interval: float = 0.02) -> bool:
    """Poll ``check`` until it is true or ``timeout`` seconds passed; whether it became true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


def emit(result: dict[str, Any]) -> None:
    """Print ``result`` as the peer script's one result line."""
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


def exit_on_sigterm() -> None:
    """Turn SIGTERM into ``SystemExit`` so ``finally`` blocks stop what this process started."""

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def measure_chains(
    worker: subprocess.Popen[Any],
    *,
    send_first: Callable[[str, int], None],
    done_times: Callable[[str], list[int]],
    executions: int,
    nodes: int,
    timeout: float,
) -> dict[str, Any]:
    """Throughput of a broker peer whose ``worker`` is already started.

    ``send_first(run, nodes)`` enqueues the first message of one execution of ``run``; each
    message enqueues the next and the last one appends its ``time.time_ns()`` to the run's
    done list, which ``done_times(run)`` reads. One warm-up execution of one message must
    come back first (the worker is up and consuming); then the clock starts, the
    ``executions`` first messages are sent, and the wall time runs to the latest done time.
    """
    warm = f"warm-{os.getpid()}-{time.time_ns()}"
    send_first(warm, 1)
    if not wait_until(lambda: len(done_times(warm)) >= 1, timeout=min(timeout, 90), interval=0.05):
        return {"problem": "the worker did not process a warm-up message within 90 s"}
    run = f"run-{os.getpid()}-{time.time_ns()}"
    cpu_before = tree_cpu_seconds(worker.pid)
    server = server_cpu_counter()
    started_ns = time.time_ns()
    for _ in range(executions):
        send_first(run, nodes)
    finished = wait_until(
        lambda: len(done_times(run)) >= executions or worker.poll() is not None,
        timeout=timeout,
        interval=0.02,
    )
    cpu = tree_cpu_seconds(worker.pid) - cpu_before
    server_cpu = server()
    times = done_times(run)
    wall = (max(times) - started_ns) / 1e9 if times else 0.0
    problem = None
    if worker.poll() is not None:
        problem = f"the worker exited with {worker.returncode}"
    elif not finished or len(times) < executions:
        problem = f"{len(times)}/{executions} executions done within {timeout} s"
    return {
        "executions": executions,
        "completed": len(times),
        "steps": len(times) * nodes,
        "wall_seconds": wall,
        "worker_cpu_seconds": cpu,
        "server_cpu_seconds": server_cpu,
        "problem": problem,
    }


def worker_log(name: str) -> Path:
    """Where a peer script sends its worker's output (the harness's temp dir if set)."""
    directory = Path(os.environ.get("PEER_LOG_DIR") or "/tmp")
    return directory / f"{name}-{os.getpid()}.log"


def done_key(run: str) -> str:
    """The Redis list a broker peer's last step appends its finish time to."""
    return f"{PEER_KEY_PREFIX}:{run}:done"


def done_times_of(client: Any, run: str) -> list[int]:
    """The finish times (``time.time_ns()``) a broker peer's run appended, on its Redis client."""
    return [int(value) for value in client.lrange(done_key(run), 0, -1)]


def unlink_peer_keys(client: Any) -> None:
    """Remove every key a broker peer wrote (its done lists) from its Redis."""
    for key in client.scan_iter(match=f"{PEER_KEY_PREFIX}:*"):
        client.unlink(key)


def chain_arguments(description: str, *, pool: str, pool_default: int) -> argparse.Namespace:
    """A broker peer's options: the workload (E executions x N steps), its worker pool's
    size (``--<pool>``) and the run's time limit."""
    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument(f"--{pool}", type=int, default=pool_default)
    parser.add_argument("--timeout", type=float, default=120.0)
    return parser.parse_args()


def run_broker_peer(
    *,
    name: str,
    command: list[str],
    env: dict[str, str],
    send_first: Callable[[str, int], None],
    done_times: Callable[[str], list[int]],
    cleanup: Callable[[], None],
    arguments: argparse.Namespace,
    version: str,
    topology: str,
) -> int:
    """Start a broker peer's worker (``command``, its output in a log), measure the chains
    (``measure_chains``), stop the worker by pid, ``cleanup`` the broker's keys, and print
    the result line (with the log's tail when something went wrong)."""
    exit_on_sigterm()
    log = worker_log(f"{name}-worker")
    with log.open("wb") as sink:
        worker = subprocess.Popen(command, cwd=HERE, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        result = measure_chains(
            worker,
            send_first=send_first,
            done_times=done_times,
            executions=arguments.executions,
            nodes=arguments.nodes,
            timeout=arguments.timeout,
        )
    finally:
        stop_tree(worker)
        cleanup()
    result["version"] = version
    result["topology"] = topology
    if result.get("problem"):
        result["log_tail"] = log.read_text(errors="replace")[-2000:]
    emit(result)
    return 0
