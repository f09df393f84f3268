"""Parallel branches on a worker (E12), through plaita.Client and plaita.Worker on the memory
twin, a Redis node and a Redis Cluster: two branches each wait for their own event at the
same time; the events come in either order, and twice; the join runs once, after both
(``wait: all``) or after the first (``wait: any``, the other branch recorded as cancelled).
"""

from __future__ import annotations

from typing import Any

import pytest

import plaita

from .conftest import HANDLER_MODULES, wait_for_status

pytestmark = pytest.mark.timeout(90)


def approvals(wait: str) -> dict[str, Any]:
    return {
        "flow_id": f"sdk_two_approvals_{wait}",
        "start": "fan",
        "nodes": [
            {
                "id": "fan",
                "type": "parallel",
                "branches": ["legal", "finance"],
                "join": "both",
                "wait": wait,
            },
            {"id": "legal", "type": "event", "event_type": "legal.ok", "next": "legal_done"},
            {
                "id": "legal_done",
                "type": "task",
                "handler": "tests.sdk.handlers:submit",
                "params": {"amount": "${$NODE['legal']['data']['v']}"},
                "next": "both",
            },
            {"id": "finance", "type": "event", "event_type": "finance.ok", "next": "both"},
            {
                "id": "both",
                "type": "end",
                "output": "{'legal': NODE.get('legal_done', {}).get('amount'), "
                "'finance': NODE['finance'].get('data', NODE['finance'])}",
            },
        ],
    }


@pytest.mark.parametrize("order", [("legal", "finance"), ("finance", "legal")])
async def test_both_branches_wait_at_once_and_the_join_runs_once(
    url: str, order: tuple[str, str]
) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(approvals("all"))
        handle = await client.start("sdk_two_approvals_all", {})
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED, seconds=30)
        for branch in order:
            for _ in range(2):  # every event twice: the duplicate changes nothing
                await client.publish(
                    f"{branch}.ok", {"v": branch}, correlation_id=handle.execution_id
                )
        assert await handle.result(timeout=60) == {"legal": "legal", "finance": {"v": "finance"}}


async def test_wait_any_runs_the_join_after_the_first_branch(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(approvals("any"))
        handle = await client.start("sdk_two_approvals_any", {})
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED, seconds=30)
        await client.publish("finance.ok", {"v": 1}, correlation_id=handle.execution_id)
        assert await handle.result(timeout=60) == {"legal": None, "finance": {"v": 1}}
        # The branch left behind is recorded as cancelled, and a late event changes nothing.
        await client.publish("legal.ok", {"v": "late"}, correlation_id=handle.execution_id)
        assert await handle.status() is plaita.ExecutionStatus.COMPLETED
