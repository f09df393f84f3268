"""plaita.Client and plaita.Worker end to end, in one event loop, on the memory twin, a Redis
node and a Redis Cluster: start → suspended → publish → result().

The result is awaited on the end notices: the fallback re-read is set to a minute here, so a
test that passes got its answer from a notice (a missing notice would time out).
"""

from __future__ import annotations

import asyncio

import pytest

import plaita

from .conftest import APPROVAL, FAILING, HANDLER_MODULES, wait_for_status

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def no_fallback_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    from plaita.application.use_cases import results

    monkeypatch.setattr(results, "FALLBACK_POLL_S", 60.0)


async def test_start_suspend_publish_and_await_the_result(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        registration = await client.register(APPROVAL)
        assert registration.created
        handle = await client.start("sdk_approval", {"amount": 42})
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED)
        event_id = await client.publish(
            "expense.decided", {"approved": True}, correlation_id=handle.execution_id
        )
        assert event_id
        assert await handle.result(timeout=20) == {"approved": True, "amount": 42}
        assert await handle.status() is plaita.ExecutionStatus.COMPLETED


async def test_a_result_awaited_before_the_event_arrives_when_it_ends(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(APPROVAL)
        handle = await client.start("sdk_approval", {"amount": 7})
        waiting = asyncio.create_task(handle.result(timeout=20))
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED)
        assert not waiting.done()
        await client.publish(
            "expense.decided", {"approved": False}, correlation_id=handle.execution_id
        )
        assert await waiting == {"approved": False, "amount": 7}


async def test_result_of_a_failing_flow_raises_the_recorded_error(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(FAILING)
        handle = await client.start("sdk_failing", {"amount": 13})
        with pytest.raises(plaita.ExecutionFailedError) as failed:
            await handle.result(timeout=20)
    error = failed.value.error
    assert isinstance(error, plaita.ExecutionError)
    assert error.node_id == "refuse"
    assert "amount 13 is not allowed" in error.message
    assert failed.value.execution_id == handle.execution_id


async def test_result_times_out_by_name_and_the_execution_goes_on(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(APPROVAL)
        handle = await client.start("sdk_approval", {"amount": 1})
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED)
        with pytest.raises(plaita.ResultTimeoutError) as timed_out:
            await handle.result(timeout=0.2)
        assert timed_out.value.status == "suspended"
        assert "call result() again" in str(timed_out.value)
        assert await handle.status() is plaita.ExecutionStatus.SUSPENDED


async def test_a_cancelled_execution_raises_cancelled(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(APPROVAL)
        handle = await client.start("sdk_approval", {"amount": 5})
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED)
        await handle.cancel()
        with pytest.raises(plaita.ExecutionCancelledError):
            await handle.result(timeout=20)


async def test_dedup_key_returns_the_first_execution(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(APPROVAL)
        first = await client.start("sdk_approval", {"amount": 3}, dedup_key="order-17")
        again = await client.start("sdk_approval", {"amount": 3}, dedup_key="order-17")
        assert again.execution_id == first.execution_id
        assert again.deduplicated and not first.deduplicated


async def test_executions_lists_pages_of_the_tenants_executions(url: str) -> None:
    async with (
        plaita.Client(url, tenant="acme") as client,
        plaita.Worker(client, handler_modules=HANDLER_MODULES),
    ):
        await client.register(APPROVAL)
        handles = [await client.start("sdk_approval", {"amount": n}) for n in range(3)]
        for handle in handles:
            await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED)
        pages = [page async for page in client.executions("sdk_approval", limit=2)]
    listed = [item.execution_id for page in pages for item in page.items]
    assert sorted(listed) == sorted(h.execution_id for h in handles)
    assert all(len(page.items) <= 2 for page in pages)
    assert pages[-1].next_cursor is None
    assert {item.status for page in pages for item in page.items} == {
        plaita.ExecutionStatus.SUSPENDED
    }


async def test_pause_unpause_and_retry_from_the_handle(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(APPROVAL)
        handle = await client.start("sdk_approval", {"amount": 9})
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED)
        paused = await handle.pause()
        assert paused.outcome == "paused"
        unpaused = await handle.unpause()
        assert unpaused.outcome == "unpaused"
        await client.publish(
            "expense.decided", {"approved": True}, correlation_id=handle.execution_id
        )
        assert await handle.result(timeout=20) == {"approved": True, "amount": 9}
        with pytest.raises(plaita.PlaitaError):
            await handle.retry()  # a completed execution is not retried
