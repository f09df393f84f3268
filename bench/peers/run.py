"""plaita side by side with its peers: Dramatiq, Celery, DBOS on SQLite and PostgreSQL.

One command, run with the repository's virtualenv from anywhere::

    .venv/bin/python bench/peers/run.py                 # 5 rounds, 200 x 10, 300 events
    .venv/bin/python bench/peers/run.py --smoke --no-write --peers dramatiq

It builds each peer's virtualenv (cached under ``bench/peers/.venvs/``, rebuilt when its
requirements file changes), starts its own Redis (AOF, fsync every second) and, when a
DBOS-PostgreSQL peer is asked for, its own PostgreSQL on free loopback ports, then runs
``--rounds`` interleaved rounds. A round measures, one after another: plaita
(``bench/worker_throughput.py --json``, one worker process, then two), each peer's
equivalent of E executions of N no-op durable steps in one worker process, plaita's event
latency (``bench/event_latency.py --json``) and DBOS's send → recv on PostgreSQL. The load
average is read before each run; ratios are taken within a round and their medians across
rounds. Last, Redis memory per suspended and per completed plaita execution
(``plaita_memory.py``). The report is printed and, unless ``--no-write``, written to
``bench/RESULTS.md`` between the ``peers`` markers. Every run is bounded by ``--timeout``;
every process and server started is stopped by its pid, also on an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import common  # noqa: E402

RESULTS_FILE = REPO_ROOT / "bench" / "RESULTS.md"
SECTION_HEADING = "# Side by side with the peers"
BEGIN_MARKER = "<!-- peers:begin -->"
END_MARKER = "<!-- peers:end -->"

PEERS = ("dramatiq", "celery", "dbos-sqlite", "dbos-pg")
#: Which virtualenv (and requirements file) each peer runs in.
VENV_OF = {"dramatiq": "dramatiq", "celery": "celery", "dbos-sqlite": "dbos", "dbos-pg": "dbos"}
#: The packages whose versions the report names, per virtualenv.
REPORTED_PACKAGES = {
    "dramatiq": ("dramatiq", "redis"),
    "celery": ("celery", "kombu", "redis"),
    "dbos": ("dbos", "sqlalchemy", "psycopg"),
}
#: Redis databases of the one server: plaita, Dramatiq and Celery never share keys.
PLAITA_DB, DRAMATIQ_DB, CELERY_DB = 1, 2, 3

#: The performance targets (P1, P4, P5), checked on the medians.
TARGET_DRAMATIQ, TARGET_DBOS_PG, TARGET_SCALING = 3.0, 15.0, 1.6
TARGET_EVENT_RATIO, TARGET_SUSPENDED_BYTES = 0.5, 1.5 * 1024


# --- servers -----------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on loopback right now (the server binds it moments later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop_pid(process: subprocess.Popen[Any], first: int, *, grace: float) -> None:
    """Signal ``process`` with ``first``, wait ``grace`` s, then SIGKILL it."""
    if process.poll() is not None:
        return
    process.send_signal(first)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


class RedisServer:
    """A private redis-server on loopback: AOF on, fsync every second, no RDB snapshots."""

    CONFIG = "appendonly yes, appendfsync everysec, save '' (no RDB), bind 127.0.0.1"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not on PATH (apt-get install redis-server)")
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--logfile",
                str(self.directory / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not common.wait_until(self._answers, timeout=20, interval=0.05):
            raise RuntimeError(f"redis-server on port {self.port} did not answer within 20 s")

    def _answers(self) -> bool:
        return self.command("PING") == "+PONG"

    def command(self, *words: str) -> str:
        """One inline command over a raw socket; the reply's first line ('' if none)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as conn:
                conn.sendall((" ".join(words) + "\r\n").encode())
                return conn.recv(65536).decode(errors="replace").split("\r\n")[0]
        except OSError:
            return ""

    def info(self, section: str) -> dict[str, str]:
        """``INFO section`` as a dict: one bulk string reply, read to its announced length."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as conn:
            conn.sendall(f"INFO {section}\r\n".encode())
            raw = b""
            while b"\r\n" not in raw:
                chunk = conn.recv(65536)
                if not chunk:
                    return {}
                raw += chunk
            header, body = raw.split(b"\r\n", 1)
            length = int(header[1:])
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
        lines = body[:length].decode(errors="replace").split("\r\n")
        return dict(line.split(":", 1) for line in lines if ":" in line)

    def url(self, database: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.process is not None:
            stop_pid(self.process, signal.SIGTERM, grace=15)


def postgres_bin() -> Path:
    """The newest ``/usr/lib/postgresql/*/bin`` with initdb and postgres."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    for directory in reversed(found):
        if (directory / "initdb").exists() and (directory / "postgres").exists():
            return directory
    raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")


class PostgresServer:
    """A private PostgreSQL on loopback in a fresh data directory, default durability."""

    CONFIG = "default postgresql.conf: fsync on, synchronous_commit on, listen 127.0.0.1"

    def __init__(self) -> None:
        # Its own top directory (not under the harness's root-only temp dir): as root the
        # server runs as the postgres user, which must own and reach it.
        self.root = Path(tempfile.mkdtemp(prefix="plaita-peers-pg-"))
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.bin = postgres_bin()
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            shutil.chown(self.root, user=self.user)

    def start(self) -> None:
        data = self.root / "data"
        with (self.root / "initdb.log").open("wb") as log:
            subprocess.run(
                [str(self.bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
                user=self.user,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=120,
            )
        with (self.root / "server.log").open("wb") as log:
            self.process = subprocess.Popen(
                [
                    str(self.bin / "postgres"),
                    "-D",
                    str(data),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.root),
                    "-c",
                    "listen_addresses=127.0.0.1",
                ],
                user=self.user,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if not common.wait_until(self._ready, timeout=30, interval=0.1):
            tail = (self.root / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"PostgreSQL on port {self.port} not ready within 30 s:\n{tail}")

    def _ready(self) -> bool:
        probe = subprocess.run(
            [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
            check=False,
            timeout=10,
        )
        return probe.returncode == 0

    def version(self) -> str:
        out = subprocess.run(
            [str(self.bin / "postgres"), "--version"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
        return out.stdout.strip().replace("postgres (PostgreSQL) ", "")

    def database_url(self, name: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.process is not None:
            # SIGINT is PostgreSQL's fast shutdown.
            stop_pid(self.process, signal.SIGINT, grace=30)
        shutil.rmtree(self.root, ignore_errors=True)


# --- virtualenvs -------------------------------------------------------------------------


def venv_python(venvs: Path, name: str, log_dir: Path) -> Path:
    """The peer virtualenv's python, built (or rebuilt) when its requirements changed."""
    requirements = HERE / "requirements" / f"{name}.txt"
    stamp_text = hashlib.sha256(
        requirements.read_bytes() + platform.python_version().encode()
    ).hexdigest()
    target = venvs / name
    python = target / "bin" / "python"
    stamp = target / ".requirements.sha256"
    if python.exists() and stamp.exists() and stamp.read_text() == stamp_text:
        return python
    print(f"building the {name} virtualenv in {target} (pip, once) ...", file=sys.stderr)
    shutil.rmtree(target, ignore_errors=True)
    venvs.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"pip-{name}.log"
    with log.open("wb") as sink:
        for command in (
            [sys.executable, "-m", "venv", str(target)],
            [str(python), "-m", "pip", "install", "-q", "-r", str(requirements)],
        ):
            done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, timeout=900)
            if done.returncode != 0:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"building the {name} virtualenv failed:\n{tail}")
    stamp.write_text(stamp_text)
    return python


def package_versions(python: Path, packages: tuple[str, ...]) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, sys; "
        "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))"
    )
    out = subprocess.run(
        [str(python), "-c", code, *packages], capture_output=True, text=True, timeout=60
    )
    return dict(json.loads(out.stdout)) if out.returncode == 0 else {}


# --- one bounded run ---------------------------------------------------------------------


def run_json(
    command: list[str], *, timeout: float, log_dir: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``command`` (bounded by ``timeout``, stopped by pid) and parse its JSON result:
    the ``PEER-RESULT`` line, else the last stdout line that is a JSON object."""
    out_path = log_dir / f"run-{uuid.uuid4().hex[:8]}.out"
    with out_path.open("wb") as out, (log_dir / "runs.err").open("ab") as err:
        err.write(("\n$ " + " ".join(command) + "\n").encode())
        err.flush()
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env or dict(os.environ), stdout=out, stderr=err
        )
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            # SIGTERM lets a peer script stop its own worker; SIGKILL after 20 s.
            common.stop_tree(process, grace=20)
    lines = out_path.read_text(errors="replace").splitlines()
    for line in reversed(lines):
        text = line.removeprefix(common.RESULT_PREFIX)
        if text.startswith("{"):
            with contextlib.suppress(ValueError):
                return dict(json.loads(text))
    tail = (log_dir / "runs.err").read_text(errors="replace")[-1500:]
    return {"problem": f"no result (exit {process.returncode}); stderr tail: {tail}"}


# --- measurements ------------------------------------------------------------------------


@dataclass
class Throughput:
    system: str
    round: int
    load: float
    steps: int = 0
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    #: CPU of the Redis or PostgreSQL server over the measured window; None for
    #: DBOS-SQLite (in process).
    server_cpu_seconds: float | None = None
    problem: str | None = None

    @property
    def steps_per_second(self) -> float:
        ok = self.problem is None and self.wall_seconds > 0
        return self.steps / self.wall_seconds if ok else 0.0


@dataclass
class Latency:
    system: str
    round: int
    load: float
    p50: float = 0.0
    p99: float = 0.0
    #: Where the time goes: plaita's two legs; DBOS's send → the step after recv started.
    detail: str = ""
    measured: int = 0
    problem: str | None = None


@dataclass
class Context:
    args: argparse.Namespace
    redis: RedisServer
    postgres: PostgresServer | None
    pythons: dict[str, Path]
    log_dir: Path
    tmp: Path
    throughput: list[Throughput] = field(default_factory=list)
    latency: list[Latency] = field(default_factory=list)
    memory: dict[str, Any] | None = None

    def measurements(self) -> list[Throughput | Latency]:
        return [*self.throughput, *self.latency]


def load_now() -> float:
    return os.getloadavg()[0]


def plaita_throughput(ctx: Context, round_: int, workers: int) -> Throughput:
    args = ctx.args
    system = "plaita" if workers == 1 else f"plaita-{workers}w"
    measured = Throughput(system, round_, load_now())
    found = run_json(
        [
            sys.executable,
            str(REPO_ROOT / "bench" / "worker_throughput.py"),
            "--redis-url",
            ctx.redis.url(PLAITA_DB),
            "--executions",
            str(args.executions),
            "--nodes",
            str(args.nodes),
            "--runs",
            "1",
            "--workers",
            str(workers),
            "--timeout",
            str(min(args.timeout, 300)),
            "--json",
        ],
        timeout=args.timeout + 60,
        log_dir=ctx.log_dir,
    )
    runs = found.get("runs") or [found]
    run = runs[0]
    # Peers count their N task steps; plaita's end node (a checkpoint too) is left out.
    measured.steps = int(run.get("completed", 0)) * args.nodes
    measured.wall_seconds = float(run.get("wall_seconds", 0.0))
    measured.cpu_seconds = float(run.get("worker_cpu_seconds", 0.0))
    measured.server_cpu_seconds = float(run.get("redis_cpu_seconds", 0.0))
    measured.problem = run.get("problem")
    return measured


def server_pid(ctx: Context, system: str) -> int | None:
    """The pid of ``system``'s server process (None when it has none)."""
    if system == "dbos-sqlite":
        return None
    process = ctx.postgres.process if system == "dbos-pg" and ctx.postgres else ctx.redis.process
    return process.pid if process is not None else None


def peer_throughput(ctx: Context, round_: int, peer: str) -> Throughput:
    args = ctx.args
    measured = Throughput(peer, round_, load_now())
    python = str(ctx.pythons[VENV_OF[peer]])
    env = {**os.environ, "PEER_LOG_DIR": str(ctx.log_dir)}
    env["PEER_SERVER_PID"] = str(server_pid(ctx, peer) or "")
    sizes = ["--executions", str(args.executions), "--nodes", str(args.nodes)]
    sizes += ["--timeout", str(args.timeout)]
    if peer == "dramatiq":
        env["PEER_REDIS_URL"] = ctx.redis.url(DRAMATIQ_DB)
        command = [python, str(HERE / "peer_dramatiq.py"), *sizes]
    elif peer == "celery":
        env["PEER_REDIS_URL"] = ctx.redis.url(CELERY_DB)
        command = [python, str(HERE / "peer_celery.py"), *sizes]
    else:
        url = dbos_database(ctx, peer, f"tp_{round_}")
        command = [python, str(HERE / "peer_dbos.py"), "throughput", "--database-url", url]
        command += sizes
    found = run_json(command, timeout=args.timeout + 90, log_dir=ctx.log_dir, env=env)
    server = found.get("server_cpu_seconds")
    measured.server_cpu_seconds = None if server is None else float(server)
    measured.steps = int(found.get("steps", 0))
    measured.wall_seconds = float(found.get("wall_seconds", 0.0))
    measured.cpu_seconds = float(found.get("worker_cpu_seconds", 0.0))
    measured.problem = found.get("problem")
    return measured


def dbos_database(ctx: Context, peer: str, label: str) -> str:
    """A fresh system database for one DBOS run: a new SQLite file or PostgreSQL database
    (DBOS creates it and its tables at launch, before any clock starts)."""
    name = f"plaita_peer_{label}_{uuid.uuid4().hex[:8]}"
    if peer == "dbos-sqlite":
        return f"sqlite:///{ctx.tmp / (name + '.sqlite')}"
    assert ctx.postgres is not None
    return ctx.postgres.database_url(name)


def plaita_latency(ctx: Context, round_: int) -> Latency:
    args = ctx.args
    measured = Latency("plaita", round_, load_now())
    found = run_json(
        [
            sys.executable,
            str(REPO_ROOT / "bench" / "event_latency.py"),
            "--redis-url",
            ctx.redis.url(PLAITA_DB),
            "--events",
            str(args.events),
            "--warmup",
            str(args.warmup),
            "--rate",
            str(args.rate),
            "--timeout",
            str(min(args.timeout, 900)),
            "--json",
        ],
        timeout=args.timeout + 60,
        log_dir=ctx.log_dir,
    )
    precise = found.get("precise_ms") or {}
    measured.p50 = float(precise.get("p50", 0.0))
    measured.p99 = float(precise.get("p99", 0.0))
    measured.measured = int(found.get("measured", 0))
    measured.problem = found.get("problem") or (None if precise else "no samples")
    legs = [(name, found.get(f"{name}_leg_ms") or {}) for name in ("filter", "worker")]
    measured.detail = ", ".join(
        f"{name} leg {leg.get('p50', 0):.1f} / {leg.get('p99', 0):.1f}" for name, leg in legs
    )
    return measured


def dbos_latency(ctx: Context, round_: int, peer: str) -> Latency:
    args = ctx.args
    measured = Latency(peer, round_, load_now())
    found = run_json(
        [
            str(ctx.pythons["dbos"]),
            str(HERE / "peer_dbos.py"),
            "events",
            "--database-url",
            dbos_database(ctx, peer, f"ev_{round_}"),
            "--events",
            str(args.events),
            "--warmup",
            str(args.warmup),
            "--rate",
            str(args.rate),
            "--timeout",
            str(args.timeout),
        ],
        timeout=args.timeout + 90,
        log_dir=ctx.log_dir,
    )
    received = [float(value) for value in found.get("recv_ms", [])]
    started = [float(value) for value in found.get("step_ms", [])]
    measured.p50 = common.percentile(received, 0.5)
    measured.p99 = common.percentile(received, 0.99)
    measured.detail = (
        f"send → next step started {common.percentile(started, 0.5):.1f} / "
        f"{common.percentile(started, 0.99):.1f}"
    )
    measured.measured = len(received)
    measured.problem = found.get("problem") or (None if received else "no samples")
    return measured


def plaita_memory(ctx: Context) -> dict[str, Any]:
    args = ctx.args
    return run_json(
        [
            sys.executable,
            str(HERE / "plaita_memory.py"),
            "--redis-url",
            ctx.redis.url(PLAITA_DB),
            "--executions",
            str(args.memory_executions),
            "--warmup",
            str(args.warmup),
            "--timeout",
            str(min(args.timeout, 300)),
        ],
        timeout=args.timeout + 60,
        log_dir=ctx.log_dir,
    )


def run_rounds(ctx: Context) -> None:
    """The interleaved rounds: every system once per round, in the same order."""
    args = ctx.args
    for round_ in range(1, args.rounds + 1):
        print(f"round {round_}/{args.rounds}", file=sys.stderr)
        ctx.throughput.append(plaita_throughput(ctx, round_, 1))
        ctx.throughput.append(plaita_throughput(ctx, round_, 2))
        for peer in args.peers:
            ctx.throughput.append(peer_throughput(ctx, round_, peer))
        if args.events > 0:
            ctx.latency.append(plaita_latency(ctx, round_))
            if "dbos-pg" in args.peers:
                ctx.latency.append(dbos_latency(ctx, round_, "dbos-pg"))
        for done in ctx.measurements():
            if done.round == round_ and done.problem:
                print(f"  {done.system}: {done.problem[:300]}", file=sys.stderr)
    if args.memory_executions > 0:
        print("memory", file=sys.stderr)
        ctx.memory = plaita_memory(ctx)


# --- the report --------------------------------------------------------------------------


def by_round(ctx: Context) -> Iterator[tuple[int, dict[str, Throughput], dict[str, Latency]]]:
    for round_ in range(1, ctx.args.rounds + 1):
        throughput = {t.system: t for t in ctx.throughput if t.round == round_}
        latency = {t.system: t for t in ctx.latency if t.round == round_}
        yield round_, throughput, latency


def ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if numerator > 0 and denominator > 0 else None


def round_ratios(ctx: Context) -> dict[str, list[float]]:
    """Per ratio, its value in every round where both sides ran without a problem."""
    found: dict[str, list[float]] = {}

    def add(name: str, value: float | None) -> None:
        if value is not None:
            found.setdefault(name, []).append(value)

    for _, throughput, latency in by_round(ctx):
        plaita = throughput.get("plaita")
        plaita_rate = plaita.steps_per_second if plaita else 0.0
        for system, measured in throughput.items():
            if not system.startswith("plaita"):
                add(f"plaita / {system}", ratio(plaita_rate, measured.steps_per_second))
        add("2 workers / 1", ratio(_rate(throughput, "plaita-2w"), plaita_rate))
        ours, theirs = latency.get("plaita"), latency.get("dbos-pg")
        if ours and theirs and not ours.problem and not theirs.problem:
            add("event p50 plaita / dbos-pg", ratio(ours.p50, theirs.p50))
            add("event p99 plaita / dbos-pg", ratio(ours.p99, theirs.p99))
    return found


def _rate(throughput: dict[str, Throughput], system: str) -> float:
    measured = throughput.get(system)
    return measured.steps_per_second if measured else 0.0


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str = ".0f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def throughput_table(ctx: Context) -> list[str]:
    lines = [
        "| round | system | load (1 min) | steps/s | wall s | worker CPU ms / 1,000 steps "
        "| server CPU ms / 1,000 steps | plaita / this |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for round_, throughput, _ in by_round(ctx):
        plaita_rate = _rate(throughput, "plaita")
        for system, measured in throughput.items():
            rate = measured.steps_per_second
            # Worker processes' CPU is known only for their whole life, start-up included.
            counted = measured.steps and system != "plaita-2w"
            cpu = 1e6 * measured.cpu_seconds / measured.steps if counted else None
            server = (
                1e6 * measured.server_cpu_seconds / measured.steps
                if measured.steps and measured.server_cpu_seconds is not None
                else None
            )
            relative = (
                "" if system.startswith("plaita") else fmt(ratio(plaita_rate, rate), ".2f", "x")
            )
            shown = fmt(rate) if not measured.problem else f"failed: {measured.problem[:80]}"
            lines.append(
                f"| {round_} | {system} | {measured.load:.2f} | {shown} "
                f"| {measured.wall_seconds:.2f} | {fmt(cpu)} | {fmt(server)} | {relative} |"
            )
    return lines


def latency_table(ctx: Context) -> list[str]:
    lines = [
        "| round | system | load (1 min) | measured | p50 ms | p99 ms "
        "| where the time goes, p50 / p99 ms |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for round_, _, latency in by_round(ctx):
        for system, measured in latency.items():
            problem = f" ({measured.problem[:80]})" if measured.problem else ""
            lines.append(
                f"| {round_} | {system} | {measured.load:.2f} | {measured.measured}{problem} "
                f"| {measured.p50:.1f} | {measured.p99:.1f} | {measured.detail} |"
            )
    return lines


def medians_table(ctx: Context) -> list[str]:
    lines = ["| system | median steps/s | range |", "| --- | ---: | ---: |"]
    systems = list(dict.fromkeys(t.system for t in ctx.throughput))
    for system in systems:
        rates = [t.steps_per_second for t in ctx.throughput if t.system == system and not t.problem]
        span = f"{min(rates):.0f}-{max(rates):.0f}" if rates else "-"
        lines.append(f"| {system} | {fmt(median(rates))} | {span} |")
    for system in dict.fromkeys(t.system for t in ctx.latency):
        ok = [t for t in ctx.latency if t.system == system and not t.problem]
        p50 = median([t.p50 for t in ok])
        p99 = median([t.p99 for t in ok])
        lines.append(
            f"| {system} event latency | p50 {fmt(p50, '.1f')} ms, p99 {fmt(p99, '.1f')} ms | |"
        )
    lines += ["", "| ratio (within each round) | median | per round |", "| --- | ---: | --- |"]
    for name, values in round_ratios(ctx).items():
        each = ", ".join(f"{value:.2f}" for value in values)
        lines.append(f"| {name} | {fmt(median(values), '.2f', 'x')} | {each} |")
    return lines


def verdict(value: float | None, target: float, *, at_least: bool) -> str:
    if value is None:
        return "not measured"
    met = value >= target if at_least else value <= target
    return "**met**" if met else "**not met**"


def targets_table(ctx: Context) -> list[str]:
    ratios = {name: median(values) for name, values in round_ratios(ctx).items()}
    suspended = None
    if ctx.memory and not ctx.memory.get("problem"):
        suspended = float(ctx.memory["suspended"]["used_memory"])
    rows = [
        (
            f"P1: plaita ≥ {TARGET_DRAMATIQ:g}x Dramatiq steps/s",
            ratios.get("plaita / dramatiq"),
            "x",
            TARGET_DRAMATIQ,
            True,
        ),
        (
            f"P1: plaita ≥ {TARGET_DBOS_PG:g}x DBOS-PostgreSQL steps/s",
            ratios.get("plaita / dbos-pg"),
            "x",
            TARGET_DBOS_PG,
            True,
        ),
        (
            f"P1: 2 worker processes ≥ {TARGET_SCALING:g}x one",
            ratios.get("2 workers / 1"),
            "x",
            TARGET_SCALING,
            True,
        ),
        (
            f"P4: plaita event p50 ≤ {TARGET_EVENT_RATIO:g}x DBOS-PostgreSQL's",
            ratios.get("event p50 plaita / dbos-pg"),
            "x",
            TARGET_EVENT_RATIO,
            False,
        ),
        (
            f"P4: plaita event p99 ≤ {TARGET_EVENT_RATIO:g}x DBOS-PostgreSQL's",
            ratios.get("event p99 plaita / dbos-pg"),
            "x",
            TARGET_EVENT_RATIO,
            False,
        ),
        (
            f"P5: ≤ 1.5 KiB ({TARGET_SUSPENDED_BYTES:,.0f} B) per suspended execution",
            suspended,
            " B",
            TARGET_SUSPENDED_BYTES,
            False,
        ),
    ]
    lines = ["| target | measured (median) | verdict |", "| --- | ---: | --- |"]
    for name, value, unit, target, at_least in rows:
        shown = fmt(value, ".2f" if unit == "x" else ".0f", unit)
        lines.append(f"| {name} | {shown} | {verdict(value, target, at_least=at_least)} |")
    return lines


def memory_lines(ctx: Context) -> list[str]:
    memory = ctx.memory
    if not memory:
        return ["Not measured (`--memory-executions 0`)."]
    if memory.get("problem"):
        return [f"Failed: {memory['problem']}"]
    suspended, completed = memory["suspended"], memory["completed"]
    return [
        f"K = {memory['executions']} executions of `bench/event_latency.py`'s flow "
        "(event node → task → end), params of "
        f"{memory['payload_bytes']} B of JSON, one worker and one event filter; `INFO memory` "
        "of the whole (otherwise idle) server before and after, divided by K.",
        "",
        "| state | used_memory B / execution | beyond the payload | used_memory_dataset "
        "B / execution | keys / execution |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| suspended on its event | {suspended['used_memory']:.0f} "
        f"| {memory['suspended_beyond_payload']:.0f} | {suspended['used_memory_dataset']:.0f} "
        f"| {suspended['keys']:.1f} |",
        f"| completed (event record, state, index and stream entries kept) "
        f"| {completed['used_memory']:.0f} "
        f"| {completed['used_memory'] - memory['payload_bytes']:.0f} "
        f"| {completed['used_memory_dataset']:.0f} | {completed['keys']:.1f} |",
        *suspended_keys_lines(memory.get("suspended_keys") or []),
    ]


def suspended_keys_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Where a suspended execution's bytes go: ``MEMORY USAGE`` per key pattern."""
    if not rows:
        return []
    total = sum(float(row["bytes"]) for row in rows)
    lines = [
        "",
        "Where a suspended execution's bytes go (`MEMORY USAGE`, exact, per key pattern; "
        f"the keys' own sizes add up to {total:.0f} B per execution, the rest of "
        "`used_memory` is the keyspace's dictionaries and allocator rounding):",
        "",
        "| key pattern (`*` = an id) | keys / execution | B / execution |",
        "| --- | ---: | ---: |",
    ]
    for row in rows[:15]:
        lines.append(f"| `{row['pattern']}` | {row['keys']:.2f} | {row['bytes']:.0f} |")
    return lines


def git_commit() -> str:
    def git(*words: str) -> str:
        out = subprocess.run(
            ["git", *words], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30
        )
        return out.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = [
        line
        for line in git("status", "--porcelain").splitlines()
        if not line.endswith("bench/RESULTS.md")
    ]
    return commit + (" (+ uncommitted changes)" if dirty else "")


def machine_line(ctx: Context, loads: tuple[float, float]) -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    redis_version = ctx.redis.info("server").get("redis_version", "?")
    postgres = f", PostgreSQL {ctx.postgres.version()}" if ctx.postgres else ""
    return (
        f"`nproc` = {len(os.sched_getaffinity(0))} ({model}), Linux {platform.release()}, "
        f"CPython {platform.python_version()}, Redis {redis_version}{postgres}, all on "
        f"loopback. Load average (1 min) {loads[0]:.2f} at the start, {loads[1]:.2f} at the "
        "end; each run's is in the tables."
    )


def versions_line(ctx: Context) -> str:
    parts = ["plaita (this commit)"]
    for venv, python in ctx.pythons.items():
        found = package_versions(python, REPORTED_PACKAGES[venv])
        parts.append(", ".join(f"{name} {version}" for name, version in found.items()))
    return "; ".join(parts)


def fairness_lines(ctx: Context) -> list[str]:
    args = ctx.args
    return [
        "| system | topology | a step is durable when | acknowledgement, results "
        "| the wall time runs |",
        "| --- | --- | --- | --- | --- |",
        "| plaita | 1 worker process (`bench/worker_throughput.py`: the real `Worker`, "
        "concurrency 64), and 2 processes for the scaling | its checkpoint (the whole "
        "execution state, fenced) is written to Redis after every node; Redis appends to its "
        "AOF and fsyncs every second | the carrier is acked after the step's checkpoint; "
        "the state is the result | worker start → last completing checkpoint (E start "
        "carriers enqueued before) |",
        "| Dramatiq | 1 process x 8 threads (`dramatiq --processes 1 --threads 8`), Redis "
        "broker | the next message is in the Redis broker (same AOF everysec server) "
        "| acked after the actor returns (acks late), requeued from a dead worker; "
        "`max_retries=0`; no result backend | first enqueue → last finish (worker up and idle, "
        "one warm-up message done before) |",
        "| Celery | 1 worker, prefork pool of 2, Redis broker | the next task is in the Redis "
        "broker (same server) | `task_acks_late=True` (Celery's default acks before running); "
        "`task_ignore_result`, no result backend; prefetch 4 | as Dramatiq |",
        "| DBOS-SQLite | 1 process, DBOS's executor threads (unbounded pool), "
        "`DBOS.start_workflow` in the same process; DBOS's defaults otherwise (a system "
        "database pool of 20 connections, pre-ping on) | each step's output row is committed "
        "to the SQLite system database (journal mode DELETE, synchronous FULL: fsync per "
        "commit; writers serialised by SQLite's lock) | no broker; the workflow's status "
        "row | first `start_workflow` → last workflow's finish |",
        "| DBOS-PostgreSQL | as DBOS-SQLite | each step's row is committed to PostgreSQL "
        "(synchronous_commit on: WAL fsync per commit) | as DBOS-SQLite | as DBOS-SQLite |",
        "",
        f"- Workload: E = {args.executions} executions x N = {args.nodes} no-op steps. "
        "steps/s = completed executions x N / wall time for every system: plaita's end node "
        "(a checkpoint too, counted by `worker_throughput.py` itself) is left out, which "
        f"lowers plaita's figure by 1/{args.nodes + 1}.",
        "- Dramatiq and Celery are task queues, not durable workflows: the chain's only "
        "state is the next message, each message enqueues the next (the idiomatic "
        "equivalent of a 10-step durable chain), and the last appends its finish time to a "
        "Redis list (one more command per execution than plaita's path).",
        "- Event latency: plaita = `bench/event_latency.py` (one worker and one event-filter "
        "process; publish through `PublishEvent` from the bench process; publish call → the "
        "resumed task node started, after the event node's checkpoint). DBOS-PostgreSQL = "
        "W + E workflows each in `DBOS.recv`, `DBOS.send` from the main thread of the same "
        "process (LISTEN/NOTIFY wakes the receiver); send call → `recv` returned (the "
        "table also gives send → the next step started). Both open loop at "
        f"{args.rate:g} events/s, {args.events} measured after {args.warmup} warm-up. "
        "DBOS-SQLite's `recv` polls the database (once a second by default), so it is not "
        "compared. plaita's legs: *filter* = publish + event filter until the resume carrier "
        "is in the task stream, *worker* = carrier → resumed node started; open loop means "
        "a worker slower than the rate (a resume is 3 steps) shows as queueing in its leg.",
        "- CPU: plaita = the bench process with its in-process worker (poll included) or "
        "its worker processes (`getrusage`); Dramatiq and Celery = the worker's process "
        "tree (`/proc`); DBOS = the one process (`getrusage`). *Server CPU* = the Redis "
        "server's (plaita, Dramatiq, Celery) or the PostgreSQL cluster's processes' "
        "(DBOS-PostgreSQL, exited backends included) from `/proc` (plaita: Redis's "
        "`INFO cpu`), over the same window as the wall time; DBOS-SQLite's database work "
        "is in its process's CPU.",
        f"- Redis: one private server for all ({RedisServer.CONFIG}), databases "
        f"{PLAITA_DB} (plaita), {DRAMATIQ_DB} (Dramatiq), {CELERY_DB} (Celery). PostgreSQL: "
        f"a private cluster ({PostgresServer.CONFIG}), a fresh database per DBOS run; "
        "SQLite: a fresh file per run in a temp directory.",
    ]


def report(ctx: Context, loads: tuple[float, float], seconds: float) -> str:
    args = ctx.args
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = "bench/peers/run.py " + " ".join(sys.argv[1:])
    return "\n".join(
        [
            f"## Run of {when}, commit {git_commit()}",
            "",
            f"`{command.strip()}` ({args.rounds} rounds, {seconds / 60:.1f} min). "
            f"{machine_line(ctx, loads)}",
            "",
            f"Versions: {versions_line(ctx)}.",
            "",
            "### Configurations and fairness",
            "",
            *fairness_lines(ctx),
            "",
            "### Targets (on the medians)",
            "",
            *targets_table(ctx),
            "",
            "### Medians across rounds",
            "",
            *medians_table(ctx),
            "",
            "### Throughput, every run",
            "",
            *throughput_table(ctx),
            "",
            "### Event latency, every run",
            "",
            *latency_table(ctx),
            "",
            "### Redis memory per plaita execution (P5)",
            "",
            *memory_lines(ctx),
        ]
    )


def write_results(path: Path, text: str) -> None:
    """Replace what is between the markers (the section and markers appended if absent)."""
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{BEGIN_MARKER}\n{text}\n{END_MARKER}"
    if BEGIN_MARKER in existing and END_MARKER in existing:
        head, rest = existing.split(BEGIN_MARKER, 1)
        _, tail = rest.split(END_MARKER, 1)
        path.write_text(head + block + tail, encoding="utf-8")
        return
    path.write_text(existing.rstrip("\n") + f"\n\n{SECTION_HEADING}\n\n{block}\n", encoding="utf-8")


# --- the command -------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--executions", type=int, default=200, help="E")
    parser.add_argument("--nodes", type=int, default=10, help="N no-op steps per execution")
    parser.add_argument("--events", type=int, default=300, help="measured events (0: none)")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up events / executions")
    parser.add_argument("--rate", type=float, default=100.0, help="events/s, open loop")
    parser.add_argument(
        "--memory-executions", type=int, default=1000, help="K of the memory run (0: none)"
    )
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per run")
    parser.add_argument(
        "--venvs",
        type=Path,
        default=Path(os.environ.get("PLAITA_PEERS_VENVS") or HERE / ".venvs"),
        help="where the peers' virtualenvs are cached (env PLAITA_PEERS_VENVS)",
    )
    parser.add_argument("--results", type=Path, default=RESULTS_FILE, help="file to write")
    parser.add_argument("--no-write", action="store_true", help="print the report only")
    parser.add_argument("--smoke", action="store_true", help="1 round of 10 x 2, 10 events")
    args = parser.parse_args(argv)
    args.peers = [peer.strip() for peer in args.peers.split(",") if peer.strip()]
    unknown = sorted(set(args.peers) - set(PEERS))
    if unknown:
        parser.error(f"unknown peers {unknown}; choose from {', '.join(PEERS)}")
    if args.smoke:
        args.rounds, args.executions, args.nodes = 1, 10, 2
        # 0 (skip) given with --smoke stays 0.
        args.events, args.memory_executions = min(args.events, 10), min(args.memory_executions, 20)
        args.warmup = 2
        args.timeout = min(args.timeout, 60.0)
    if not 1 <= args.rounds <= 20:
        parser.error("--rounds must be between 1 and 20")
    if not 1 <= args.executions <= 10_000 or not 1 <= args.nodes <= 100:
        parser.error("--executions must be in [1, 10000] and --nodes in [1, 100]")
    if not 0 <= args.events <= 10_000 or not 0 <= args.memory_executions <= 100_000:
        parser.error("--events must be in [0, 10000], --memory-executions in [0, 100000]")
    if not 0 < args.timeout <= 900:
        parser.error("--timeout must be in (0, 900]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.exit_on_sigterm()
    started, first_load = time.monotonic(), load_now()
    with tempfile.TemporaryDirectory(prefix="plaita-peers-") as tmp_name:
        tmp = Path(tmp_name)
        log_dir = tmp / "logs"
        log_dir.mkdir()
        (tmp / "redis").mkdir()
        redis_server = RedisServer(tmp / "redis")
        postgres: PostgresServer | None = None
        try:
            pythons = {
                VENV_OF[peer]: venv_python(args.venvs, VENV_OF[peer], log_dir)
                for peer in args.peers
            }
            redis_server.start()
            if "dbos-pg" in args.peers:
                postgres = PostgresServer()
                postgres.start()
            ctx = Context(args, redis_server, postgres, pythons, log_dir, tmp)
            run_rounds(ctx)
            text = report(ctx, (first_load, load_now()), time.monotonic() - started)
        finally:
            if postgres is not None:
                postgres.stop()
            redis_server.stop()
    print(text)
    if not args.no_write:
        write_results(args.results, text)
        print(f"written to {args.results}", file=sys.stderr)
    failed = [
        f"{measured.system} round {measured.round}: {measured.problem}"
        for measured in ctx.measurements()
        if measured.problem
    ]
    if ctx.memory is not None and ctx.memory.get("problem"):
        failed.append(f"memory: {ctx.memory['problem']}")
    for problem in failed:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
