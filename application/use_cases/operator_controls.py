"""Operator controls (W23): pause, unpause, resume, cancel, retry from a node, and in bulk.

Each use case acts on one execution of the current tenant (the caller opens the
``tenant_scope``), asks ``domain.operator_controls`` whether the action fits the execution's
state, and performs the answer through ports. Refusals are named errors that say what to do;
a "nothing to do" (pausing a paused execution) is a result, not an error. Every action is
written to the ``plaita.audit`` log.

Flags are set *before* carriers are enqueued, so the worker that reads a carrier already
sees the flag that carrier belongs to (cancel: flag first, then the carrier that
terminalises under the lease).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from plaita.application.ports import (
    Clock,
    CounterStore,
    DelayQueue,
    ExecutionControls,
    ExecutionRepository,
    LeaseManager,
    SubscriptionStore,
    TaskQueue,
)
from plaita.application.use_cases.executions import GetExecution
from plaita.application.use_cases.flows import FlowCatalog
from plaita.domain.budgets import COUNTER_TTL_SECONDS
from plaita.domain.envelope import CarrierGenerations, ResumeType, TaskEnvelope
from plaita.domain.errors import (
    ExecutionRunningError,
    LeaseConflictError,
    OperatorActionRefusedError,
    UnknownExecutionError,
    UnknownFlowError,
    UnknownNodeError,
)
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.operator_controls import (
    ActionDecision,
    ControlFlags,
    OperatorAction,
    RetryDecision,
    RetryKind,
    Verdict,
    check_bulk_limit,
    check_page_limit,
    decide_cancel,
    decide_pause,
    decide_resume_request,
    decide_retry,
    decide_unpause,
    parse_action,
    restart_at,
    restart_counter_changes,
)

JSON = Any
audit = logging.getLogger("plaita.audit")

#: How long after an unpause its safety-net continue fires (see UnpauseExecution).
UNPAUSE_SAFETY_NET_MS = 60_000
#: A bulk action reads matching executions in pages of at most this many.
BULK_PAGE = 500


@attrs.frozen
class ControlResult:
    """What one operator action did to one execution."""

    execution_id: str
    action: OperatorAction
    #: paused, already_paused, unpaused, not_paused, cancel_requested, continue_enqueued,
    #: wake_up_enqueued or restarted.
    outcome: str
    #: The status as this action left it (a carrier it enqueued may change it next).
    status: ExecutionStatus
    flags: ControlFlags
    detail: str = ""
    #: Parked carriers enqueued again (unpause).
    requeued: int = 0
    #: The node a retry restarts at (None for a W7 wake-up: the worker picks the failed node).
    node_id: str | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "execution_id": self.execution_id,
            "action": self.action.value,
            "outcome": self.outcome,
            "status": self.status.value,
            "paused": self.flags.paused,
            "cancel_requested": self.flags.cancel_requested,
            "parked": self.flags.parked,
            "detail": self.detail,
            "requeued": self.requeued,
            "node_id": self.node_id,
        }


def _refuse(decision: ActionDecision | RetryDecision) -> None:
    if decision.verdict is Verdict.CONFLICT:
        raise ExecutionRunningError(decision.detail)
    if decision.reason == "unknown_node":
        raise UnknownNodeError(decision.detail)
    raise OperatorActionRefusedError(decision.detail)


def _audit(action: OperatorAction, result: ControlResult) -> None:
    audit.info(
        "event=execution.%s execution_id=%s outcome=%s status=%s paused=%s cancel_requested=%s "
        "requeued=%d node_id=%s",
        action.value,
        result.execution_id,
        result.outcome,
        result.status.value,
        result.flags.paused,
        result.flags.cancel_requested,
        result.requeued,
        result.node_id,
    )


class _OneExecution:
    """Loads the execution (``UnknownExecutionError`` when there is none) and its flags."""

    def __init__(
        self, *, executions: ExecutionRepository, controls: ExecutionControls, clock: Clock
    ) -> None:
        self._executions = executions
        self._get = GetExecution(executions)
        self._controls = controls
        self._clock = clock

    async def _load(self, execution_id: str) -> tuple[ExecutionState, ControlFlags]:
        state = await self._get(execution_id)
        return state, await self._controls.get(execution_id)


class _WithQueue(_OneExecution):
    """An operator action that writes carriers, stamped with this process's generations (W12)."""

    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        controls: ExecutionControls,
        queue: TaskQueue,
        clock: Clock,
        generations: CarrierGenerations,
    ) -> None:
        super().__init__(executions=executions, controls=controls, clock=clock)
        self._queue = queue
        self._generations = generations

    def _carrier(self, state: ExecutionState, resume_type: ResumeType) -> TaskEnvelope:
        return TaskEnvelope.resume(
            execution_id=state.execution_id,
            flow_id=state.flow_id,
            resume_type=resume_type,
            now_ms=self._clock.now_ms(),
            tenant_id=state.tenant_id,
            generations=self._generations,
        )


class PauseExecution(_OneExecution):
    """Stop an execution taking new steps; its carriers are parked until unpaused (W23)."""

    async def __call__(self, execution_id: str) -> ControlResult:
        state, flags = await self._load(execution_id)
        decision = decide_pause(execution_id, state.status, flags)
        if decision.verdict is Verdict.REFUSE:
            _refuse(decision)
        if decision.proceeds:
            flags = await self._controls.set_flags(execution_id, paused=True)
        detail = (
            "a step already running finishes; the next carrier is parked"
            if decision.proceeds
            else decision.detail
        )
        result = ControlResult(
            execution_id, OperatorAction.PAUSE, decision.reason, state.status, flags, detail
        )
        _audit(OperatorAction.PAUSE, result)
        return result


class UnpauseExecution(_WithQueue):
    """Clear the pause and give back every parked carrier, or a continue when none (W23, I0).

    Order: a delayed safety-net continue when carriers are parked, then the flag is cleared
    (the park is atomic with the flag read, so nothing is parked after this), then each
    parked carrier is enqueued again and only then forgotten. Stopping half-way leaves
    either a paused execution (run unpause again) or parked carriers of an unpaused one,
    which the safety net's carrier makes the worker enqueue (ADR 0008).
    """

    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        controls: ExecutionControls,
        queue: TaskQueue,
        delay: DelayQueue,
        clock: Clock,
        generations: CarrierGenerations,
        safety_net_ms: int = UNPAUSE_SAFETY_NET_MS,
    ) -> None:
        super().__init__(
            executions=executions,
            controls=controls,
            queue=queue,
            clock=clock,
            generations=generations,
        )
        self._delay = delay
        self._safety_net_ms = safety_net_ms

    async def __call__(self, execution_id: str) -> ControlResult:
        state, flags = await self._load(execution_id)
        decision = decide_unpause(execution_id, state.status, flags)
        if not decision.proceeds:
            result = ControlResult(
                execution_id,
                OperatorAction.UNPAUSE,
                decision.reason,
                state.status,
                flags,
                decision.detail,
            )
            _audit(OperatorAction.UNPAUSE, result)
            return result
        live = not state.status.is_terminal
        if live and flags.parked:
            due = self._clock.now_ms() + self._safety_net_ms
            await self._delay.schedule(self._carrier(state, ResumeType.CONTINUE), due_ms=due)
        await self._controls.set_flags(execution_id, paused=False)
        carriers = await self._controls.parked(execution_id)
        for carrier in carriers:
            await self._queue.enqueue(carrier.envelope)
        await self._controls.unpark(execution_id, [carrier.carrier_id for carrier in carriers])
        detail = f"{len(carriers)} parked carrier(s) enqueued again"
        if not carriers and live:
            await self._queue.enqueue(self._carrier(state, ResumeType.CONTINUE))
            detail = "no carrier was parked; a continue was enqueued"
        result = ControlResult(
            execution_id,
            OperatorAction.UNPAUSE,
            decision.reason,
            state.status,
            await self._controls.get(execution_id),
            detail,
            requeued=len(carriers),
        )
        _audit(OperatorAction.UNPAUSE, result)
        return result


def _parked_note(flags: ControlFlags) -> str:
    if not flags.paused:
        return ""
    return "; the execution is paused, so the carrier waits parked until unpause"


class CancelExecution(_WithQueue):
    """Flag the cancel, then enqueue the cancel carrier the worker performs under the lease.

    The flag makes any other carrier of the execution cancel it too (W7 row 8), should the
    cancel carrier be lost or overtaken; a cancel carrier is never parked.
    """

    async def __call__(self, execution_id: str) -> ControlResult:
        state, flags = await self._load(execution_id)
        decision = decide_cancel(execution_id, state.status, flags)
        if not decision.proceeds:
            _refuse(decision)
        flags = await self._controls.set_flags(execution_id, cancel_requested=True)
        await self._queue.enqueue(self._carrier(state, ResumeType.CANCEL))
        result = ControlResult(
            execution_id,
            OperatorAction.CANCEL,
            decision.reason,
            state.status,
            flags,
            "the worker cancels it under the lease at its next dispatch",
        )
        _audit(OperatorAction.CANCEL, result)
        return result


class ContinueExecution(_WithQueue):
    """The operator's "resume": a continue carrier for a live execution (e.g. a stuck one)."""

    async def __call__(self, execution_id: str) -> ControlResult:
        state, flags = await self._load(execution_id)
        decision = decide_resume_request(execution_id, state.status, flags)
        if not decision.proceeds:
            _refuse(decision)
        await self._queue.enqueue(self._carrier(state, ResumeType.CONTINUE))
        detail = (
            "it is suspended: the continue has no effect; its event or timer resumes it"
            if state.status is ExecutionStatus.SUSPENDED
            else "continues from its checkpoint"
        )
        result = ControlResult(
            execution_id,
            OperatorAction.RESUME,
            decision.reason,
            state.status,
            flags,
            detail + _parked_note(flags),
        )
        _audit(OperatorAction.RESUME, result)
        return result


class RetryExecution(_WithQueue):
    """Run a stopped execution again, same id, from a chosen node or where it stopped (W23).

    ``from_node=None`` on an execution in error is the W7 wake-up (a retry carrier; the
    worker applies its caps). Otherwise the execution is set running at the node under the
    lease, that node's retry counter reset, and a continue carrier enqueued after the lease
    is released. A cancel request is withdrawn first: the operator wants it to run.
    """

    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        controls: ExecutionControls,
        queue: TaskQueue,
        clock: Clock,
        generations: CarrierGenerations,
        flows: FlowCatalog,
        leases: LeaseManager,
        counters: CounterStore,
        subscriptions: SubscriptionStore,
        holder_id: str,
        lease_ttl_ms: int,
    ) -> None:
        super().__init__(
            executions=executions,
            controls=controls,
            queue=queue,
            clock=clock,
            generations=generations,
        )
        self._flows = flows
        self._leases = leases
        self._counters = counters
        self._subscriptions = subscriptions
        self._holder_id = holder_id
        self._lease_ttl_ms = lease_ttl_ms

    async def __call__(self, execution_id: str, *, from_node: str | None = None) -> ControlResult:
        state, flags = await self._load(execution_id)
        try:
            flow = await self._flows.get(state.flow_id, state.flow_version)
        except UnknownFlowError as exc:
            raise UnknownFlowError(
                f"execution {execution_id!r} cannot be retried without its flow: {exc}, then retry"
            ) from None
        nodes = frozenset(node.id for node in flow.nodes())
        decision = decide_retry(state, from_node=from_node, flow_nodes=nodes)
        if decision.verdict is not Verdict.PROCEED:
            _refuse(decision)
        if decision.kind is RetryKind.WAKE_UP:
            flags = await self._withdraw_cancel(execution_id, flags)
            await self._queue.enqueue(self._carrier(state, ResumeType.RETRY))
            result = ControlResult(
                execution_id,
                OperatorAction.RETRY,
                "wake_up_enqueued",
                state.status,
                flags,
                "the worker wakes it up at its failed node, or refuses with a reason in its "
                "log (W7 caps)" + _parked_note(flags),
            )
            _audit(OperatorAction.RETRY, result)
            return result
        assert decision.node_id is not None
        restarted = await self._restart(state, decision.node_id, from_node, nodes, flow)
        # Only once the restart landed: a refused retry (409) leaves every flag as it was.
        flags = await self._withdraw_cancel(execution_id, flags)
        await self._queue.enqueue(self._carrier(restarted, ResumeType.CONTINUE))
        result = ControlResult(
            execution_id,
            OperatorAction.RETRY,
            "restarted",
            restarted.status,
            flags,
            f"running again from node {decision.node_id!r} with a fresh budget for it"
            + _parked_note(flags),
            node_id=decision.node_id,
        )
        _audit(OperatorAction.RETRY, result)
        return result

    async def _withdraw_cancel(self, execution_id: str, flags: ControlFlags) -> ControlFlags:
        """A retry withdraws a pending cancel request: the operator asked for the opposite."""
        if not flags.cancel_requested:
            return flags
        return await self._controls.set_flags(execution_id, cancel_requested=False)

    async def _restart(
        self,
        seen: ExecutionState,
        node_id: str,
        from_node: str | None,
        nodes: frozenset[str],
        flow: Flow,
    ) -> ExecutionState:
        execution_id = seen.execution_id
        lease = await self._leases.acquire(execution_id, self._holder_id, ttl_ms=self._lease_ttl_ms)
        if lease is None:
            holder = await self._leases.holder(execution_id)
            raise LeaseConflictError(
                f"execution {execution_id!r} is being advanced by "
                f"{holder.holder_id if holder else 'another holder'}; try the retry again once "
                "its step is done"
            )
        try:
            # Decided again under the lease: a worker may have moved it since it was read.
            current = await self._executions.load(execution_id)
            if current is None:
                raise UnknownExecutionError(f"execution {execution_id!r} was deleted meanwhile")
            again = decide_retry(current, from_node=from_node, flow_nodes=nodes)
            if again.verdict is not Verdict.PROCEED or again.kind is not RetryKind.RESTART:
                _refuse(again)
            restarted = restart_at(
                current,
                node_id=node_id,
                now_ms=self._clock.now_ms(),
                fingerprint=flow.fingerprint,
                subgraph_fingerprint=flow.subgraph_fingerprint(node_id),
            )
            await self._counters.apply(
                execution_id, restart_counter_changes(node_id), ttl_ms=COUNTER_TTL_SECONDS * 1000
            )
            await self._executions.save(restarted, fence=lease.generation, previous=current)
        finally:
            await self._leases.release(lease)
        suspension = current.suspension
        if suspension is not None and suspension.subscription_id is not None:
            await self._subscriptions.remove(suspension.subscription_id)
        return restarted


# --- bulk ---------------------------------------------------------------------------------


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
    ) -> BulkResult:
        chosen = action if isinstance(action, OperatorAction) else parse_action(action)
        matched = await self._matching(flow_id, status, check_bulk_limit(limit))
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
            "event=execution.bulk action=%s flow_id=%s status=%s matched=%d done=%d failed=%d",
            chosen.value,
            flow_id,
            None if status is None else status.value,
            len(matched),
            done,
            len(failed),
        )
        return BulkResult(chosen, False, matched, done, tuple(failed), outcomes)

    async def _matching(
        self, flow_id: str | None, status: ExecutionStatus | None, limit: int
    ) -> tuple[str, ...]:
        found: list[str] = []
        cursor: str | None = None
        # Each page moves the cursor strictly down the index, so the walk ends with it.
        while len(found) < limit:
            page = await self._executions.page(
                flow_id=flow_id,
                status=status,
                limit=min(BULK_PAGE, limit - len(found)),
                cursor=cursor,
            )
            found.extend(state.execution_id for state in page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        return tuple(dict.fromkeys(found))[:limit]


# --- listing (C1) --------------------------------------------------------------------------


@attrs.frozen
class ExecutionListing:
    items: tuple[tuple[ExecutionState, ControlFlags], ...]
    next_cursor: str | None

    def to_json(self) -> dict[str, JSON]:
        return {
            "items": [execution_summary(state, flags) for state, flags in self.items],
            "next_cursor": self.next_cursor,
        }


def execution_summary(state: ExecutionState, flags: ControlFlags) -> dict[str, JSON]:
    """The console's ExecutionSummary (api-contract.md) of one execution."""
    return {
        "execution_id": state.execution_id,
        "flow_id": state.flow_id,
        "flow_version": state.flow_version,
        "tenant_id": state.tenant_id,
        "status": state.status.value,
        "paused": flags.paused,
        "cancel_requested": flags.cancel_requested,
        "parked": flags.parked,
        "next_node_id": state.next_node_id,
        "last_node_id": state.last_node_id,
        "created_at_ms": state.created_at_ms,
        "updated_at_ms": state.updated_at_ms,
        "error": None if state.error is None else state.error.to_json(),
    }


class ListExecutions:
    """A page of the current tenant's executions with their operator flags (C1)."""

    def __init__(self, *, executions: ExecutionRepository, controls: ExecutionControls) -> None:
        self._executions = executions
        self._controls = controls

    async def __call__(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ExecutionListing:
        page = await self._executions.page(
            flow_id=flow_id, status=status, limit=check_page_limit(limit), cursor=cursor
        )
        flags = await self._controls.get_many([state.execution_id for state in page.items])
        items = tuple(
            (state, flags.get(state.execution_id, ControlFlags())) for state in page.items
        )
        return ExecutionListing(items, page.next_cursor)
