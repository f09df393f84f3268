"""The DBOS Transact peers: workflows of N no-op ``@DBOS.step`` steps, and send → recv.

Run by ``run.py`` in the DBOS virtualenv, one process per measurement, with the system
database on SQLite (a fresh file) or on PostgreSQL (a fresh database on the harness's
server). The process is DBOS's worker: workflows run in its executor threads, started with
``DBOS.start_workflow`` from the main thread of the same process.

- ``throughput``: start E workflows of N no-op steps; every step's completion is a row
  committed to the system database before the next step runs (DBOS's checkpoint), the
  workflow's start and end are its status row. The wall time runs from the first
  ``start_workflow`` call to the latest workflow's finish, taken as its last statement.
- ``events``: start W + E workflows that each ``DBOS.recv`` a message then run one step;
  once all are in ``recv``, send one message per workflow with ``DBOS.send`` from the main
  thread, open loop at ``--rate``; per workflow, send call → ``recv`` returned, and send
  call → the next step started (the first W are left out).

Prints one ``PEER-RESULT`` JSON line.
"""

from __future__ import annotations

import argparse
import resource
import sys
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import common  # noqa: E402

TOPIC = "go"
_waiting = 0
_waiting_lock = threading.Lock()


@DBOS.step()
def noop() -> None:
    """A no-op step: what is measured is DBOS's checkpoint of its (empty) output."""
    return None


@DBOS.workflow()
def chain(nodes: int) -> int:
    """N no-op steps in a row; returns when it finished (ns of the wall clock)."""
    for _ in range(nodes):
        noop()
    return time.time_ns()


@DBOS.step()
def resumed() -> int:
    """The step after the wait: when it started."""
    return time.time_ns()


@DBOS.workflow()
def waiter(timeout: float) -> list[int]:
    """Wait for one message, then run one step; returns [recv returned, step started]."""
    global _waiting
    with _waiting_lock:
        _waiting += 1
    DBOS.recv(TOPIC, timeout_seconds=timeout)
    received = time.time_ns()
    return [received, resumed()]


def cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    cpu_before = cpu_self()
    server = common.server_cpu_counter()
    started_ns = time.time_ns()
    handles = [DBOS.start_workflow(chain, args.nodes) for _ in range(args.executions)]
    deadline = time.monotonic() + args.timeout
    finished: list[int] = []
    for handle in handles:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        finished.append(handle.get_result(polling_interval_sec=0.05))
    cpu = cpu_self() - cpu_before
    server_cpu = server()
    problem = None
    if len(finished) < args.executions:
        problem = f"{len(finished)}/{args.executions} workflows done within {args.timeout} s"
    return {
        "executions": args.executions,
        "completed": len(finished),
        "steps": len(finished) * args.nodes,
        "wall_seconds": (max(finished) - started_ns) / 1e9 if finished else 0.0,
        "worker_cpu_seconds": cpu,
        "server_cpu_seconds": server_cpu,
        "problem": problem,
    }


def events(args: argparse.Namespace) -> dict[str, Any]:
    total = args.warmup + args.events
    handles = [DBOS.start_workflow(waiter, args.timeout) for _ in range(total)]
    if not common.wait_until(lambda: _waiting >= total, timeout=min(args.timeout, 60)):
        return {"problem": f"only {_waiting}/{total} workflows reached recv within 60 s"}
    # Each counted itself just before calling recv: let the last ones get into it.
    time.sleep(0.5)
    sent_ns: list[int] = []
    began = time.monotonic()
    for index, handle in enumerate(handles):
        if args.rate > 0:
            time.sleep(max(0.0, began + index / args.rate - time.monotonic()))
        sent_ns.append(time.time_ns())
        DBOS.send(handle.get_workflow_id(), index, TOPIC)
    publish_seconds = time.monotonic() - began
    deadline = time.monotonic() + args.timeout
    received: list[float] = []
    started: list[float] = []
    for index, handle in enumerate(handles):
        if time.monotonic() > deadline:
            break
        got_ns, step_ns = handle.get_result(polling_interval_sec=0.05)
        if index >= args.warmup:
            received.append((got_ns - sent_ns[index]) / 1e6)
            started.append((step_ns - sent_ns[index]) / 1e6)
    problem = None
    if len(received) < args.events:
        problem = f"{len(received)}/{args.events} messages received within {args.timeout} s"
    return {
        "events": args.events,
        "measured": len(received),
        "publish_seconds": publish_seconds,
        "recv_ms": received,
        "step_ms": started,
        "problem": problem,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("mode", choices=["throughput", "events"])
    parser.add_argument("--database-url", required=True, help="the system database")
    parser.add_argument("--executions", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rate", type=float, default=100.0, help="messages/s (0: at once)")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    common.exit_on_sigterm()
    config: DBOSConfig = {
        "name": "plaita_peer_bench",
        "system_database_url": args.database_url,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    # Migrations of a fresh system database run here, before any clock starts.
    DBOS.launch()
    try:
        result = throughput(args) if args.mode == "throughput" else events(args)
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=0)
    result["version"] = metadata.version("dbos")
    result["topology"] = "1 process, DBOS executor threads (unbounded pool)"
    common.emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
