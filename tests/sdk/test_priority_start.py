"""``Client.start(..., priority=...)`` on the memory twin, a Redis node and a Redis Cluster:
a high start runs and records its priority; a bad priority is refused by name and starts
nothing; ``SyncClient`` passes it on."""

from __future__ import annotations

import pytest

import plaita
from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import InvalidPriorityError

from .conftest import APPROVAL, HANDLER_MODULES, wait_for_status

pytestmark = pytest.mark.timeout(60)


async def accepted_detail(client: plaita.Client, execution_id: str) -> dict[str, object]:
    with tenant_scope(client.tenant_id):
        page = await client.container.executions().history(execution_id, limit=500)
    return dict(next(e for e in page.entries if e.kind.value == "accepted").detail)


async def test_a_high_start_runs_and_records_its_priority(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(APPROVAL)
        handle = await client.start("sdk_approval", {"amount": 5}, priority="high")
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED)
        detail = await accepted_detail(client, handle.execution_id)

    assert detail["priority"] == "high"


async def test_a_bad_priority_is_refused_by_name_and_starts_nothing(url: str) -> None:
    async with plaita.Client(url) as client:
        await client.register(APPROVAL)
        with pytest.raises(InvalidPriorityError, match="high, normal, low"):
            await client.start("sdk_approval", {"amount": 5}, priority="urgent")
        pages = [page async for page in client.executions()]
        assert [item for page in pages for item in page.items] == []


def test_the_sync_client_passes_the_priority_on() -> None:
    with plaita.SyncClient("memory://") as client:
        client.register(APPROVAL)
        with pytest.raises(InvalidPriorityError):
            client.start("sdk_approval", {"amount": 5}, priority="HIGH")
        handle = client.start("sdk_approval", {"amount": 5}, priority="low")
        assert handle.status() is plaita.ExecutionStatus.PENDING
