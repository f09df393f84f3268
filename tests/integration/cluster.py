"""A private Redis Cluster on loopback: started for one test (or one benchmark), every node
stopped by its pid.

``private_cluster(workdir)`` starts ``masters * (1 + replicas)`` ``redis-server`` processes
(cluster-enabled, nothing on disk, a short ``cluster-node-timeout`` so a failover takes
seconds), joins them with ``redis-cli --cluster create --cluster-replicas N``, waits until
every node reports ``cluster_state:ok`` and every replica is in sync, and yields a
:class:`PrivateCluster`. On exit each node still running is sent SIGTERM (then SIGKILL) by
its own pid. The shared test cluster (``PLAITA_TEST_REDIS_CLUSTER_URL``) is never touched.

Usable outside pytest too (for example by a benchmark)::

    with private_cluster(Path(tempfile.mkdtemp())) as cluster:
        print(cluster.seed_url)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis
from redis.crc import key_slot

HOST = "127.0.0.1"
#: Where the search for free ports starts; the shared test cluster lives on 7000-7005.
DEFAULT_BASE_PORT = 7100
#: A cluster node also listens on its port + 10000 (the cluster bus).
BUS_PORT_OFFSET = 10000


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """One line of ``CLUSTER NODES``."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    slots: tuple[tuple[int, int], ...]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def failed(self) -> bool:
        return bool(self.flags & {"fail", "fail?"})

    def serves(self, slot: int) -> bool:
        return any(low <= slot <= high for low, high in self.slots)


@dataclasses.dataclass
class ClusterNode:
    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def client(self, timeout: float = 1.0) -> redis.Redis:
        """A plain (non-cluster) client on this node alone; the caller closes it."""
        return redis.Redis(
            host=HOST,
            port=self.port,
            decode_responses=True,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )

    def ask(self, *command: str) -> object | None:
        """One command on this node; ``None`` when it does not answer."""
        client = self.client()
        try:
            return client.execute_command(*command)
        except redis.RedisError:
            return None
        finally:
            client.close()

    def log_tail(self, lines: int = 30) -> str:
        log = self.directory / "redis.log"
        if not log.exists():
            return ""
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def free_base_port(count: int, start: int = DEFAULT_BASE_PORT, attempts: int = 40) -> int:
    """A base port such that ``base .. base+count-1`` and their bus ports are free."""
    for base in range(start, start + attempts * 20, 20):
        ports = range(base, base + count)
        if all(_port_is_free(p) and _port_is_free(p + BUS_PORT_OFFSET) for p in ports):
            return base
    raise AssertionError(f"no {count} free loopback ports (and bus ports) from {start} on")


def _wait(check, *, timeout: float, what: str, interval: float = 0.05):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class PrivateCluster:
    """The nodes of one private cluster, and what a test asks of them."""

    def __init__(self, nodes: list[ClusterNode], *, node_timeout_ms: int) -> None:
        self.nodes = nodes
        self.node_timeout_ms = node_timeout_ms

    @property
    def seed_url(self) -> str:
        """A seed for ``--redis-cluster``: the first node still running."""
        return f"redis://{HOST}:{self.live_nodes()[0].port}"

    def live_nodes(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.alive]

    def node(self, port: int) -> ClusterNode:
        (found,) = [node for node in self.nodes if node.port == port]
        return found

    def topology(self) -> list[NodeInfo]:
        """``CLUSTER NODES`` as the first live node that answers sees it."""
        for node in self.live_nodes():
            text = node.ask("CLUSTER", "NODES")
            if isinstance(text, str):
                return parse_cluster_nodes(text)
        raise AssertionError("no node of the private cluster answers CLUSTER NODES")

    def master_for_key(self, key: str) -> NodeInfo:
        slot = key_slot(key.encode())
        (owner,) = [n for n in self.topology() if n.is_master and n.serves(slot)]
        return owner

    def replicas_of(self, master_id: str) -> list[NodeInfo]:
        return [n for n in self.topology() if n.master_id == master_id and not n.failed]

    def state_ok(self) -> bool:
        """Every live node says ``cluster_state:ok`` and agrees who serves every slot."""
        views = []
        for node in self.live_nodes():
            info = node.ask("CLUSTER", "INFO")
            if not isinstance(info, str) or "cluster_state:ok" not in info:
                return False
            text = node.ask("CLUSTER", "NODES")
            if not isinstance(text, str):
                return False
            owners = sorted(
                (n.slots, n.port)
                for n in parse_cluster_nodes(text)
                if n.is_master and n.slots and not n.failed
            )
            views.append(owners)
        return bool(views) and all(view == views[0] for view in views)

    def replicas_in_sync(self) -> bool:
        for node in self.live_nodes():
            info = node.ask("INFO", "replication")
            if not isinstance(info, dict):
                return False
            if info.get("role") == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    def wait_ok(self, timeout: float = 20) -> float:
        """Wait until :meth:`state_ok`; the seconds it took."""
        started = time.monotonic()
        _wait(self.state_ok, timeout=timeout, what=f"cluster_state:ok\n{self.logs()}")
        return time.monotonic() - started

    def kill(self, port: int) -> None:
        """``kill -9`` one node, by its pid."""
        node = self.node(port)
        os.kill(node.pid, signal.SIGKILL)
        node.process.wait(5)

    def stop(self) -> None:
        for node in self.nodes:
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            try:
                node.process.wait(10)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(5)

    def logs(self, lines: int = 15) -> str:
        return "\n".join(f"--- node {n.port}\n{n.log_tail(lines)}" for n in self.nodes)


def parse_cluster_nodes(text: str) -> list[NodeInfo]:
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        address = fields[1].split("@")[0]
        slots = []
        for item in fields[8:]:
            if item.startswith("["):
                continue  # a slot being migrated
            low, _, high = item.partition("-")
            slots.append((int(low), int(high or low)))
        found.append(
            NodeInfo(
                node_id=fields[0],
                port=int(address.rsplit(":", 1)[1]),
                flags=frozenset(fields[2].split(",")),
                master_id=None if fields[3] == "-" else fields[3],
                slots=tuple(slots),
            )
        )
    return found


def _start_node(binary: str, port: int, directory: Path, node_timeout_ms: int) -> ClusterNode:
    directory.mkdir(parents=True, exist_ok=True)
    arguments = [
        binary,
        "--port", str(port),
        "--bind", HOST,
        "--cluster-enabled", "yes",
        "--cluster-config-file", str(directory / "nodes.conf"),
        "--cluster-node-timeout", str(node_timeout_ms),
        # A replica takes over however long its link was down (a test kills masters).
        "--cluster-replica-validity-factor", "0",
        "--save", "",
        "--appendonly", "no",
        # A replica's first sync starts at once, not after the default 5 s.
        "--repl-diskless-sync-delay", "0",
        "--dir", str(directory),
        "--logfile", str(directory / "redis.log"),
    ]  # fmt: skip
    process = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return ClusterNode(port, directory, process)


@contextlib.contextmanager
def private_cluster(
    workdir: Path,
    *,
    masters: int = 3,
    replicas: int = 1,
    base_port: int | None = None,
    node_timeout_ms: int = 1000,
    ready_timeout: float = 30,
) -> Iterator[PrivateCluster]:
    """Start a private cluster under ``workdir``; every node is stopped by its pid on exit."""
    binary = shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    assert binary and cli, "redis-server and redis-cli are needed; scripts/test installs them"
    count = masters * (1 + replicas)
    base = base_port if base_port is not None else free_base_port(count)
    nodes: list[ClusterNode] = []
    cluster = PrivateCluster(nodes, node_timeout_ms=node_timeout_ms)
    try:
        for port in range(base, base + count):
            nodes.append(_start_node(binary, port, workdir / f"node-{port}", node_timeout_ms))
        for node in nodes:
            _wait(
                lambda node=node: not node.alive or node.ask("PING") is True,
                timeout=10,
                what=f"redis-server on {node.port} to answer",
            )
            assert node.alive, f"redis-server on {node.port} exited\n{node.log_tail()}"
        created = subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"{HOST}:{node.port}" for node in nodes),
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=ready_timeout,
        )
        assert created.returncode == 0, f"redis-cli --cluster create failed:\n{created.stdout}"
        cluster.wait_ok(ready_timeout)
        _wait(
            cluster.replicas_in_sync,
            timeout=ready_timeout,
            what=f"every replica in sync\n{cluster.logs()}",
        )
        yield cluster
    finally:
        cluster.stop()


@dataclasses.dataclass(frozen=True)
class Failover:
    """What :func:`kill_master_and_wait_for_failover` saw."""

    killed_port: int
    killed_pid: int
    promoted_port: int
    #: From the SIGKILL to a replica serving the old master's slots and ``cluster_state:ok``.
    seconds: float
    #: Bytes of the old master's replication stream its replica never received (writes the
    #: master acknowledged and the failover dropped); 0 when the replica was in sync.
    lost_bytes: int
    #: The slots the killed master served (its replica serves them now).
    slots: tuple[tuple[int, int], ...]

    def moved(self, key: str) -> bool:
        """Whether ``key`` lived on the killed master."""
        slot = key_slot(key.encode())
        return any(low <= slot <= high for low, high in self.slots)


def _replication(node: ClusterNode) -> dict[str, object]:
    info = node.ask("INFO", "replication")
    assert isinstance(info, dict), f"node {node.port} does not answer INFO"
    return info


class MasterKill:
    """The kill of one master, and the failover after it (see ``kill_master``).

    Used as a context manager, it first cuts the master's replicas off (``cut=True``): each
    replica is SIGSTOPped and the master drops their links (``CLIENT KILL TYPE replica``), so
    every write the master acknowledges from then on is lost at the failover, as asynchronous
    replication allows. :meth:`kill` then kills the master (``kill -9``, by its pid) and lets
    the replicas go on; leaving the block does so too, whatever happened. Keep the cut shorter
    than the cluster's node timeout, or the stopped replicas are flagged as failing.
    """

    def __init__(self, cluster: PrivateCluster, master_port: int, *, cut: bool) -> None:
        self.cluster = cluster
        topology = cluster.topology()
        (self.master,) = [n for n in topology if n.port == master_port and n.is_master]
        self.replicas = [
            cluster.node(n.port) for n in topology if n.master_id == self.master.node_id
        ]
        assert self.replicas, f"the master on {master_port} has no replica to promote"
        self.victim = cluster.node(master_port)
        self._cut = cut
        self._stopped: list[ClusterNode] = []
        self._written = 0
        self._killed_at: float | None = None
        self.killed_pid = self.victim.pid

    def __enter__(self) -> MasterKill:
        if self._cut:
            for replica in self.replicas:
                os.kill(replica.pid, signal.SIGSTOP)
                self._stopped.append(replica)
            self.victim.ask("CLIENT", "KILL", "TYPE", "replica")
        return self

    def __exit__(self, *_: object) -> None:
        self._resume_replicas()

    def _resume_replicas(self) -> None:
        while self._stopped:
            os.kill(self._stopped.pop().pid, signal.SIGCONT)

    def kill(self) -> None:
        """``kill -9`` the master; the replicas (if cut off) go on at once."""
        try:
            # Where the master's replication stream stood just before the kill (a lower bound).
            self._written = int(str(_replication(self.victim)["master_repl_offset"]))
            self.cluster.kill(self.victim.port)
            self._killed_at = time.monotonic()
        finally:
            self._resume_replicas()

    def wait_for_failover(self, timeout: float = 20) -> Failover:
        """Wait until one of the replicas serves the old master's slots and the cluster is ok."""
        assert self._killed_at is not None, "kill() first"
        ports = {replica.port for replica in self.replicas}
        slots = self.master.slots

        def promoted() -> int | None:
            try:
                now = self.cluster.topology()
            except AssertionError:
                return None
            for node in now:
                if node.port in ports and node.is_master and node.slots == slots:
                    return node.port if self.cluster.state_ok() else None
            return None

        port = int(
            _wait(
                promoted,
                timeout=timeout,
                what=f"a replica of {self.victim.port} to take over\n{self.cluster.logs()}",
            )
        )
        seconds = time.monotonic() - self._killed_at
        # A promoted replica's second_repl_offset is one past the last byte it had received.
        received = int(str(_replication(self.cluster.node(port))["second_repl_offset"])) - 1
        return Failover(
            killed_port=self.victim.port,
            killed_pid=self.killed_pid,
            promoted_port=port,
            seconds=seconds,
            lost_bytes=max(0, self._written - received),
            slots=slots,
        )


def kill_master_and_wait_for_failover(
    cluster: PrivateCluster,
    master_port: int,
    *,
    cut_replication_seconds: float = 0.0,
    timeout: float = 20,
) -> Failover:
    """``kill -9`` the master on ``master_port``; wait until one of its replicas serves its
    slots and the cluster is ok again.

    With ``cut_replication_seconds``, its replicas stop receiving its writes that long before
    the kill (:class:`MasterKill`): what the master acknowledged meanwhile is lost.
    """
    with MasterKill(cluster, master_port, cut=cut_replication_seconds > 0) as kill:
        time.sleep(cut_replication_seconds)
        kill.kill()
    return kill.wait_for_failover(timeout)
