"""Operator controls (W23): pause, unpause, resume, cancel, retry from a node, and in bulk.

Each use case acts on one execution of the current tenant (the caller opens the
``tenant_scope``), asks ``domain.operator_controls`` whether the action fits the execution's
state, and performs the answer through ports. Refusals are named errors that say what to do;
a "nothing to do" (pausing a paused execution) is a result, not an error. Every action is
written to the ``plaita.audit`` log.

Flags are set *before* carriers are enqueued, so the worker that reads a carrier already
sees the flag that carrier belongs to (cancel: flag first, then the carrier that
terminalises under the lease).

One module per use case (``pause``, ``unpause``, ``cancel``, ``continue_execution``,
``retry``, ``bulk``, ``listing``); ``shared`` holds the result, refusals and audit line they
have in common.
"""

from plaita.application.use_cases.operator_controls.bulk import (
    BULK_PAGE,
    BulkAction,
    BulkFailure,
    BulkProgress,
    BulkResult,
)
from plaita.application.use_cases.operator_controls.cancel import CancelExecution
from plaita.application.use_cases.operator_controls.continue_execution import ContinueExecution
from plaita.application.use_cases.operator_controls.listing import (
    ExecutionListing,
    ListExecutions,
    execution_summary,
)
from plaita.application.use_cases.operator_controls.pause import PauseExecution
from plaita.application.use_cases.operator_controls.retry import RetryExecution
from plaita.application.use_cases.operator_controls.shared import ControlResult
from plaita.application.use_cases.operator_controls.unpause import (
    UNPAUSE_SAFETY_NET_MS,
    UnpauseExecution,
)

__all__ = [
    "BULK_PAGE",
    "UNPAUSE_SAFETY_NET_MS",
    "BulkAction",
    "BulkFailure",
    "BulkProgress",
    "BulkResult",
    "CancelExecution",
    "ContinueExecution",
    "ControlResult",
    "ExecutionListing",
    "ListExecutions",
    "PauseExecution",
    "RetryExecution",
    "UnpauseExecution",
    "execution_summary",
]
