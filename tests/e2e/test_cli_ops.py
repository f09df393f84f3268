"""Operator commands on real Redis: `dlq list|show|replay`, `executions delete`, `reap` (C4).

The commands talk to Redis only, so each test seeds its own namespace through the Redis
adapters and drives the command through click, as an operator would.
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
import click
import pytest
import redis.asyncio as redis
from click.testing import CliRunner

from plaita.adapters.redis.flows import RedisFlowRepository
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.application.tenancy import current_tenant, tenant_scope
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.execution import ExecutionState
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.cli_ops import delete_execution, dlq, reap

from .conftest import seeding_scope

T = TypeVar("T")
REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")
UNREACHABLE = "redis://127.0.0.1:1/0"
requires_redis = pytest.mark.skipif(
    not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"
)
FLOW = Flow.from_document(
    {
        "flow_id": "waiting",
        "start": "wait",
        "nodes": [
            {"id": "wait", "type": "event", "event_type": "go", "next": "done"},
            {"id": "done", "type": "end"},
        ],
    }
)
DAY_MS = 24 * 3600 * 1000


@attrs.frozen
class Namespace:
    name: str
    keys: RedisKeys

    def invoke(self, command: click.Command, *args: str) -> tuple[int, str]:
        assert REDIS_URL is not None
        result = CliRunner().invoke(
            command,
            [*args, "--redis-url", REDIS_URL],
            env={"PLAITA_NAMESPACE": self.name},
            catch_exceptions=False,
        )
        return result.exit_code, result.output

    def invoke_json(self, command: click.Command, *args: str) -> tuple[int, Any]:
        code, out = self.invoke(command, *args, "--json")
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


def start(execution_id: str = "x-1", tenant_id: str = "default") -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="waiting",
        version="1",
        params={},
        now_ms=int(time.time() * 1000),
        tenant_id=tenant_id,
        generations=LEGACY_GENERATIONS,
    )


def dead_letter(ns: Namespace, envelope: TaskEnvelope) -> str:
    async def body(client: redis.Redis, keys: RedisKeys) -> str:
        queue = RedisTaskQueue(client, keys)
        await queue.ensure_group()
        await queue.enqueue(envelope)
        [delivery] = await queue.read("test", count=1, block_ms=10)
        return await queue.dead_letter(delivery, "unknown_flow: no such flow")

    return ns.seed(body)


def new_carriers(ns: Namespace) -> list[TaskEnvelope]:
    async def body(client: redis.Redis, keys: RedisKeys) -> list[TaskEnvelope]:
        queue = RedisTaskQueue(client, keys)
        await queue.ensure_group()
        deliveries = await queue.read("probe", count=100, block_ms=10)
        return [d.envelope for d in deliveries if d.envelope is not None]

    return ns.seed(body)


def running(ns: Namespace, execution_id: str, *, idle_ms: int) -> None:
    async def body(client: redis.Redis, keys: RedisKeys) -> None:
        await RedisFlowRepository(client, keys).put_if_absent(FLOW, owner=SHARED)
        state = ExecutionState.new(
            execution_id=execution_id,
            flow_id=FLOW.flow_id,
            flow_version=FLOW.version,
            fingerprint=FLOW.fingerprint,
            start_node_id="wait",
            input={},
            now_ms=int(time.time() * 1000) - idle_ms,
            tenant_id=current_tenant(),
        )
        leases = RedisLeaseManager(client, keys)
        lease = await leases.acquire(execution_id, "gone-worker", ttl_ms=60_000)
        assert lease is not None
        await RedisExecutionRepository(client, keys).save(state, fence=lease.generation)
        await leases.release(lease)

    ns.seed(body)


@requires_redis
def test_dlq_list_show_and_replay_once(ns: Namespace) -> None:
    dlq_id = dead_letter(ns, start())
    code, listed = ns.invoke_json(dlq, "list", "--count", "5")
    assert code == 0
    [entry] = listed["items"]
    assert (entry["dlq_id"], entry["execution_id"], entry["replayed"]) == (dlq_id, "x-1", None)

    code, shown = ns.invoke_json(dlq, "show", dlq_id)
    assert code == 0 and shown["reason"] == "unknown_flow: no such flow"

    code, replayed = ns.invoke_json(dlq, "replay", dlq_id)
    assert code == 0 and replayed["outcome"] == "replayed"
    code, again = ns.invoke_json(dlq, "replay", dlq_id)
    assert code == 0 and again["outcome"] == "already_replayed"
    assert [c.execution_id for c in new_carriers(ns)] == ["x-1"]

    marker_key = ns.keys.dlq_replayed(ns.keys.queue_dead_letters("default"), dlq_id)
    ttl_ms = ns.seed(lambda client, keys: client.pttl(marker_key))
    assert 7 * DAY_MS - 60_000 < ttl_ms <= 7 * DAY_MS, "the marker lasts 7 days (W10)"
    code, out = ns.invoke(dlq, "list")
    assert code == 0 and dlq_id in out and "[replayed]" in out


@requires_redis
def test_a_refused_replay_exits_1_and_says_why(ns: Namespace) -> None:
    dlq_id = dead_letter(ns, start(tenant_id="acme"))
    code, out = ns.invoke(dlq, "replay", dlq_id, "--tenant", "globex")
    assert code == 1 and "tenant_mismatch" in out and "acme" in out
    assert new_carriers(ns) == []


@requires_redis
def test_an_unknown_dlq_id_is_refused_by_name(ns: Namespace) -> None:
    code, out = ns.invoke(dlq, "show", "1-0")
    assert code == 1 and "UnknownDeadLetterError" in out


@requires_redis
def test_executions_delete_twice_keeps_the_first_deleted_at(ns: Namespace) -> None:
    running(ns, "x-1", idle_ms=0)
    code, first = ns.invoke_json(delete_execution, "x-1", "--reason", "gdpr request")
    assert code == 0 and first["deleted_now"] is True
    assert first["tombstone"]["reason"] == "gdpr request"
    code, second = ns.invoke_json(delete_execution, "x-1", "--reason", "again")
    assert code == 0 and second["deleted_now"] is False
    assert second["tombstone"] == first["tombstone"]

    async def stored(client: redis.Redis, keys: RedisKeys) -> tuple[Any, int]:
        repository = RedisExecutionRepository(client, keys)
        return await repository.load("x-1"), await client.pttl(keys.tombstone("x-1"))

    state, ttl_ms = ns.seed(stored)
    assert state is None
    assert 29 * DAY_MS < ttl_ms <= 30 * DAY_MS, "a tombstone lasts >= 30 days (W13)"


@requires_redis
def test_deleting_an_unknown_execution_is_refused_by_name(ns: Namespace) -> None:
    code, out = ns.invoke(delete_execution, "nope")
    assert code == 1 and "UnknownExecutionError" in out and "'nope'" in out


@requires_redis
def test_reap_dry_run_lists_and_reap_requeues_the_orphan(ns: Namespace) -> None:
    running(ns, "orphan", idle_ms=3600_000)
    running(ns, "recent", idle_ms=0)
    code, report = ns.invoke_json(reap, "--dry-run")
    assert code == 0 and report["dry_run"] is True
    actions = {item["execution_id"]: item["action"] for item in report["items"]}
    assert actions == {"orphan": "requeue", "recent": "skip_recent"}
    assert new_carriers(ns) == []

    code, out = ns.invoke(reap)
    assert code == 0 and "requeue orphan" in out and "1 skip_recent" in out
    [carrier] = new_carriers(ns)
    assert (carrier.execution_id, carrier.resume_type) == ("orphan", ResumeType.CONTINUE)


def test_operator_commands_name_an_unreachable_redis() -> None:
    for command, args in ((dlq, ["list"]), (delete_execution, ["x"]), (reap, ["--dry-run"])):
        result = CliRunner().invoke(command, [*args, "--redis-url", UNREACHABLE])
        assert result.exit_code == 1
        assert f"cannot reach Redis at {UNREACHABLE}" in result.output


@requires_redis
def test_operator_commands_act_on_the_named_tenant_only(ns: Namespace) -> None:
    """W24: --tenant picks the namespace; another tenant's x-1 is another execution."""
    with tenant_scope("acme"):
        running(ns, "x-1", idle_ms=3600_000)

    code, out = ns.invoke(delete_execution, "x-1")
    assert code == 1 and "UnknownExecutionError" in out
    code, report = ns.invoke_json(reap, "--dry-run")
    assert code == 0 and report["items"] == []

    code, report = ns.invoke_json(reap, "--dry-run", "--tenant", "acme")
    assert code == 0 and [item["execution_id"] for item in report["items"]] == ["x-1"]
    code, deleted = ns.invoke_json(delete_execution, "x-1", "--tenant", "acme")
    assert code == 0 and deleted["tombstone"]["tenant_id"] == "acme"


@requires_redis
def test_an_invalid_tenant_is_refused_by_name(ns: Namespace) -> None:
    code, out = ns.invoke(delete_execution, "x-1", "--tenant", "acme:eu")
    assert code == 1 and "InvalidTenantIdError" in out and "'acme:eu'" in out
