"""``Client.start(..., target_instance_id=...)`` (W25) on the memory twin, a Redis node and a
Redis Cluster: a start for the embedded worker runs there; one for an instance that is not
running loses its target and runs anyway; a bad target is refused by name."""

from __future__ import annotations

import pytest

import plaita
from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import InvalidTargetInstanceError
from plaita.domain.history import HistoryEntry

from .conftest import APPROVAL, HANDLER_MODULES, wait_for_status

pytestmark = pytest.mark.timeout(60)


async def history(client: plaita.Client, execution_id: str) -> list[HistoryEntry]:
    with tenant_scope(client.tenant_id):
        page = await client.container.executions().history(execution_id, limit=500)
    return list(page.entries)


async def test_a_start_for_the_embedded_worker_runs_there(url: str) -> None:
    async with (
        plaita.Client(url) as client,
        plaita.Worker(client, handler_modules=HANDLER_MODULES) as worker,
    ):
        await client.register(APPROVAL)
        handle = await client.start(
            "sdk_approval", {"amount": 5}, target_instance_id=worker.instance_id
        )
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED)
        entries = await history(client, handle.execution_id)

    accepted = next(e for e in entries if e.kind.value == "accepted")
    started = next(e for e in entries if e.kind.value == "started")
    assert accepted.detail["target"] == worker.instance_id
    assert started.worker == worker.instance_id
    assert not [e for e in entries if e.kind.value in {"handed_over", "target_stripped"}]


async def test_a_start_for_an_instance_that_is_not_running_runs_on_any(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(APPROVAL)
        handle = await client.start("sdk_approval", {"amount": 5}, target_instance_id="gone-1")
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED)
        entries = await history(client, handle.execution_id)

    [stripped] = [e for e in entries if e.kind.value == "target_stripped"]
    assert stripped.detail == {"target": "gone-1", "handovers": 0, "reason": "target_absent"}


async def test_a_bad_target_is_refused_by_name_and_starts_nothing(url: str) -> None:
    async with plaita.Client(url) as client:
        await client.register(APPROVAL)
        with pytest.raises(InvalidTargetInstanceError, match="target instance id"):
            await client.start("sdk_approval", {"amount": 5}, target_instance_id="no/slash")
        pages = [page async for page in client.executions()]
        assert [item for page in pages for item in page.items] == []


def test_the_sync_client_passes_the_target_on() -> None:
    with plaita.SyncClient("memory://") as client:
        client.register(APPROVAL)
        with pytest.raises(InvalidTargetInstanceError):
            client.start("sdk_approval", {"amount": 5}, target_instance_id="")
        handle = client.start("sdk_approval", {"amount": 5}, target_instance_id="worker-b")
        assert handle.status() is plaita.ExecutionStatus.PENDING
