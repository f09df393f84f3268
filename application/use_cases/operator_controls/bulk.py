"""One operator action over the current tenant's executions matching a filter (W23)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from plaita.application.ports import ExecutionRepository
from plaita.application.use_cases.operator_controls.cancel import CancelExecution
from plaita.application.use_cases.operator_controls.continue_execution import ContinueExecution
from plaita.application.use_cases.operator_controls.pause import PauseExecution
from plaita.application.use_cases.operator_controls.retry import RetryExecution
from plaita.application.use_cases.operator_controls.shared import ControlResult, audit
from plaita.application.use_cases.operator_controls.unpause import UnpauseExecution
from plaita.domain.execution import ExecutionStatus
from plaita.domain.execution_query import EVERY_EXECUTION, ExecutionQuery
from plaita.domain.operator_controls import OperatorAction, check_bulk_limit, parse_action

JSON = Any
#: A bulk action reads matching executions in pages of at most this many.
BULK_PAGE = 500


@attrs.frozen
class BulkProgress:
    """Reported after each execution of a bulk action (``done`` of ``total``)."""

    done: int
    total: int
    execution_id: str
    ok: bool


@attrs.frozen
class BulkFailure:
    execution_id: str
    error: str

    def to_json(self) -> dict[str, str]:
        return {"execution_id": self.execution_id, "error": self.error}


@attrs.frozen
class BulkResult:
    action: OperatorAction
    dry_run: bool
    #: The matching executions, in listing order (newest first).
    matched: tuple[str, ...]
    done: int = 0
    failed: tuple[BulkFailure, ...] = ()
    #: outcome → how many executions had it (e.g. {"paused": 3, "already_paused": 1}).
    outcomes: Mapping[str, int] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, JSON]:
        return {
            "action": self.action.value,
            "dry_run": self.dry_run,
            "matched": len(self.matched),
            "done": self.done,
            "failed": [failure.to_json() for failure in self.failed],
            "outcomes": dict(self.outcomes),
            "execution_ids": list(self.matched),
        }


Act = Callable[[str], Awaitable[ControlResult]]


class BulkAction:
    """One action over the current tenant's executions matching a filter (W23).

    The matching executions are listed first (at most ``limit``, newest first), then acted on
    one by one; a failure is collected with its error and never stops the batch.
    """

    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        pause: PauseExecution,
        unpause: UnpauseExecution,
        cancel: CancelExecution,
        resume: ContinueExecution,
        retry: RetryExecution,
    ) -> None:
        self._executions = executions
        self._acts: dict[OperatorAction, Act] = {
            OperatorAction.PAUSE: pause,
            OperatorAction.UNPAUSE: unpause,
            OperatorAction.CANCEL: cancel,
            OperatorAction.RESUME: resume,
            OperatorAction.RETRY: retry,
        }

    async def __call__(
        self,
        action: OperatorAction | str,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        dry_run: bool = False,
        limit: int = 100,
        progress: Callable[[BulkProgress], None] | None = None,
        query: ExecutionQuery = EVERY_EXECUTION,
    ) -> BulkResult:
        """``query`` is the listing's search (creation window, input conditions): a bulk
        action acts on exactly the executions that search shows."""
        chosen = action if isinstance(action, OperatorAction) else parse_action(action)
        where = query.narrowed(flow_id=flow_id, status=status)
        matched = await self._matching(where, check_bulk_limit(limit))
        if dry_run:
            return BulkResult(chosen, True, matched)
        act = self._acts[chosen]
        failed: list[BulkFailure] = []
        outcomes: dict[str, int] = {}
        for number, execution_id in enumerate(matched, start=1):
            try:
                outcome = (await act(execution_id)).outcome
            except Exception as exc:  # collected, never aborts the batch
                failed.append(BulkFailure(execution_id, f"{type(exc).__name__}: {exc}"))
                ok = False
            else:
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                ok = True
            if progress is not None:
                progress(BulkProgress(number, len(matched), execution_id, ok))
        done = len(matched) - len(failed)
        audit.info(
            "event=execution.bulk action=%s flow_id=%s status=%s query=%r matched=%d done=%d "
            "failed=%d",
            chosen.value,
            where.flow_id,
            None if where.status is None else where.status.value,
            where.describe(),
            len(matched),
            done,
            len(failed),
        )
        return BulkResult(chosen, False, matched, done, tuple(failed), outcomes)

    async def _matching(self, where: ExecutionQuery, limit: int) -> tuple[str, ...]:
        found: list[str] = []
        cursor: str | None = None
        # Each page moves the cursor strictly down the index, so the walk ends with it.
        while len(found) < limit:
            page = await self._executions.page(
                limit=min(BULK_PAGE, limit - len(found)), cursor=cursor, query=where
            )
            found.extend(state.execution_id for state in page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        return tuple(dict.fromkeys(found))[:limit]
