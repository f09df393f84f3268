"""plaita: durable suspend/resume flows for Python applications.

The public API — everything an application imports — is the names in ``__all__``::

    import plaita

    approval = (
        plaita.Flow("expense_approval")
        .task("submit", "examples.expenses:submit", params={"amount": "${amount}"}, next="wait")
        .event("wait", "expense.decided", next="done")
        .end("done", output="$NODE['wait']['data']")
    )

    async with plaita.Client("memory://") as client, plaita.Worker(
        client, handler_modules=["examples.expenses"]
    ):
        await client.register(approval)
        handle = await client.start("expense_approval", {"amount": 42})
        await client.publish("expense.decided", {"ok": True}, correlation_id=handle.execution_id)
        print(await handle.result(timeout=30))

The names are imported on first use (PEP 562), so ``import plaita.domain`` — what the
engine's own modules do — never loads the client, the adapters or their libraries. Guide:
docs/python.md.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plaita.application.engine.context import NodeContext
    from plaita.domain.errors import (
        ClientClosedError,
        ExecutionFailedError,
        PlaitaError,
        ResultTimeoutError,
        StoreUnreachableError,
        SyncClientInEventLoopError,
        WorkerAttachError,
    )
    from plaita.domain.execution import ExecutionError, ExecutionStatus
    from plaita.domain.failures import (
        DeterministicNodeError,
        ExecutionCancelledError,
        ResourceExhaustedNodeError,
        TransientNodeError,
    )
    from plaita.entrypoints.sdk.client import (
        Client,
        ExecutionHandle,
        ExecutionPage,
        ExecutionSummary,
    )
    from plaita.entrypoints.sdk.flow import Flow
    from plaita.entrypoints.sdk.sync import SyncClient, SyncExecutionHandle
    from plaita.entrypoints.sdk.worker import Worker

try:
    __version__ = version("plaita")
except PackageNotFoundError:  # pragma: no cover - only a source tree that was never installed
    __version__ = "0+unknown"

#: Where each public name is defined: imported when first asked for.
_HOMES = {
    "Flow": "plaita.entrypoints.sdk.flow",
    "Client": "plaita.entrypoints.sdk.client",
    "ExecutionHandle": "plaita.entrypoints.sdk.client",
    "SyncClient": "plaita.entrypoints.sdk.sync",
    "SyncExecutionHandle": "plaita.entrypoints.sdk.sync",
    "Worker": "plaita.entrypoints.sdk.worker",
    "NodeContext": "plaita.application.engine.context",
    "ExecutionStatus": "plaita.domain.execution",
    "ExecutionError": "plaita.domain.execution",
    "PlaitaError": "plaita.domain.errors",
    "ExecutionFailedError": "plaita.domain.errors",
    "ResultTimeoutError": "plaita.domain.errors",
    "SyncClientInEventLoopError": "plaita.domain.errors",
    "ClientClosedError": "plaita.domain.errors",
    "StoreUnreachableError": "plaita.domain.errors",
    "WorkerAttachError": "plaita.domain.errors",
    "ExecutionSummary": "plaita.entrypoints.sdk.client",
    "ExecutionPage": "plaita.entrypoints.sdk.client",
    "ExecutionCancelledError": "plaita.domain.failures",
    "TransientNodeError": "plaita.domain.failures",
    "ResourceExhaustedNodeError": "plaita.domain.failures",
    "DeterministicNodeError": "plaita.domain.failures",
}

__all__ = [
    "Client",
    "ClientClosedError",
    "DeterministicNodeError",
    "ExecutionCancelledError",
    "ExecutionError",
    "ExecutionFailedError",
    "ExecutionHandle",
    "ExecutionPage",
    "ExecutionStatus",
    "ExecutionSummary",
    "Flow",
    "NodeContext",
    "PlaitaError",
    "ResourceExhaustedNodeError",
    "ResultTimeoutError",
    "StoreUnreachableError",
    "SyncClient",
    "SyncClientInEventLoopError",
    "SyncExecutionHandle",
    "TransientNodeError",
    "Worker",
    "WorkerAttachError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'plaita' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
