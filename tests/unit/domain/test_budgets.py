"""Retry budgets across deliveries: one retry policy per node, crashed attempts apart
(E3, E15, W2, W7, W8)."""

from __future__ import annotations

from collections import Counter as Tally

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from plaita.domain import failures
from plaita.domain.budgets import (
    COUNTER_TTL_SECONDS,
    DEFAULT_RETRIES,
    DETERMINISTIC_FAILURE_MAX,
    G1_MAX_WAKEUPS,
    NODE_RETRY_TOTAL_MAX,
    Counter,
    CounterChange,
    CounterOp,
    FailureAction,
    FailureDecision,
    FailureKind,
    TerminalReason,
    WakeupRefusal,
    attempt_number,
    backoff_seconds,
    classify_error_code,
    classify_failure,
    classify_step_failure,
    crash_budget_spent,
    decide_crashed_attempts,
    decide_node_failure,
    decide_retry,
    decide_wakeup,
    failed_node_of,
    on_node_success,
    resolve_retry_times,
)
from plaita.domain.failures import (
    BranchMissError,
    DeterministicNodeError,
    ExecutionCancelledError,
    ExecutionDeadlineError,
    FlowErrorException,
    NodeExecutionError,
    NodeTimeoutError,
    ResourceExhaustedNodeError,
    TransientNodeError,
)

RETRY_ORDER = (
    FailureAction.PERSIST,
    FailureAction.RELEASE_LEASE,
    FailureAction.SCHEDULE_COPY,
    FailureAction.ACK_ORIGINAL,
)
kinds = st.sampled_from(FailureKind)


def flattened(cause: BaseException, node: str = "charge") -> FlowErrorException:
    """What distributed mode raises for a node whose errorHandler aborted (E8)."""
    node_error = NodeExecutionError(f"node {node!r} failed", node_id=node)
    node_error.__cause__ = cause
    wrapper = FlowErrorException(f"NodeExecutionError: {node_error}", node_id=node)
    wrapper.__cause__ = node_error
    return wrapper


def wrapped(error: BaseException) -> FlowErrorException:
    wrapper = FlowErrorException(f"{type(error).__name__}: {error}")
    wrapper.__cause__ = error
    return wrapper


def retry(node_retries: int, *, total: int = 0, budget: int = 5) -> FailureDecision:
    """A transient failure of node charge's attempt after ``node_retries`` retries."""
    return decide_node_failure(
        FailureKind.TRANSIENT,
        failed_node="charge",
        attempt=attempt_number(node_retries=node_retries, node_crashes=0),
        retry_times=budget,
        node_retries=node_retries,
        total_retries=total,
    )


def fails(kind: FailureKind, *, node: str | None = "charge") -> FailureDecision:
    return decide_node_failure(
        kind, failed_node=node, attempt=1, retry_times=5, node_retries=0, total_retries=0
    )


# --- classification (E3) ------------------------------------------------------------------


def test_the_budget_module_reuses_the_engine_classification_and_backoff() -> None:
    """E3: one classification and one backoff for the runner and the worker."""
    assert classify_failure is failures.classify_failure
    assert backoff_seconds is failures.backoff_seconds
    assert FailureKind is failures.FailureKind


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        pytest.param(1001, FailureKind.DETERMINISTIC, id="1001-deterministic"),
        pytest.param(1002, FailureKind.TRANSIENT, id="1002-transient"),
        pytest.param(1003, FailureKind.TRANSIENT, id="1003-transient"),
        pytest.param(-408, FailureKind.TERMINAL, id="timeout-and-deadline-terminal"),
        pytest.param(-499, FailureKind.TERMINAL, id="cancel-terminal"),
        pytest.param(-404, FailureKind.TERMINAL, id="branch-miss-terminal"),
        pytest.param(-500, FailureKind.TRANSIENT, id="flattened-flow-error-transient"),
        pytest.param(7, FailureKind.TRANSIENT, id="unknown-code-transient"),
    ],
)
def test_a_recorded_error_code_classifies_like_the_failure_that_wrote_it(
    code: int, kind: FailureKind
) -> None:
    """E3/E7, A50-03: 1001 deterministic, 1002/1003 and unknown transient; timeouts,
    cancels and graph errors terminal."""
    assert classify_error_code(code) is kind


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        pytest.param(flattened(TransientNodeError("503")), FailureKind.TRANSIENT, id="1002"),
        pytest.param(
            flattened(ResourceExhaustedNodeError("429")), FailureKind.TRANSIENT, id="1003"
        ),
        pytest.param(flattened(RuntimeError("reset")), FailureKind.TRANSIENT, id="unknown"),
        pytest.param(
            flattened(DeterministicNodeError("bad")), FailureKind.DETERMINISTIC, id="1001"
        ),
        pytest.param(flattened(ValueError("bad")), FailureKind.DETERMINISTIC, id="value-error"),
        pytest.param(wrapped(NodeTimeoutError("slow")), FailureKind.TERMINAL, id="node-timeout"),
        pytest.param(wrapped(ExecutionDeadlineError("late")), FailureKind.TERMINAL, id="deadline"),
        pytest.param(wrapped(ExecutionCancelledError("stop")), FailureKind.TERMINAL, id="cancel"),
        pytest.param(wrapped(BranchMissError("no case")), FailureKind.TERMINAL, id="branch-miss"),
        pytest.param(wrapped(ConnectionError("redis")), FailureKind.TRANSIENT, id="infra"),
        pytest.param(FlowErrorException("flat"), FailureKind.TRANSIENT, id="bare-wrapper"),
    ],
)
def test_a_flattened_step_failure_is_judged_by_its_original_exception(
    error: BaseException, kind: FailureKind
) -> None:
    """E8/W8, A50-03 and #267: the abort wrapper never turns a deterministic error
    retryable; a deadline anywhere in the chain is terminal."""
    assert classify_step_failure(error) is kind


@pytest.mark.parametrize(
    ("code", "kind"),
    [(1001, FailureKind.DETERMINISTIC), (None, FailureKind.TRANSIENT)],
    ids=["deterministic-code", "no-code"],
)
def test_a_node_error_without_its_cause_is_judged_by_its_code(
    code: int | None, kind: FailureKind
) -> None:
    """W8: a NodeExecutionError that lost its __cause__ still carries the handler's code."""
    assert classify_step_failure(NodeExecutionError("x", node_id="n", code=code)) is kind


def test_a_cyclic_cause_chain_is_classified_without_looping() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a

    assert classify_step_failure(a) is FailureKind.TRANSIENT
    assert failed_node_of(a) is None


@given(st.sampled_from([RuntimeError("x"), ValueError("x"), KeyError("x"), OSError("x")]))
def test_a_plain_exception_classifies_exactly_as_classify_failure(error: Exception) -> None:
    assert classify_step_failure(error) is classify_failure(error)


def test_the_failed_node_is_the_node_errors_not_the_wrappers() -> None:
    """W8, #123: the counter key takes the failing node from the exception chain."""
    error = flattened(TransientNodeError("503"), node="charge")
    error.node_id = "wrapper-node"

    assert failed_node_of(error) == "charge"


def test_the_failed_node_falls_back_to_any_flow_error_then_to_none() -> None:
    """W8, #123: no node id means the conservative per-execution counter."""
    assert failed_node_of(wrapped(BranchMissError("x", node_id="route"))) == "route"
    assert failed_node_of(RuntimeError("no node")) is None


# --- decide_node_failure (W8) -----------------------------------------------------------


def test_a_transient_failure_within_budget_is_retried_by_a_delayed_copy() -> None:
    """W8, #91/#52: persist, release the lease, schedule the copy, ack last."""
    decision = retry(0)

    assert decision.retries
    assert decision.actions == RETRY_ORDER
    assert decision.delay_ms == 1_000
    assert decision.counter_changes == (
        CounterChange(Counter.NODE_RETRIES, CounterOp.INCREMENT, "charge"),
        CounterChange(Counter.TOTAL_RETRIES, CounterOp.INCREMENT),
    )


def test_the_backoff_doubles_from_one_second_and_caps_at_thirty() -> None:
    """W8, #91: min(30 s, 2^(n-1) s), i.e. 1/2/4/8/16/30 s."""
    delays = [retry(n, budget=10).delay_ms for n in range(7)]

    assert delays == [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000]


def test_a_spent_node_budget_is_terminal_with_the_failed_node_and_the_dead_letter_queue() -> None:
    """W8, #123: exhausted → terminal error with failed_node and node_retries."""
    decision = retry(5, budget=5)

    assert not decision.retries
    assert decision.terminal_reason is TerminalReason.NODE_BUDGET_EXHAUSTED
    assert decision.actions == (
        FailureAction.TERMINALISE,
        FailureAction.RELEASE_LEASE,
        FailureAction.DEAD_LETTER,
    )
    assert (decision.failed_node, decision.node_retries) == ("charge", 5)
    assert decision.delay_ms is None
    assert decision.counter_changes == ()


def test_the_execution_total_of_100_retries_is_terminal_even_with_node_budget_left() -> None:
    """W8, #123 review: the total catches drifting node keys."""
    decision = retry(0, total=NODE_RETRY_TOTAL_MAX, budget=5)

    assert decision.terminal_reason is TerminalReason.TOTAL_BUDGET_EXHAUSTED
    assert FailureAction.DEAD_LETTER in decision.actions


def test_a_deterministic_failure_is_terminal_at_once_and_lengthens_the_streak() -> None:
    """E3/W8, A50-03 and #73: no retry burned; the no-fail streak grows."""
    decision = fails(FailureKind.DETERMINISTIC)

    assert decision.terminal_reason is TerminalReason.DETERMINISTIC
    assert decision.actions == (
        FailureAction.TERMINALISE,
        FailureAction.RELEASE_LEASE,
        FailureAction.ACK_ORIGINAL,
    )
    assert decision.counter_changes == (CounterChange(Counter.NO_FAIL, CounterOp.INCREMENT),)


def test_a_timeout_cancel_or_deadline_is_terminal_without_retry() -> None:
    """W8/E5, #267: a timeout retried burns the whole budget again for the same result."""
    decision = fails(FailureKind.TERMINAL)

    assert decision.terminal_reason is TerminalReason.TERMINAL
    assert FailureAction.SCHEDULE_COPY not in decision.actions


def test_a_failure_without_a_node_is_counted_per_execution() -> None:
    """W8, #123: the fallback key is no worse than before the fix."""
    decision = fails(FailureKind.TRANSIENT, node=None)

    assert decision.counter_changes[0] == CounterChange(
        Counter.NODE_RETRIES, CounterOp.INCREMENT, None
    )


def test_retry_times_of_one_allows_exactly_one_retry() -> None:
    """E15: the budget is the node's retryTimes, nothing else."""
    assert retry(0, budget=1).retries
    assert not retry(1, budget=1).retries


def test_retry_times_of_zero_gives_up_after_the_first_attempt() -> None:
    decision = retry(0, budget=0)

    assert decision.terminal_reason is TerminalReason.NODE_BUDGET_EXHAUSTED


def test_a_node_without_retry_times_takes_the_deployment_default() -> None:
    """E15: absent → the deployment's default retries (5 unless --default-retries)."""
    assert resolve_retry_times(None, DEFAULT_RETRIES) == 5
    assert resolve_retry_times(None, 2) == 2
    assert resolve_retry_times(0, 7) == 0
    assert resolve_retry_times(3, 7) == 3


@pytest.mark.parametrize(
    ("kind", "attempt", "retry_times", "retries", "delay_ms"),
    [
        (FailureKind.TRANSIENT, 1, 2, True, 1_000),
        (FailureKind.TRANSIENT, 2, 2, True, 2_000),
        (FailureKind.TRANSIENT, 3, 2, False, None),
        (FailureKind.TRANSIENT, 6, 10, True, 30_000),
        (FailureKind.TRANSIENT, 1, 0, False, None),
        (FailureKind.DETERMINISTIC, 1, 5, False, None),
        (FailureKind.TERMINAL, 1, 5, False, None),
    ],
)
def test_the_one_retry_rule(
    kind: FailureKind, attempt: int, retry_times: int, retries: bool, delay_ms: int | None
) -> None:
    """E3/E15: transient and within retryTimes → retry after min(30 s, 2^(n-1) s)."""
    verdict = decide_retry(kind, attempt=attempt, retry_times=retry_times)

    assert (verdict.retry, verdict.delay_ms) == (retries, delay_ms)


@given(kind=kinds, attempt=st.integers(1, 200), retry_times=st.integers(0, 100))
def test_a_node_gets_exactly_one_plus_retry_times_attempts(
    kind: FailureKind, attempt: int, retry_times: int
) -> None:
    verdict = decide_retry(kind, attempt=attempt, retry_times=retry_times)

    assert verdict.retry == (kind is FailureKind.TRANSIENT and attempt <= retry_times)


def test_the_attempt_number_counts_retries_and_crashes_across_deliveries() -> None:
    """E15: ctx.attempt never restarts on a redelivery."""
    assert attempt_number(node_retries=0, node_crashes=0) == 1
    assert attempt_number(node_retries=2, node_crashes=1) == 4


# --- crashed attempts (W2) ----------------------------------------------------------------


def test_a_first_attempt_is_never_counted_as_crashed() -> None:
    decision = decide_crashed_attempts(
        node_id="charge", node_crashes=0, previous_unfinished=False, max_deliveries=1
    )

    assert (decision.counter_changes, decision.crashes, decision.budget_spent) == ((), 0, False)


def test_an_unfinished_attempt_counts_against_the_checkpoint_node() -> None:
    decision = decide_crashed_attempts(
        node_id="charge", node_crashes=1, previous_unfinished=True, max_deliveries=5
    )

    assert decision.counter_changes == (
        CounterChange(Counter.NODE_CRASHES, CounterOp.INCREMENT, "charge"),
        CounterChange(Counter.TOTAL_RETRIES, CounterOp.INCREMENT),
    )
    assert (decision.crashes, decision.budget_spent) == (2, False)


def test_max_deliveries_crashed_attempts_give_the_carrier_up() -> None:
    """W2: --max-deliveries 1 still runs the first attempt; its crash spends the budget."""
    decision = decide_crashed_attempts(
        node_id=None, node_crashes=0, previous_unfinished=True, max_deliveries=1
    )

    assert decision.budget_spent


def test_a_spent_crash_budget_stays_spent_for_every_later_dispatch() -> None:
    """A crash while giving up must still give up: the spent budget is read, not recounted."""
    decision = decide_crashed_attempts(
        node_id="charge", node_crashes=5, previous_unfinished=False, max_deliveries=5
    )

    assert decision.budget_spent and decision.counter_changes == ()
    assert crash_budget_spent(5, 5) and not crash_budget_spent(4, 5)


def test_the_counters_live_seven_days() -> None:
    """W8: INCR with a sliding 7-day expiry."""
    assert COUNTER_TTL_SECONDS == 7 * 24 * 3600


def test_success_clears_only_its_own_node_and_the_streak() -> None:
    """W8, #123: clearing the whole execution let a failing node never reach its
    budget (667 executions stuck running); the total is never cleared."""
    assert on_node_success("charge") == (
        CounterChange(Counter.NODE_RETRIES, CounterOp.RESET, "charge"),
        CounterChange(Counter.NODE_CRASHES, CounterOp.RESET, "charge"),
        CounterChange(Counter.NO_FAIL, CounterOp.RESET),
    )


@given(
    kind=kinds,
    node=st.none() | st.text(max_size=5),
    node_retries=st.integers(-5, 200),
    total=st.integers(-5, 200),
    budget=st.integers(-5, 50),
)
def test_every_failure_gets_a_decision_and_a_retry_always_stays_within_budget(
    kind: FailureKind, node: str | None, node_retries: int, total: int, budget: int
) -> None:
    """W8 totality: a retry only below both caps, in the W8 order, within 30 s."""
    decision = decide_node_failure(
        kind,
        failed_node=node,
        attempt=node_retries + 1,
        retry_times=budget,
        node_retries=node_retries,
        total_retries=total,
    )

    assert decision.failed_node == node
    if decision.retries:
        assert kind is FailureKind.TRANSIENT
        assert node_retries < budget and total < NODE_RETRY_TOTAL_MAX
        assert decision.actions == RETRY_ORDER
        assert decision.delay_ms is not None and 1_000 <= decision.delay_ms <= 30_000
    else:
        assert FailureAction.SCHEDULE_COPY not in decision.actions
        assert decision.actions[0] is FailureAction.TERMINALISE


# --- wake-ups (W7) ----------------------------------------------------------------------


def test_a_wake_up_grants_fresh_node_budgets_and_keeps_the_streak() -> None:
    """W7, #73: the streak is not cleared, or the loop never converges."""
    decision = decide_wakeup(wakeups=0, no_fail_streak=3)

    assert decision.allowed
    assert decision.counter_changes == (
        CounterChange(Counter.WAKEUPS, CounterOp.INCREMENT),
        CounterChange(Counter.ALL_NODE_RETRIES, CounterOp.RESET),
        CounterChange(Counter.ALL_NODE_CRASHES, CounterOp.RESET),
    )


def test_a_third_wake_up_is_refused_without_changing_anything() -> None:
    """W7, #73: g1wakeups caps at 2; refusal is a value, not an exception."""
    decision = decide_wakeup(wakeups=G1_MAX_WAKEUPS, no_fail_streak=0)

    assert decision.refusal is WakeupRefusal.G1_WAKEUPS_EXHAUSTED
    assert decision.counter_changes == ()


def test_twelve_deterministic_failures_in_a_row_refuse_a_wake_up() -> None:
    """W7, #73: nofail caps at 12."""
    decision = decide_wakeup(wakeups=0, no_fail_streak=DETERMINISTIC_FAILURE_MAX)

    assert decision.refusal is WakeupRefusal.DETERMINISTIC_FAILURE_EXHAUSTED
    assert not decision.allowed


def test_when_both_caps_are_spent_the_wake_up_cap_is_named() -> None:
    decision = decide_wakeup(wakeups=G1_MAX_WAKEUPS, no_fail_streak=DETERMINISTIC_FAILURE_MAX)

    assert decision.refusal is WakeupRefusal.G1_WAKEUPS_EXHAUSTED


def test_the_hundred_and_first_retry_of_an_execution_is_refused() -> None:
    """W8, #123: the total sits far above any sane node budget, yet it binds."""
    total = 0
    for index in range(40):
        node_retries = 0
        while (decision := retry(node_retries, total=total)).retries:
            node_retries, total = node_retries + 1, total + 1
        if decision.terminal_reason is TerminalReason.TOTAL_BUDGET_EXHAUSTED:
            break
        assert index < 20

    assert total == NODE_RETRY_TOTAL_MAX


class BudgetMachine(RuleBasedStateMachine):
    """R1-style model of W2/W7/W8: counters applied as the decisions say, in any order.

    Invariants: per node, retries since its counter was last reset ≤ retryTimes and crashed
    attempts ≤ max_deliveries; retries and crashes over the execution's life ≤ 100;
    wake-ups ≤ 2.
    """

    @initialize(budget=st.integers(0, 60), max_deliveries=st.integers(1, 10))
    def configure(self, budget: int, max_deliveries: int) -> None:
        self.budget = budget
        self.max_deliveries = max_deliveries
        self.counters: Tally[tuple[Counter, str | None]] = Tally()
        self.scheduled_total = 0
        self.running = True

    def apply(self, changes: tuple[CounterChange, ...]) -> None:
        for change in changes:
            keys = [(change.counter, change.node_id)]
            if change.counter is Counter.ALL_NODE_RETRIES:
                keys = [k for k in self.counters if k[0] is Counter.NODE_RETRIES]
            if change.counter is Counter.ALL_NODE_CRASHES:
                keys = [k for k in self.counters if k[0] is Counter.NODE_CRASHES]
            for key in keys:
                if change.op is CounterOp.INCREMENT:
                    self.counters[key] += 1
                else:
                    self.counters[key] = 0

    @precondition(lambda self: self.running)
    @rule(node=st.sampled_from(["a", "b", "c", None]), kind=kinds)
    def fail(self, node: str | None, kind: FailureKind) -> None:
        retries = self.counters[(Counter.NODE_RETRIES, node)]
        decision = decide_node_failure(
            kind,
            failed_node=node,
            attempt=attempt_number(
                node_retries=retries, node_crashes=self.counters[(Counter.NODE_CRASHES, node)]
            ),
            retry_times=self.budget,
            node_retries=retries,
            total_retries=self.counters[(Counter.TOTAL_RETRIES, None)],
        )
        self.apply(decision.counter_changes)
        if decision.retries:
            self.scheduled_total += 1
        else:
            self.running = False

    @precondition(lambda self: self.running)
    @rule(node=st.sampled_from(["a", "b", "c", None]))
    def crash(self, node: str | None) -> None:
        decision = decide_crashed_attempts(
            node_id=node,
            node_crashes=self.counters[(Counter.NODE_CRASHES, node)],
            previous_unfinished=True,
            max_deliveries=self.max_deliveries,
        )
        self.apply(decision.counter_changes)
        self.scheduled_total += len(decision.counter_changes) > 0
        if decision.budget_spent:
            self.running = False

    @precondition(lambda self: self.running)
    @rule(node=st.sampled_from(["a", "b", "c", None]))
    def succeed(self, node: str | None) -> None:
        self.apply(on_node_success(node))

    @precondition(lambda self: not self.running)
    @rule()
    def wake_up(self) -> None:
        decision = decide_wakeup(
            wakeups=self.counters[(Counter.WAKEUPS, None)],
            no_fail_streak=self.counters[(Counter.NO_FAIL, None)],
        )
        self.apply(decision.counter_changes)
        self.running = decision.allowed

    @invariant()
    def budgets_are_never_exceeded(self) -> None:
        for (counter, _), value in self.counters.items():
            if counter is Counter.NODE_RETRIES:
                assert value <= self.budget
            if counter is Counter.NODE_CRASHES:
                assert value <= self.max_deliveries
        assert self.scheduled_total == self.counters[(Counter.TOTAL_RETRIES, None)]
        assert self.scheduled_total <= NODE_RETRY_TOTAL_MAX
        assert self.counters[(Counter.WAKEUPS, None)] <= G1_MAX_WAKEUPS


TestBudgetMachine = BudgetMachine.TestCase
TestBudgetMachine.settings = settings(max_examples=60, stateful_step_count=150, deadline=None)
