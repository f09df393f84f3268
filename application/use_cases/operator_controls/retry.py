"""Retry: run a stopped execution again, same id, from a chosen node or where it stopped (W23)."""

from __future__ import annotations

from plaita.application.actor import current_actor
from plaita.application.ports import (
    Clock,
    CounterStore,
    ExecutionControls,
    ExecutionRepository,
    LeaseManager,
    SubscriptionStore,
    TaskQueue,
)
from plaita.application.use_cases.borrowed_lease import BorrowedLease, BorrowOutcome
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.operator_controls.shared import (
    ControlResult,
    WithQueue,
    audit_result,
    parked_note,
    refuse,
)
from plaita.domain import history
from plaita.domain.budgets import COUNTER_TTL_SECONDS
from plaita.domain.envelope import CarrierGenerations, ResumeType
from plaita.domain.errors import LeaseConflictError, UnknownExecutionError, UnknownFlowError
from plaita.domain.execution import ExecutionState
from plaita.domain.flow import Flow
from plaita.domain.operator_controls import (
    ControlFlags,
    OperatorAction,
    RetryKind,
    Verdict,
    decide_retry,
    restart_at,
    restart_counter_changes,
)


class RetryExecution(WithQueue):
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
        self._borrow = BorrowedLease(
            executions=executions, leases=leases, holder_id=holder_id, lease_ttl_ms=lease_ttl_ms
        )

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
            refuse(decision)
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
                "log (W7 caps)" + parked_note(flags),
            )
            audit_result(OperatorAction.RETRY, result)
            return await self._recorded(OperatorAction.RETRY, result)
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
            + parked_note(flags),
            node_id=decision.node_id,
        )
        audit_result(OperatorAction.RETRY, result)
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

        async def restart(current: ExecutionState | None) -> ExecutionState:
            # Decided again under the lease: a worker may have moved it since it was read.
            if current is None:
                raise UnknownExecutionError(f"execution {execution_id!r} was deleted meanwhile")
            again = decide_retry(current, from_node=from_node, flow_nodes=nodes)
            if again.verdict is not Verdict.PROCEED or again.kind is not RetryKind.RESTART:
                refuse(again)
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
            return restarted

        action = history.operator_action(
            self._clock.now_ms(),
            who=str(current_actor()),
            action="retry",
            detail={"from_node": node_id},
        )
        borrowed = await self._borrow.write(execution_id, restart, history=[action])
        if borrowed.outcome is BorrowOutcome.LEASE_TAKEN:
            holder = await self._leases.holder(execution_id)
            raise LeaseConflictError(
                f"execution {execution_id!r} is being advanced by "
                f"{holder.holder_id if holder else 'another holder'}; try the retry again once "
                "its step is done"
            )
        assert borrowed.found is not None and borrowed.saved is not None
        suspension = borrowed.found.suspension
        if suspension is not None and suspension.subscription_id is not None:
            await self._subscriptions.remove(suspension.subscription_id)
        return borrowed.saved
