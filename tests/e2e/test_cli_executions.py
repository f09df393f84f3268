"""Operator controls and the catalog through the ``plaita`` CLI on real Redis (W23, C4).

Each test seeds its own namespace through the Redis adapters, then drives ``plaita executions
list|resume|cancel|pause|unpause|retry|bulk``, ``plaita flows list|show`` and ``plaita
workers list`` as an operator would, through the top-level command group.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import attrs
import pytest
import redis.asyncio as redis
from click.testing import CliRunner

from plaita.adapters.redis.controls import RedisExecutionControls
from plaita.adapters.redis.flows import RedisFlowRepository
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.adapters.redis.registry import RedisWorkerRegistry
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.application.ports import WorkerInstance
from plaita.application.tenancy import current_tenant, tenant_scope
from plaita.domain.envelope import ResumeType, TaskEnvelope
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus, Suspension
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.operator_controls import ControlFlags
from plaita.domain.priorities import Priority
from plaita.entrypoints.cli import main

from .conftest import seeding_scope

T = TypeVar("T")
REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")
pytestmark = pytest.mark.skipif(
    not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"
)
FLOW = Flow.from_document(
    {
        "flow_id": "waiting",
        "start": "prepare",
        "nodes": [
            {"id": "prepare", "type": "task", "handler": "examples.handlers:ship", "next": "wait"},
            {"id": "wait", "type": "event", "event_type": "go", "next": "done"},
            {"id": "done", "type": "end"},
        ],
    }
)


@attrs.frozen
class Namespace:
    name: str
    keys: RedisKeys

    def invoke(self, *args: str) -> tuple[int, str]:
        assert REDIS_URL is not None
        result = CliRunner().invoke(
            main,
            [*args, "--redis-url", REDIS_URL],
            env={"PLAITA_NAMESPACE": self.name},
            catch_exceptions=False,
        )
        return result.exit_code, result.output

    def invoke_json(self, *args: str) -> tuple[int, Any]:
        code, out = self.invoke(*args, "--json")
        return code, json.loads(out)

    def seed(self, body: Callable[[redis.Redis, RedisKeys], Awaitable[T]]) -> T:
        async def go() -> T:
            assert REDIS_URL is not None
            client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
            try:
                with seeding_scope():  # the commands under test open their own
                    return await body(client, self.keys)
            finally:
                await client.aclose()

        return asyncio.run(go())

    def carriers(self) -> list[TaskEnvelope]:
        """Carriers on the task stream (consumed by a probe)."""

        async def body(client: redis.Redis, keys: RedisKeys) -> list[TaskEnvelope]:
            queue = RedisTaskQueue(client, keys)
            await queue.ensure_group()
            deliveries = await queue.read("probe", count=100, block_ms=10)
            return [d.envelope for d in deliveries if d.envelope is not None]

        return self.seed(body)

    def flags(self, execution_id: str, tenant_id: str = "default") -> ControlFlags:
        async def body(client: redis.Redis, keys: RedisKeys) -> ControlFlags:
            with tenant_scope(tenant_id):
                return await RedisExecutionControls(client, keys).get(execution_id)

        return self.seed(body)

    def state(self, execution_id: str) -> ExecutionState | None:
        return self.seed(
            lambda client, keys: RedisExecutionRepository(client, keys).load(execution_id)
        )

    def execution(self, execution_id: str, status: ExecutionStatus, *, at_ms: int = 0) -> None:
        """A stored execution of FLOW: suspended at ``wait``, or failed/cancelled there."""

        async def body(client: redis.Redis, keys: RedisKeys) -> None:
            await RedisFlowRepository(client, keys).put_if_absent(FLOW, owner=SHARED)
            now = at_ms or int(time.time() * 1000)
            state = ExecutionState.new(
                execution_id=execution_id,
                flow_id=FLOW.flow_id,
                flow_version=FLOW.version,
                fingerprint=FLOW.fingerprint,
                start_node_id="prepare",
                input={},
                now_ms=now,
                tenant_id=current_tenant(),
            )
            if status is ExecutionStatus.SUSPENDED:
                state = state.transition(
                    status, now_ms=now, next_node_id="wait", suspension=Suspension("wait", "s-1")
                )
            elif status is not ExecutionStatus.RUNNING:
                error = ExecutionError(-500, f"{status.value} at wait", "wait")
                state = state.transition(status, now_ms=now, next_node_id="wait", error=error)
            leases = RedisLeaseManager(client, keys)
            lease = await leases.acquire(execution_id, "seed", ttl_ms=60_000)
            assert lease is not None
            await RedisExecutionRepository(client, keys).save(state, fence=lease.generation)
            await leases.release(lease)

        self.seed(body)


@pytest.fixture
def ns() -> Iterator[Namespace]:
    name = f"plaita-e2e-{uuid.uuid4().hex[:12]}"
    namespace = Namespace(name, RedisKeys(name))
    yield namespace

    async def clean(client: redis.Redis, keys: RedisKeys) -> None:
        created = [key async for key in client.scan_iter(match=f"{name}:*", count=1000)]
        if created:
            await client.delete(*created)

    namespace.seed(clean)


# --- single-execution controls -------------------------------------------------------------------


def test_pause_and_unpause_set_the_flag_and_give_a_continue_back(ns: Namespace) -> None:
    ns.execution("x-1", ExecutionStatus.SUSPENDED)

    code, paused = ns.invoke_json("executions", "pause", "x-1")
    assert code == 0
    assert (paused["outcome"], paused["paused"], paused["status"]) == ("paused", True, "suspended")
    assert ns.flags("x-1").paused

    code, out = ns.invoke("executions", "pause", "x-1")
    assert code == 0 and out.startswith("already_paused: x-1")
    code, shown = ns.invoke_json("executions", "show", "x-1")
    assert code == 0 and (shown["paused"], shown["cancel_requested"]) == (True, False)

    code, unpaused = ns.invoke_json("executions", "unpause", "x-1")
    assert code == 0 and (unpaused["outcome"], unpaused["paused"]) == ("unpaused", False)
    [carrier] = ns.carriers()
    assert (carrier.execution_id, carrier.resume_type) == ("x-1", ResumeType.CONTINUE)


def test_cancel_flags_first_and_enqueues_the_cancel_carrier(ns: Namespace) -> None:
    ns.execution("x-1", ExecutionStatus.SUSPENDED)

    code, out = ns.invoke("executions", "cancel", "x-1")

    assert code == 0 and out.startswith("cancel_requested: x-1 (suspended")
    assert ns.flags("x-1").cancel_requested
    [carrier] = ns.carriers()
    assert carrier.resume_type is ResumeType.CANCEL
    state = ns.state("x-1")
    assert state is not None and state.status is ExecutionStatus.SUSPENDED


def test_a_refused_action_exits_1_with_the_named_error(ns: Namespace) -> None:
    ns.execution("x-1", ExecutionStatus.COMPLETED)

    code, out = ns.invoke("executions", "pause", "x-1")
    assert code == 1
    assert "OperatorActionRefusedError" in out and "'x-1': it is completed" in out

    code, out = ns.invoke("executions", "resume", "ghost")
    assert code == 1 and "UnknownExecutionError" in out and "'ghost'" in out
    assert ns.carriers() == []


def test_retry_from_a_node_runs_the_failed_execution_again_under_the_same_id(
    ns: Namespace,
) -> None:
    ns.execution("x-1", ExecutionStatus.ERROR)

    code, retried = ns.invoke_json("executions", "retry", "x-1", "--from-node", "prepare")

    assert code == 0
    assert (retried["outcome"], retried["node_id"], retried["status"]) == (
        "restarted",
        "prepare",
        "running",
    )
    state = ns.state("x-1")
    assert state is not None
    assert (state.status, state.next_node_id, state.error) == (
        ExecutionStatus.RUNNING,
        "prepare",
        None,
    )
    [carrier] = ns.carriers()
    assert (carrier.execution_id, carrier.resume_type) == ("x-1", ResumeType.CONTINUE)


def test_retry_names_the_unknown_node_and_a_running_conflict(ns: Namespace) -> None:
    ns.execution("x-1", ExecutionStatus.ERROR)
    code, out = ns.invoke("executions", "retry", "x-1", "--from-node", "nope")
    assert code == 1 and "UnknownNodeError" in out and "'nope'" in out
    assert "prepare" in out  # the nodes it could have named

    ns.execution("x-2", ExecutionStatus.RUNNING)
    code, out = ns.invoke("executions", "retry", "x-2")
    assert code == 1 and "ExecutionRunningError" in out

    code, out = ns.invoke("executions", "retry", "x-1", "--from-node", " ")
    assert code == 2 and "--from-node" in out
    assert ns.carriers() == []


def test_retry_without_a_node_enqueues_the_w7_wake_up(ns: Namespace) -> None:
    ns.execution("x-1", ExecutionStatus.ERROR)
    code, out = ns.invoke("executions", "retry", "x-1")
    assert code == 0 and out.startswith("wake_up_enqueued: x-1")
    [carrier] = ns.carriers()
    assert carrier.resume_type is ResumeType.RETRY


def test_controls_act_on_the_named_tenant_only(ns: Namespace) -> None:
    """W24: acme's x-1 is another execution than the default tenant's."""
    with tenant_scope("acme"):
        ns.execution("x-1", ExecutionStatus.SUSPENDED)

    code, out = ns.invoke("executions", "pause", "x-1")
    assert code == 1 and "UnknownExecutionError" in out

    code, paused = ns.invoke_json("executions", "pause", "x-1", "--tenant", "acme")
    assert code == 0 and paused["paused"] is True
    assert ns.flags("x-1", "acme").paused and not ns.flags("x-1").paused


# --- listing ----------------------------------------------------------------------------------


def test_list_pages_newest_first_with_a_cursor_and_filters(ns: Namespace) -> None:
    base = int(time.time() * 1000)
    for n in range(3):
        ns.execution(f"s-{n}", ExecutionStatus.SUSPENDED, at_ms=base + n)
    ns.execution("e-0", ExecutionStatus.ERROR, at_ms=base + 10)
    code, _ = ns.invoke("executions", "pause", "s-1")
    assert code == 0

    code, first = ns.invoke_json("executions", "list", "--status", "suspended", "--limit", "2")
    assert code == 0
    assert [i["execution_id"] for i in first["items"]] == ["s-2", "s-1"]
    assert [i["paused"] for i in first["items"]] == [False, True]
    code, second = ns.invoke_json(
        "executions",
        "list",
        "--status",
        "suspended",
        "--limit",
        "2",
        "--cursor",
        first["next_cursor"],
    )
    assert code == 0
    assert ([i["execution_id"] for i in second["items"]], second["next_cursor"]) == (["s-0"], None)

    code, out = ns.invoke("executions", "list", "--flow", "waiting", "--limit", "1")
    assert code == 0 and out.startswith("e-0  waiting@1  error")
    assert "more: --cursor " in out


def test_list_refuses_bad_input_naming_the_value(ns: Namespace) -> None:
    code, out = ns.invoke("executions", "list", "--status", "failed")
    assert code == 2 and "'failed'" in out
    code, out = ns.invoke("executions", "list", "--cursor", "garbage!")
    assert code == 2 and "--cursor" in out and "'garbage!'" in out
    code, out = ns.invoke("executions", "list", "--limit", "501")
    assert code == 2 and "501" in out


# --- bulk -------------------------------------------------------------------------------------


def test_bulk_dry_run_lists_and_changes_nothing(ns: Namespace) -> None:
    for n in range(2):
        ns.execution(f"s-{n}", ExecutionStatus.SUSPENDED)
    code, result = ns.invoke_json(
        "executions", "bulk", "pause", "--status", "suspended", "--dry-run"
    )
    assert code == 0
    assert (result["dry_run"], result["matched"], result["done"]) == (True, 2, 0)
    assert not ns.flags("s-0").paused and not ns.flags("s-1").paused


def test_bulk_cancel_collects_failures_and_exits_1(ns: Namespace) -> None:
    ns.execution("s-0", ExecutionStatus.SUSPENDED)
    ns.execution("c-0", ExecutionStatus.COMPLETED)

    code, out = ns.invoke("executions", "bulk", "cancel", "--flow", "waiting")

    assert code == 1
    assert "failed c-0: OperatorActionRefusedError" in out
    assert "cancel: 2 matched, 1 done (1 cancel_requested), 1 failed" in out
    assert [c.resume_type for c in ns.carriers()] == [ResumeType.CANCEL]


def test_bulk_needs_a_filter_or_all(ns: Namespace) -> None:
    code, out = ns.invoke("executions", "bulk", "pause")
    assert code == 2 and "--all" in out
    ns.execution("s-0", ExecutionStatus.SUSPENDED)
    code, result = ns.invoke_json("executions", "bulk", "pause", "--all")
    assert code == 0 and result["outcomes"] == {"paused": 1}
    code, out = ns.invoke("executions", "bulk", "halt", "--all")
    assert code == 2 and "'halt'" in out


# --- catalog ----------------------------------------------------------------------------------


def test_flows_list_and_show(ns: Namespace) -> None:
    ns.execution("x-1", ExecutionStatus.SUSPENDED)  # registers FLOW
    code, listed = ns.invoke_json("flows", "list")
    assert code == 0
    assert listed["items"] == [
        {
            "flow_id": "waiting",
            "version": "1",
            "fingerprint": FLOW.fingerprint,
            "node_count": 3,
            "tenant_id": None,
            "shared": True,
        }
    ]
    code, shown = ns.invoke_json("flows", "show", "waiting", "--version", "1")
    assert code == 0 and shown["document"]["start"] == "prepare"
    assert {"from": "prepare", "to": "wait", "label": ""} in shown["graph"]["edges"]
    code, out = ns.invoke("flows", "show", "nope")
    assert code == 1 and "UnknownFlowError" in out and "waiting" in out


def test_workers_list_shows_status_and_heartbeat_age(ns: Namespace) -> None:
    now = int(time.time() * 1000)

    async def register(client: redis.Redis, keys: RedisKeys) -> None:
        instance = WorkerInstance("w-1", "running", now - 1500, now - 60_000, "fam", "gen", "bud")
        await RedisWorkerRegistry(client, keys).put(instance, ttl_ms=60_000)

    ns.seed(register)
    code, listed = ns.invoke_json("workers", "list")
    assert code == 0
    [worker] = listed["items"]
    assert (worker["instance_id"], worker["status"], worker["budget_generation"]) == (
        "w-1",
        "running",
        "bud",
    )
    assert 1500 <= worker["heartbeat_age_ms"] < 60_000
    code, out = ns.invoke("workers", "list")
    assert code == 0 and out.startswith("w-1  running")


# --- what happened: start (pending), show, history ---------------------------------------------


def test_a_started_execution_is_pending_in_show_and_history_at_once(ns: Namespace) -> None:
    ns.execution("seed-flow", ExecutionStatus.COMPLETED)  # registers FLOW in the namespace
    code, out = ns.invoke("executions", "start", "waiting", "--input", '{"order": 7}')
    assert code == 0, out
    execution_id = out.strip()

    code, shown = ns.invoke_json("executions", "show", execution_id)
    assert code == 0 and shown["status"] == "pending" and shown["next_node_id"] == "prepare"
    assert shown["history"]["entries"] == 1 and shown["history"]["last_kind"] == "accepted"
    code, out = ns.invoke("executions", "show", execution_id)
    assert code == 0 and "for a worker to pick it up" in out

    code, out = ns.invoke("executions", "history", execution_id, "--json")
    assert code == 0, out
    first, accepted = (json.loads(line) for line in out.splitlines())
    assert first == {"execution_id": execution_id, "dropped": 0}
    assert accepted["kind"] == "accepted" and accepted["detail"]["via"] == "cli"
    code, out = ns.invoke("executions", "history", execution_id)
    assert code == 0 and "accepted" in out and "input_bytes" in out


def test_show_prints_the_last_failure_and_its_next_retry(ns: Namespace) -> None:
    from plaita.domain.execution import NodeFailure

    now = int(time.time() * 1000)

    async def body(client: redis.Redis, keys: RedisKeys) -> None:
        await RedisFlowRepository(client, keys).put_if_absent(FLOW, owner=SHARED)
        state = ExecutionState.new(
            execution_id="failing-1",
            flow_id=FLOW.flow_id,
            flow_version=FLOW.version,
            fingerprint=FLOW.fingerprint,
            start_node_id="prepare",
            input={},
            now_ms=now,
        )
        failing = attrs.evolve(
            state,
            last_failure=NodeFailure.of(
                node_id="prepare",
                attempt=2,
                error_class="ConnectionError",
                message="upstream busy",
                transient=True,
                at_ms=now,
                retry_at_ms=now + 60_000,
            ),
        )
        leases = RedisLeaseManager(client, keys)
        lease = await leases.acquire("failing-1", "seed", ttl_ms=60_000)
        assert lease is not None
        await RedisExecutionRepository(client, keys).save(failing, fence=lease.generation)
        await leases.release(lease)

    ns.seed(body)
    code, out = ns.invoke("executions", "show", "failing-1")
    assert code == 0, out
    assert "attempt 2 of node prepare" in out
    assert "ConnectionError (transient): upstream busy" in out
    assert "next retry" in out and "(in " in out
    code, shown = ns.invoke_json("executions", "show", "failing-1")
    assert shown["last_failure"]["retry_at_ms"] == now + 60_000


def test_history_of_an_unknown_execution_is_a_named_error(ns: Namespace) -> None:
    code, out = ns.invoke("executions", "history", "nobody")
    assert code == 1 and "UnknownExecutionError" in out and "never started" in out


# --- affinity: start on one worker instance ----------------------------------------------------


def test_start_with_a_target_instance_addresses_its_carrier_to_it(ns: Namespace) -> None:
    ns.execution("seed-flow", ExecutionStatus.COMPLETED)  # registers FLOW in the namespace
    code, out = ns.invoke("executions", "start", "waiting", "--target-instance", "worker-b")
    assert code == 0, out
    execution_id = out.strip()

    [carrier] = ns.carriers()
    assert (carrier.execution_id, carrier.target_instance_id) == (execution_id, "worker-b")
    code, out = ns.invoke("executions", "history", execution_id, "--json")
    accepted = json.loads(out.splitlines()[1])
    assert accepted["detail"]["target"] == "worker-b"


@pytest.mark.parametrize("target", ["", "two words", "a/b"])
def test_start_with_a_bad_target_instance_exits_2_with_one_line(ns: Namespace, target: str) -> None:
    ns.execution("seed-flow", ExecutionStatus.COMPLETED)
    code, out = ns.invoke("executions", "start", "waiting", "--target-instance", target)
    assert code == 2
    assert "InvalidTargetInstanceError" in out and "--target-instance" in out
    assert "Traceback" not in out
    assert ns.carriers() == []


# --- priorities: which starts workers take first -------------------------------------------


@pytest.mark.parametrize("level", ["high", "low"])
def test_start_with_a_priority_puts_its_carrier_on_that_level(ns: Namespace, level: str) -> None:
    ns.execution("seed-flow", ExecutionStatus.COMPLETED)  # registers FLOW in the namespace
    code, out = ns.invoke("executions", "start", "waiting", "--priority", level)
    assert code == 0, out
    execution_id = out.strip()

    [carrier] = ns.carriers()
    assert (carrier.execution_id, carrier.priority) == (execution_id, Priority(level))
    code, out = ns.invoke("executions", "history", execution_id, "--json")
    accepted = json.loads(out.splitlines()[1])
    assert accepted["detail"]["priority"] == level
    code, out = ns.invoke("executions", "show", execution_id, "--json")
    assert json.loads(out)["history"]["priority"] == level
    code, out = ns.invoke("executions", "show", execution_id)
    assert f"priority {level} (asked for at its start)" in " ".join(out.split())


def test_a_start_without_a_priority_is_normal_and_says_nothing_of_it(ns: Namespace) -> None:
    ns.execution("seed-flow", ExecutionStatus.COMPLETED)
    code, out = ns.invoke("executions", "start", "waiting")
    assert code == 0, out

    [carrier] = ns.carriers()
    assert carrier.priority is Priority.NORMAL
    execution_id = out.strip()
    code, out = ns.invoke("executions", "history", execution_id, "--json")
    assert "priority" not in json.loads(out.splitlines()[1])["detail"]
    code, out = ns.invoke("executions", "show", execution_id, "--json")
    assert json.loads(out)["history"]["priority"] is None
    code, out = ns.invoke("executions", "show", execution_id)
    assert "priority" not in out


@pytest.mark.parametrize("level", ["urgent", "HIGH", ""])
def test_start_with_a_bad_priority_exits_2_naming_the_allowed_ones(
    ns: Namespace, level: str
) -> None:
    ns.execution("seed-flow", ExecutionStatus.COMPLETED)
    code, out = ns.invoke("executions", "start", "waiting", "--priority", level)
    assert code == 2
    assert "InvalidPriorityError" in out and "high, normal, low" in out
    assert "Traceback" not in out
    assert ns.carriers() == []
