"""ExecutionControls contract (W23), run against memory, fakeredis (bytes and str) and Redis.

Flags set and cleared without a lease, the pause gate parking atomically with its read, the
same carrier parked once, stranded carriers reported, tenants kept apart (W24), and a clear
that leaves nothing behind (W13).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.controls import MemoryExecutionControls
from plaita.adapters.redis.controls import RedisExecutionControls
from plaita.adapters.redis.keys import RedisKeys
from plaita.application.ports import Clock, ExecutionControls
from plaita.application.tenancy import no_tenant_scope, tenant_scope
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.errors import TenantContextMissingError
from plaita.domain.operator_controls import ControlFlags

NOW_MS = 1_760_000_000_000


def carrier(
    resume_type: ResumeType = ResumeType.EVENT,
    *,
    execution_id: str = "x:1",
    at_ms: int = NOW_MS,
    tenant_id: str = "default",
    event_id: str = "ev-1",
) -> TaskEnvelope:
    return TaskEnvelope.resume(
        execution_id=execution_id,
        flow_id="f",
        resume_type=resume_type,
        now_ms=at_ms,
        event={"event_id": event_id, "data": {"ok": True}}
        if resume_type is ResumeType.EVENT
        else None,
        subscription_id="sub-1" if resume_type is ResumeType.EVENT else None,
        tenant_id=tenant_id,
        generations=LEGACY_GENERATIONS,
    )


class ExecutionControlsContract:
    @pytest.fixture
    def controls(self) -> ExecutionControls:
        raise NotImplementedError

    async def test_an_execution_never_controlled_has_no_flags(
        self, controls: ExecutionControls
    ) -> None:
        assert await controls.get("x:1") == ControlFlags()
        assert await controls.parked("x:1") == []

    async def test_flags_are_set_and_cleared_independently(
        self, controls: ExecutionControls
    ) -> None:
        assert await controls.set_flags("x:1", paused=True) == ControlFlags(paused=True)
        both = await controls.set_flags("x:1", cancel_requested=True)
        assert both == ControlFlags(paused=True, cancel_requested=True)
        assert await controls.set_flags("x:1", paused=False) == ControlFlags(cancel_requested=True)
        assert await controls.set_flags("x:1") == ControlFlags(cancel_requested=True)
        assert await controls.get("x:1") == ControlFlags(cancel_requested=True)
        assert await controls.get("x:2") == ControlFlags()

    async def test_a_carrier_of_an_execution_not_paused_is_admitted(
        self, controls: ExecutionControls
    ) -> None:
        admission = await controls.admit(carrier(), parkable=True)

        assert (admission.parked, admission.flags, admission.stranded) == (
            False,
            ControlFlags(),
            (),
        )
        assert await controls.parked("x:1") == []

    async def test_a_paused_executions_carrier_is_parked_whole(
        self, controls: ExecutionControls
    ) -> None:
        await controls.set_flags("x:1", paused=True)
        event = carrier()

        admission = await controls.admit(event, parkable=True)

        assert admission.parked
        assert admission.flags == ControlFlags(paused=True, parked=1)
        [parked] = await controls.parked("x:1")
        assert parked.envelope == event
        assert (await controls.get("x:1")).parked == 1

    async def test_the_same_carrier_parked_twice_is_kept_once(
        self, controls: ExecutionControls
    ) -> None:
        await controls.set_flags("x:1", paused=True)
        await controls.admit(carrier(), parkable=True)
        again = await controls.admit(carrier(), parkable=True)
        other = await controls.admit(carrier(event_id="ev-2", at_ms=NOW_MS - 5), parkable=True)

        assert again.flags.parked == 1 and other.flags.parked == 2
        parked = await controls.parked("x:1")
        # Oldest carrier first: the order they are given back in.
        assert [p.envelope.event["event_id"] for p in parked if p.envelope.event] == [
            "ev-2",
            "ev-1",
        ]

    async def test_a_carrier_that_may_not_be_parked_passes_a_pause(
        self, controls: ExecutionControls
    ) -> None:
        await controls.set_flags("x:1", paused=True)

        admission = await controls.admit(carrier(ResumeType.CANCEL), parkable=False)

        assert not admission.parked
        assert admission.flags == ControlFlags(paused=True)

    async def test_a_cancel_request_lets_every_carrier_through_a_pause(
        self, controls: ExecutionControls
    ) -> None:
        await controls.set_flags("x:1", paused=True, cancel_requested=True)

        admission = await controls.admit(carrier(), parkable=True)

        assert not admission.parked
        assert admission.flags == ControlFlags(paused=True, cancel_requested=True)

    async def test_carriers_parked_while_not_paused_are_reported_stranded(
        self, controls: ExecutionControls
    ) -> None:
        await controls.set_flags("x:1", paused=True)
        await controls.admit(carrier(), parkable=True)
        await controls.set_flags("x:1", paused=False)

        admission = await controls.admit(carrier(ResumeType.CONTINUE), parkable=True)

        assert not admission.parked
        [stranded] = admission.stranded
        assert stranded.envelope == carrier()
        assert (await controls.get("x:1")).parked == 1  # reported, not removed

    async def test_unpark_forgets_only_the_carriers_named(
        self, controls: ExecutionControls
    ) -> None:
        await controls.set_flags("x:1", paused=True)
        await controls.admit(carrier(event_id="ev-1"), parkable=True)
        await controls.admit(carrier(event_id="ev-2"), parkable=True)
        first, second = await controls.parked("x:1")

        assert await controls.unpark("x:1", [first.carrier_id, "unknown", first.carrier_id]) == 1
        assert await controls.unpark("x:1", []) == 0

        assert await controls.parked("x:1") == [second]

    async def test_clear_removes_flags_and_parked_carriers(
        self, controls: ExecutionControls
    ) -> None:
        await controls.set_flags("x:1", paused=True, cancel_requested=True)
        await controls.admit(carrier(ResumeType.CONTINUE), parkable=True)
        await controls.set_flags("x:1", cancel_requested=False)
        await controls.admit(carrier(), parkable=True)

        await controls.clear("x:1")
        await controls.clear("x:1")

        assert await controls.get("x:1") == ControlFlags()
        assert await controls.parked("x:1") == []

    async def test_get_many_reads_every_execution_asked_for(
        self, controls: ExecutionControls
    ) -> None:
        await controls.set_flags("x:1", paused=True)
        await controls.set_flags("x:3", cancel_requested=True)

        flags = await controls.get_many(["x:1", "x:2", "x:3", "x:1"])

        assert dict(flags) == {
            "x:1": ControlFlags(paused=True),
            "x:2": ControlFlags(),
            "x:3": ControlFlags(cancel_requested=True),
        }
        assert await controls.get_many([]) == {}

    async def test_tenants_have_their_own_flags(self, controls: ExecutionControls) -> None:
        """W24: acme pausing its x:1 never pauses the default tenant's x:1."""
        with tenant_scope("acme"):
            await controls.set_flags("x:1", paused=True)
            parked = await controls.admit(carrier(tenant_id="acme"), parkable=True)
            assert parked.parked

        assert await controls.get("x:1") == ControlFlags()
        assert not (await controls.admit(carrier(), parkable=True)).parked
        with tenant_scope("acme"):
            assert await controls.get("x:1") == ControlFlags(paused=True, parked=1)

    async def test_flags_outside_a_tenant_scope_fail_closed(
        self, controls: ExecutionControls
    ) -> None:
        with no_tenant_scope(), pytest.raises(TenantContextMissingError):
            await controls.set_flags("x:1", paused=True)


class TestMemoryExecutionControls(ExecutionControlsContract):
    @pytest.fixture
    def controls(self, clock: Clock) -> ExecutionControls:
        return MemoryExecutionControls(clock)


class RedisExecutionControlsContract(ExecutionControlsContract):
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def controls(self, client: redis.Redis, keys: RedisKeys) -> ExecutionControls:
        return RedisExecutionControls(client, keys)

    async def test_flags_live_in_the_executions_hash_tag_without_a_ttl(
        self, controls: ExecutionControls, client: redis.Redis, keys: RedisKeys, namespace: str
    ) -> None:
        await controls.set_flags("x:1", paused=True)
        await controls.admit(carrier(), parkable=True)

        assert keys.execution_control("x:1") == f"{namespace}:x:{{x:1}}:control"
        assert keys.execution_parked("x:1") == f"{namespace}:x:{{x:1}}:parked"
        assert await client.pttl(keys.execution_control("x:1")) == -1
        assert await client.pttl(keys.execution_parked("x:1")) == -1

    async def test_clearing_the_last_flag_removes_the_key(
        self, controls: ExecutionControls, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await controls.set_flags("x:1", paused=True)
        await controls.set_flags("x:1", paused=False)

        assert await client.exists(keys.execution_control("x:1")) == 0

    async def test_the_gate_costs_one_round_trip(
        self, controls: ExecutionControls, client: redis.Redis
    ) -> None:
        await controls.admit(carrier(), parkable=True)  # loads the script
        sent: list[list[object]] = []
        original = client.pipeline

        def counting(*args: Any, **options: Any) -> Any:
            # The gate's script shares the tick's pipeline: one pipeline is one round trip.
            pipe = original(*args, **options)
            queued: list[object] = []
            queue, execute = pipe.execute_command, pipe.execute

            def recorded(*command: Any, **named: Any) -> Any:
                queued.append(command[0])
                return queue(*command, **named)

            async def counted(*call: Any, **named: Any) -> Any:
                sent.append(queued)
                return await execute(*call, **named)

            pipe.execute_command, pipe.execute = recorded, counted
            return pipe

        client.pipeline = counting  # type: ignore[method-assign]
        try:
            await controls.admit(carrier(), parkable=True)
        finally:
            client.pipeline = original  # type: ignore[method-assign]
        assert sent == [["EVALSHA"]]


class TestFakeRedisExecutionControls(RedisExecutionControlsContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisExecutionControls(RedisExecutionControlsContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
