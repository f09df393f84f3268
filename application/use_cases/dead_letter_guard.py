"""Every carrier on its way to the DLQ passes the guard (W9, invariant I0).

The domain decides (``guard_dead_letter``); this use case gathers its facts — the execution,
its lease, its node budget — and performs the answer through ports. Whatever cannot be
performed in full (a lookup, the terminal write, the recovery copy) leaves the carrier pending,
so the next reclaim tries again and no execution is left without a carrier.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from plaita.application.codec import envelope_document
from plaita.application.ports import (
    Clock,
    CounterStore,
    Delivery,
    ExecutionRepository,
    LeaseManager,
    TaskQueue,
)
from plaita.application.tenancy import no_tenant_scope, tenant_scope
from plaita.application.use_cases.borrowed_lease import BorrowedLease, BorrowOutcome
from plaita.domain.budgets import crash_budget_spent
from plaita.domain.dead_letter import (
    ExecutionLookup,
    GuardAction,
    GuardDecision,
    LeaseLookup,
    guard_dead_letter,
)
from plaita.domain.envelope import CarrierKind, copy_envelope
from plaita.domain.errors import InvalidTenantIdError
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus
from plaita.domain.failures import CODE_FLOW_ERROR
from plaita.domain.ids import id_problem
from plaita.domain.tenancy import DEFAULT_TENANT, validate_tenant_id
from plaita.domain.tombstone import DispatchPath, GateAction, copy_timestamp_ms, gate

log = logging.getLogger("plaita.worker.dlq_guard")

NODE_BUDGET_EXHAUSTED_KIND = "NodeBudgetExhausted"


@attrs.frozen
class GuardOutcome:
    action: GuardAction
    #: The domain's reason, or why performing it stopped short (``*_failed``, ``lease_taken``).
    reason: str
    released: bool
    dlq_id: str | None = None
    copy_id: str | None = None


@attrs.frozen
class _Facts:
    execution: ExecutionLookup
    lease: LeaseLookup
    state: ExecutionState | None = None
    crashes: int = 0
    budget_spent: bool = False


class GuardDeadLetter:
    """Decide and perform one carrier's way to the DLQ.

    ``counters`` tells whether the open node's attempts (``max_deliveries`` crashed attempts,
    W2) are spent; the worker step counts them, the guard only reads. ``holder_id`` names this
    worker when it takes the lease to write a terminal state.
    """

    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        leases: LeaseManager,
        queue: TaskQueue,
        clock: Clock,
        holder_id: str,
        lease_ttl_ms: int = 120_000,
        counters: CounterStore,
        max_deliveries: int = 5,
    ) -> None:
        self._executions = executions
        self._leases = leases
        self._queue = queue
        self._clock = clock
        self._holder_id = holder_id
        self._lease_ttl_ms = lease_ttl_ms
        self._counters = counters
        self._max_deliveries = max_deliveries

    async def __call__(
        self, delivery: Delivery, reason: str, *, schema_rejected: bool = False
    ) -> GuardOutcome:
        """Dead-letter ``delivery`` for ``reason`` if the guard allows it.

        ``schema_rejected`` marks a carrier refused for what it is (undecodable, a schema too
        new, too old to run): a copy would be refused again, so it is released once, uncopied.
        """
        execution_id = carrier_execution_id(delivery)
        tenant_id = carrier_tenant_id(delivery)
        if tenant_id is None:
            # W24 fails closed: a carrier with an invalid tenant names no execution we may
            # touch; it is dead-lettered with its raw fields and nothing else is read.
            with no_tenant_scope():
                return await self._guard(delivery, reason, None, schema_rejected)
        with tenant_scope(tenant_id):
            return await self._guard(delivery, reason, execution_id, schema_rejected)

    async def _guard(
        self, delivery: Delivery, reason: str, execution_id: str | None, schema_rejected: bool
    ) -> GuardOutcome:
        facts = await self._facts(execution_id)
        envelope = delivery.envelope
        decision = guard_dead_letter(
            execution=facts.execution,
            lease=facts.lease,
            node_budget_exhausted=facts.budget_spent,
            schema_rejected=schema_rejected,
            start_carrier=envelope is not None and envelope.kind is CarrierKind.START,
        )
        try:
            outcome = await self._perform(decision, delivery, reason, facts)
        except Exception as exc:
            log.warning(
                "event=dlq_guard.perform_failed message_id=%s execution_id=%s action=%s "
                "error=%r: the carrier stays pending and is guarded again at the next reclaim",
                delivery.message_id,
                execution_id,
                decision.action.value,
                exc,
            )
            return GuardOutcome(decision.action, "perform_failed", released=False)
        level = logging.WARNING if outcome.released else logging.INFO
        log.log(
            level,
            "event=dlq_guard.%s message_id=%s execution_id=%s action=%s released=%s "
            "dlq_id=%s copy_id=%s cause=%r",
            outcome.reason,
            delivery.message_id,
            execution_id,
            outcome.action.value,
            outcome.released,
            outcome.dlq_id,
            outcome.copy_id,
            reason,
        )
        return outcome

    # --- facts ------------------------------------------------------------------------

    async def _facts(self, execution_id: str | None) -> _Facts:
        if execution_id is None:
            # Nothing names an execution: there is nothing to recover or to keep it for.
            return _Facts(ExecutionLookup.MISSING, LeaseLookup.FREE)
        try:
            holder = await self._leases.holder(execution_id)
            lease = LeaseLookup.FREE if holder is None else LeaseLookup.HELD
        except Exception as exc:
            log.warning(
                "event=dlq_guard.lease_lookup_failed execution_id=%s error=%r", execution_id, exc
            )
            lease = LeaseLookup.UNKNOWN
        try:
            state = await self._executions.load(execution_id)
        except Exception as exc:
            log.warning(
                "event=dlq_guard.execution_lookup_failed execution_id=%s error=%r",
                execution_id,
                exc,
            )
            return _Facts(ExecutionLookup.FAILED, lease)
        if state is None:
            return _Facts(ExecutionLookup.MISSING, lease)
        if state.is_terminal:
            return _Facts(ExecutionLookup.TERMINAL, lease, state)
        try:
            counters = await self._counters.read(execution_id)
        except Exception as exc:
            log.warning(
                "event=dlq_guard.counter_lookup_failed execution_id=%s error=%r", execution_id, exc
            )
            return _Facts(ExecutionLookup.FAILED, lease, state)
        crashes = counters.node_crashes.get(state.next_node_id or "", 0)
        spent = crash_budget_spent(crashes, self._max_deliveries)
        return _Facts(ExecutionLookup.NON_TERMINAL, lease, state, crashes, spent)

    # --- actions ----------------------------------------------------------------------

    async def _perform(
        self, decision: GuardDecision, delivery: Delivery, reason: str, facts: _Facts
    ) -> GuardOutcome:
        action = decision.action
        if action is GuardAction.KEEP_PENDING:
            return GuardOutcome(action, decision.reason, released=False)
        if action is GuardAction.TERMINALISE_THEN_RELEASE and facts.state is None:
            refused = await self._record_failed_start(delivery)
            if refused is not None:
                return GuardOutcome(action, refused, released=False)
        elif action is GuardAction.TERMINALISE_THEN_RELEASE:
            assert facts.state is not None
            refused = await self._terminalise(facts.state, facts.crashes, delivery)
            if refused is not None:
                return GuardOutcome(action, refused, released=False)
        copy_id, label = None, decision.reason
        if action is GuardAction.ENQUEUE_COPY_THEN_RELEASE:
            copy_id, skipped = await self._recovery_copy(delivery)
            label = skipped or label
        dlq_id = await self._queue.dead_letter(delivery, f"{label}: {reason}")
        return GuardOutcome(action, label, released=True, dlq_id=dlq_id, copy_id=copy_id)

    async def _terminalise(
        self, state: ExecutionState, crashes: int, delivery: Delivery
    ) -> str | None:
        """Write the error state under a lease of its own; why not, or None once written.

        A recovery copy would only spend the node's budget again, for ever (#123).
        """

        async def fail(current: ExecutionState | None) -> ExecutionState | None:
            if current is None or current.is_terminal:
                return None
            failed_node = current.next_node_id
            return current.transition(
                ExecutionStatus.ERROR,
                now_ms=self._clock.now_ms(),
                error=ExecutionError(
                    code=CODE_FLOW_ERROR,
                    message=(
                        f"node {failed_node!r}: {crashes} attempts crashed their worker "
                        f"(--max-deliveries {self._max_deliveries}); carrier "
                        f"{delivery.message_id} was dead-lettered. Fix the cause (a handler "
                        "that kills or hangs its process?), then retry the execution"
                    ),
                    node_id=failed_node,
                    kind=NODE_BUDGET_EXHAUSTED_KIND,
                ),
            )

        borrow = BorrowedLease(self._executions, self._leases, self._holder_id, self._lease_ttl_ms)
        borrowed = await borrow.write(state.execution_id, fail)
        return "lease_taken" if borrowed.outcome is BorrowOutcome.LEASE_TAKEN else None

    async def _record_failed_start(self, delivery: Delivery) -> str | None:
        """A start that never reached its first checkpoint becomes an execution in error.

        ``retry`` wakes it from its start node; nothing ran to completion before, so nothing
        runs twice that had been checkpointed.
        """
        envelope = delivery.envelope
        assert envelope is not None

        async def fail(current: ExecutionState | None) -> ExecutionState:
            now = self._clock.now_ms()
            return ExecutionState(
                execution_id=envelope.execution_id,
                flow_id=envelope.flow_id,
                flow_version=envelope.version or "",
                fingerprint="",
                status=ExecutionStatus.ERROR,
                created_at_ms=now,
                updated_at_ms=now,
                tenant_id=envelope.tenant_id,
                input=dict(envelope.params),
                error=ExecutionError(
                    code=CODE_FLOW_ERROR,
                    message=(
                        f"the start carrier {delivery.message_id} was given up after "
                        f"{self._max_deliveries} attempts that never reached the first "
                        "checkpoint (a handler crashing its worker?); fix the cause, then retry"
                    ),
                    kind=NODE_BUDGET_EXHAUSTED_KIND,
                ),
            )

        borrow = BorrowedLease(self._executions, self._leases, self._holder_id, self._lease_ttl_ms)
        borrowed = await borrow.write(envelope.execution_id, fail, expect=None)
        if borrowed.outcome is BorrowOutcome.STATE_CHANGED:
            return "execution_appeared"
        return "lease_taken" if borrowed.outcome is BorrowOutcome.LEASE_TAKEN else None

    async def _recovery_copy(self, delivery: Delivery) -> tuple[str | None, str | None]:
        """Enqueue a fresh carrier for an execution whose holder is gone.

        The copy's id, or None and why no copy was due. A failed enqueue raises: the
        original must then stay pending, never be released without its replacement (I0).
        """
        envelope = delivery.envelope
        if envelope is None:
            return None, "undecodable"
        tombstone = await self._executions.tombstone(envelope.execution_id)
        verdict = gate(
            DispatchPath.GUARD_CLONE, tombstone=tombstone, carrier_tenant=envelope.tenant_id
        )
        if verdict.action is GateAction.SKIP_COPY:
            return None, "execution_deleted"
        stamp = copy_timestamp_ms(
            now_ms=self._clock.now_ms(),
            payload_timestamp_ms=envelope.timestamp_ms,
            stream_id=delivery.message_id,
        )
        if stamp is None:
            # Of unknown age: the age gate would refuse the copy as it refused its source.
            return None, "carrier_age_unknown"
        return await self._queue.enqueue(copy_envelope(envelope, timestamp_ms=stamp)), None


def carrier_execution_id(delivery: Delivery) -> str | None:
    """The execution a carrier names, also when it could not be decoded (best effort).

    None when an undecodable carrier names an id that breaks the id rule: no execution can
    have such an id, and it is never used to build a key.
    """
    if delivery.envelope is not None:
        return delivery.envelope.execution_id
    value = _raw_document(delivery).get("execution_id")
    return value if id_problem(value) is None else None


def carrier_tenant_id(delivery: Delivery) -> str | None:
    """The tenant a carrier names (absent = the default tenant, as legacy carriers are).

    None when an undecodable carrier names an invalid tenant: W24 fails closed, so such a
    carrier is treated as naming no execution at all and its data is never touched.
    """
    if delivery.envelope is not None:
        return delivery.envelope.tenant_id
    value = _raw_document(delivery).get("tenant_id", DEFAULT_TENANT)
    try:
        return validate_tenant_id(value)
    except InvalidTenantIdError:
        return None


def _raw_document(delivery: Delivery) -> dict[str, Any]:
    return envelope_document(delivery.raw) or {}
