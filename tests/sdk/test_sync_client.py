"""plaita.SyncClient: the client's methods, blocking, from a thread with no event loop; a
worker runs in the test's loop (as a separate worker process would)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import plaita
from plaita.domain.errors import UnknownExecutionError

from .conftest import APPROVAL, HANDLER_MODULES

pytestmark = pytest.mark.timeout(60)


def approve_from_a_thread(url: str) -> dict[str, Any]:
    """What a Django view or a script does: start, wait for the wait, publish, result."""
    assert threading.current_thread() is not threading.main_thread()
    with plaita.SyncClient(url) as client:
        client.register(APPROVAL)
        handle = client.start("sdk_approval", {"amount": 11})
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if handle.status() is plaita.ExecutionStatus.SUSPENDED:
                    break
            except UnknownExecutionError:
                pass
            time.sleep(0.02)
        client.publish("expense.decided", {"approved": True}, correlation_id=handle.execution_id)
        result: dict[str, Any] = handle.result(timeout=20)
        pages = list(client.executions("sdk_approval"))
        assert [item.execution_id for page in pages for item in page.items] == [handle.execution_id]
        return result


@pytest.mark.parametrize("store", ["redis", "cluster"])
async def test_a_sync_client_in_a_plain_thread_drives_an_approval(
    store: str, namespace: str
) -> None:
    from .conftest import store_url

    url = store_url(store)
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        result = await asyncio.to_thread(approve_from_a_thread, url)
    assert result == {"approved": True, "amount": 11}


async def test_a_sync_client_refuses_to_block_a_running_loop() -> None:
    client = plaita.SyncClient("memory://")
    with pytest.raises(plaita.SyncClientInEventLoopError, match=r"plaita\.Client"):
        client.open()
    with pytest.raises(plaita.SyncClientInEventLoopError, match=r"SyncClient.publish\(\)"):
        client.publish("anything")


def test_a_closed_sync_client_says_how_to_open_it() -> None:
    client = plaita.SyncClient("memory://")
    with pytest.raises(plaita.ClientClosedError, match="with SyncClient"):
        client.publish("anything")
    with client:
        assert client.publish("anything", {"n": 1})
    client.close()  # twice is harmless
    with pytest.raises(plaita.ClientClosedError):
        client.handle("some-id").status()
