"""Real processes against a real Redis: helpers that start, poll and always stop them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import redis

if TYPE_CHECKING:
    from plaita.entrypoints.settings import Settings

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")

requires_redis = pytest.mark.skipif(
    not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"
)


def plaita_command() -> list[str]:
    script = Path(sys.executable).with_name("plaita")
    return [str(script)] if script.exists() else [sys.executable, "-m", "plaita.entrypoints.cli"]


def poll(
    check: Callable[[], T | None], *, timeout: float, interval: float = 0.05, what: str = ""
) -> T:
    """Call ``check`` until it returns something truthy, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or check}")
        time.sleep(interval)


@dataclasses.dataclass(frozen=True)
class PlannedEvent:
    """An event for ``Plaita.publish``: published at wall-clock ``at_ms``, or at once."""

    event_type: str
    correlation_id: str
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    at_ms: int | None = None


class Plaita:
    """Runs ``plaita`` commands in one isolated namespace and owns the processes it starts."""

    def __init__(self, redis_url: str, namespace: str, log_dir: Path) -> None:
        self.redis_url = redis_url
        self.namespace = namespace
        self.env = {**os.environ, "PLAITA_REDIS_URL": redis_url, "PLAITA_NAMESPACE": namespace}
        self.log_dir = log_dir
        self.processes: list[tuple[subprocess.Popen[bytes], Path]] = []
        self._redis: redis.Redis | None = None

    def share(self, **settings: object) -> None:
        """Give every process this runner starts these settings, as ``PLAITA_*`` variables.

        A pool shares its budget and family settings through the environment (W12): a worker
        given a budget by flag alone would leave every carrier of the CLI and the console
        (which compute the defaults) pending as ``config.budget_stale``.
        """
        self.env.update({f"PLAITA_{name.upper()}": str(value) for name, value in settings.items()})

    def settings(self) -> Settings:
        """The settings of a process this runner starts (its ``PLAITA_*`` environment)."""
        from plaita.entrypoints.settings import Settings

        prefix = "PLAITA_"
        values = {
            name[len(prefix) :].lower(): value
            for name, value in self.env.items()
            if name.startswith(prefix) and name[len(prefix) :].lower() in Settings.model_fields
        }
        return Settings(**{**values, "backend": "redis"})

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

    def spawn(
        self, name: str, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{name}-{len(self.processes)}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [*plaita_command(), "--log-level", "INFO", *args],
                cwd=REPO_ROOT,
                env={**self.env, **(env or {})},
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.processes.append((process, log))
        return process

    def wait_for_status(
        self, execution_id: str, statuses: set[str], timeout: float = 30, tenant: str = "default"
    ) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            done = self.run(
                "executions", "show", execution_id, "--tenant", tenant, "--json", check=False
            )
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
            # A test may have left it stopped (SIGSTOP): let it see the SIGTERM.
            process.send_signal(signal.SIGCONT)
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

    def log_of(self, process: subprocess.Popen[bytes]) -> str:
        for candidate, log in self.processes:
            if candidate is process:
                return log.read_text(errors="replace")
        raise KeyError(process.pid)

    # --- direct access to this namespace in Redis (for fault tests) -------------------

    def redis(self) -> redis.Redis:
        """A synchronous client on the test database (decoded strings), closed at teardown."""
        if self._redis is None:
            self._redis = redis.Redis.from_url(self.redis_url, decode_responses=True)
        return self._redis

    def key(self, suffix: str) -> str:
        return f"{self.namespace}:{suffix}"

    @property
    def stream(self) -> str:
        return self.key("q:{default}:stream")

    @property
    def dead_letters(self) -> str:
        return self.key("q:{default}:dlq")

    def states(self, execution_ids: list[str]) -> dict[str, dict[str, Any] | None]:
        """Each execution as ``executions show --json`` prints it (``None`` if it has no state).

        Read in this process through plaita's own repository, so a poll over many executions
        costs milliseconds instead of one CLI process each.
        """
        from plaita.entrypoints.cli_support import execution_view
        from plaita.entrypoints.container import build_container

        async def load() -> dict[str, dict[str, Any] | None]:
            settings = self.settings()
            container = build_container(settings)
            try:
                repository = container.executions()
                found: dict[str, dict[str, Any] | None] = {}
                for execution_id in execution_ids:
                    state = await repository.load(execution_id)
                    found[execution_id] = None if state is None else execution_view(state)
                return found
            finally:
                await container.redis_client().aclose()

        return asyncio.run(load())

    def start_executions(self, flow_id: str, count: int) -> list[str]:
        """Start ``count`` executions of ``flow_id`` (no input) from this process; their ids.

        Through the same ``StartExecution`` use case as ``plaita executions start``, without
        a process start each: a test whose executions wait on 2-second timers needs them all
        started well within those 2 seconds.
        """
        from plaita.application.tenancy import tenant_scope
        from plaita.entrypoints.container import build_container

        async def start_all() -> list[str]:
            settings = self.settings()
            container = build_container(settings)
            try:
                start = container.start_execution()
                with tenant_scope("default"):
                    return [(await start(flow_id)).execution_id for _ in range(count)]
            finally:
                await container.redis_client().aclose()

        return asyncio.run(start_all())

    def publish(self, planned: Sequence[PlannedEvent]) -> list[dict[str, Any]]:
        """Publish events from this process, each at its wall-clock ``at_ms`` (None: at once).

        ``plaita events publish`` costs a process start (hundreds of ms); a test that must
        publish at a precise moment (a timer's due time) publishes here instead, through the
        same ``PublishEvent`` use case. The events' JSON, in the order given.
        """
        from plaita.entrypoints.container import build_container

        async def publish_all() -> list[dict[str, Any]]:
            settings = self.settings()
            container = build_container(settings)
            published: dict[int, dict[str, Any]] = {}
            try:
                await container.redis_client().ping()
                publish = container.publish_event()
                order = sorted(range(len(planned)), key=lambda i: planned[i].at_ms or 0)
                for index in order:
                    event = planned[index]
                    if event.at_ms is not None:
                        await asyncio.sleep(max(0.0, event.at_ms / 1000 - time.time()))
                    published[index] = (
                        await publish(
                            event.event_type,
                            data=dict(event.data),
                            correlation_id=event.correlation_id,
                            source="test",
                        )
                    ).to_json()
            finally:
                await container.redis_client().aclose()
            return [published[i] for i in range(len(planned))]

        return asyncio.run(publish_all())

    def wait_for_statuses(
        self,
        execution_ids: list[str],
        statuses: set[str],
        timeout: float = 30,
        *,
        alive: Sequence[subprocess.Popen[bytes]] = (),
    ) -> dict[str, dict[str, Any]]:
        """Poll until every execution is in one of ``statuses``; its views by id.

        Fails at once when one of the ``alive`` processes exits meanwhile.
        """
        deadline = time.monotonic() + timeout
        seen: dict[str, dict[str, Any] | None] = {}
        while time.monotonic() < deadline:
            for process in alive:
                if process.poll() is not None:
                    raise AssertionError(
                        f"process {process.pid} exited ({process.returncode}) while executions "
                        f"were still to finish\n{self.logs()}"
                    )
            seen = self.states(execution_ids)
            if all(view is not None and view["status"] in statuses for view in seen.values()):
                return {k: v for k, v in seen.items() if v is not None}
            time.sleep(0.1)
        late = {k: None if v is None else v["status"] for k, v in seen.items()}
        raise AssertionError(f"executions never all reached {statuses}: {late}\n{self.logs()}")


@pytest.fixture
def plaita(tmp_path: Path) -> Iterator[Plaita]:
    with isolated_plaita(tmp_path) as runner:
        yield runner


@contextlib.contextmanager
def isolated_plaita(tmp_path: Path, runner: Plaita | None = None) -> Iterator[Plaita]:
    """A runner in a namespace of its own; its processes stopped and its keys deleted after.

    ``runner`` (for example a :class:`ClusterPlaita`): that one instead of a runner on the
    shared test Redis.
    """
    if runner is None:
        assert REDIS_URL is not None
        runner = Plaita(REDIS_URL, f"plaita-it-{uuid.uuid4().hex[:12]}", tmp_path)
    try:
        yield runner
    finally:
        runner.stop_all()
        client = runner.redis()
        try:
            for key in client.scan_iter(match=f"{runner.namespace}:*", count=1000):
                client.delete(key)
        finally:
            client.close()


# --- Redis Cluster ---------------------------------------------------------------------

REDIS_CLUSTER_URL_VARIABLE = "PLAITA_TEST_REDIS_CLUSTER_URL"
DEFAULT_REDIS_CLUSTER_URL = "redis://127.0.0.1:7000"


class ClusterPlaita(Plaita):
    """A runner whose URL is a Redis Cluster seed, for its processes and its own clients.

    Every process it starts, every ``plaita`` command it runs and every in-test container it
    builds gets ``PLAITA_REDIS_CLUSTER=1``; :meth:`redis` is a ``RedisCluster``.
    """

    def __init__(self, redis_url: str, namespace: str, log_dir: Path) -> None:
        super().__init__(redis_url, namespace, log_dir)
        self.env["PLAITA_REDIS_CLUSTER"] = "1"

    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = redis.RedisCluster.from_url(  # type: ignore[assignment]
                self.redis_url, decode_responses=True
            )
        assert self._redis is not None
        return self._redis

    def close_redis(self) -> None:
        """Drop the in-test client (after a failover, the next one starts from a seed node)."""
        if self._redis is not None:
            self._redis.close()
            self._redis = None


def shared_cluster_url() -> str:
    """The shared test cluster's seed; a clear failure (never a skip) when none answers."""
    url = os.environ.get(REDIS_CLUSTER_URL_VARIABLE) or DEFAULT_REDIS_CLUSTER_URL
    where = (
        f"{REDIS_CLUSTER_URL_VARIABLE}={url}"
        if os.environ.get(REDIS_CLUSTER_URL_VARIABLE)
        else f"{REDIS_CLUSTER_URL_VARIABLE} is unset, and its default {url}"
    )
    client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=2)
    try:
        info = client.execute_command("CLUSTER", "INFO")
    except redis.RedisError as error:
        pytest.fail(
            f"no Redis Cluster answers at {url} ({where}; {error}): run the suite through "
            "scripts/test, which starts one, or point the variable at a cluster seed"
        )
    finally:
        client.close()
    if "cluster_state:ok" not in str(info):
        pytest.fail(f"the Redis Cluster at {url} is not serving every slot ({where}): {info}")
    return url


@pytest.fixture
def cluster_plaita(tmp_path: Path) -> Iterator[Plaita]:
    """A runner on the shared test cluster, in a namespace of its own (keys deleted after)."""
    runner = ClusterPlaita(shared_cluster_url(), f"plaita-it-{uuid.uuid4().hex[:12]}", tmp_path)
    with isolated_plaita(tmp_path, runner) as started:
        yield started


# --- the fault and poison suites' shared set-up --------------------------------------------

FLOW_ID = "fault_chain"
FLOW_FILE = "tests/integration/flows/fault_chain.json"
HANDLER_MODULE = "tests.integration.fault_handlers"
NODES = ("a", "b", "c", "d")
GROUP = "plaita-workers"
TERMINAL = {"completed", "error", "cancelled"}
LEASE_TTL_SECONDS = 3
#: Must exceed the lease renewal interval (TTL / 3 = 1 s), or the worker refuses to start (W21).
CLAIM_MIN_IDLE_MS = 1500


def share_fault_timings(plaita: Plaita, *, max_deliveries: int | None = None) -> None:
    """The fault suites' short timings, for the whole pool: workers, CLI and in-test producers."""
    plaita.share(lease_ttl_seconds=LEASE_TTL_SECONDS, claim_min_idle_ms=CLAIM_MIN_IDLE_MS)
    if max_deliveries is not None:
        plaita.share(max_deliveries=max_deliveries)


def worker_args(consumer: str, *, concurrency: int) -> list[str]:
    """``plaita worker`` with the fault suites' handler module; timings: share_fault_timings."""
    return [
        "worker",
        "--flows",
        "tests/integration/flows",
        "--handler-modules",
        HANDLER_MODULE,
        "--concurrency",
        str(concurrency),
        "--consumer-name",
        consumer,
        "--read-block-ms",
        "100",
    ]
