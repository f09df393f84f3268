"""Retry budgets across deliveries: what a failed step does next (E3, W7, W8).

In-process retries (``retryTimes``) live in the NodeRunner; this is the outer loop. A step
that still fails is retried by a delayed copy of its carrier, bounded by a per-node budget,
a per-execution total and, for manual wake-ups, two more caps (seed plaita#91, #123, #73).
Counters are read before the decision and changed as the decision says, under the lease.
"""

from __future__ import annotations

import enum

import attrs

from plaita.domain.failures import (
    CODE_BRANCH_MISS,
    CODE_CANCELLED,
    CODE_DETERMINISTIC,
    CODE_TIMEOUT,
    ExecutionCancelledError,
    FlowErrorException,
    FlowExecutionException,
    FlowTimeoutError,
    NodeExecutionError,
)
from plaita.domain.failures import FailureKind as FailureKind
from plaita.domain.failures import backoff_seconds as backoff_seconds
from plaita.domain.failures import classify_failure as classify_failure

COUNTER_TTL_SECONDS = 7 * 24 * 60 * 60  # sliding: every increment refreshes it
NODE_RETRY_TOTAL_MAX = 100
#: Wake-ups of one execution by ``retry``, manual and automatic alike (seed G1_MAX_WAKEUPS).
G1_MAX_WAKEUPS = 2
#: Consecutive deterministic failures before a retry is refused (seed DETERMINISTIC_FAILURE_MAX).
DETERMINISTIC_FAILURE_MAX = 12
_MAX_CHAIN = 32


def classify_error_code(code: int) -> FailureKind:
    """Classify a failure recorded in a checkpoint by its code, as the step would have been.

    A branch miss is a graph error: terminal, never retried (E7). Unknown codes are transient.
    """
    if code in (CODE_TIMEOUT, CODE_CANCELLED, CODE_BRANCH_MISS):
        return FailureKind.TERMINAL
    return FailureKind.DETERMINISTIC if code == CODE_DETERMINISTIC else FailureKind.TRANSIENT


def _chain(error: BaseException) -> list[BaseException]:
    links: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and len(links) < _MAX_CHAIN and all(link is not x for x in links):
        links.append(link)
        link = link.__cause__
    return links


def classify_step_failure(error: BaseException) -> FailureKind:
    """Classify what a distributed step raised; the engine flattens it to FlowErrorException.

    A timeout, deadline or cancel anywhere in the chain is terminal (seed #267). A node's own
    failure is judged by its original exception, so an abort wrapper never turns a
    deterministic error back into a retryable one (seed A50-03). Any other flow error is a
    graph error, terminal. What is left (infrastructure) is classified by the innermost cause.
    Lease and resume-protocol errors are decided before a failure gets here (W4, W7).
    """
    links = _chain(error)
    if any(isinstance(x, FlowTimeoutError | ExecutionCancelledError) for x in links):
        return FailureKind.TERMINAL
    for link in links:
        if isinstance(link, NodeExecutionError):
            cause = link.__cause__
            return classify_error_code(link.code) if cause is None else classify_failure(cause)
    if any(
        type(x) is not FlowErrorException and isinstance(x, FlowExecutionException) for x in links
    ):
        return FailureKind.TERMINAL
    return classify_failure(links[-1])


def failed_node_of(error: BaseException) -> str | None:
    """The failing node: the NodeExecutionError's, else any flow error's (seed #123).

    Never the checkpoint's $LAST_NODE: a failed node writes no context, so that is the node
    before it. None makes the caller count per execution, the conservative fallback.
    """
    flow_errors = [x for x in _chain(error) if isinstance(x, FlowExecutionException)]
    ranked = sorted(flow_errors, key=lambda x: not isinstance(x, NodeExecutionError))
    return next((x.node_id for x in ranked if x.node_id), None)


class Counter(enum.StrEnum):
    NODE_RETRIES = "noderetry"  # per (execution, node); node_id None = per execution
    ALL_NODE_RETRIES = "noderetry:*"  # every node counter of the execution
    TOTAL_RETRIES = "noderefetch"
    WAKEUPS = "g1wakeups"
    NO_FAIL = "nofail"  # consecutive deterministic failures


class CounterOp(enum.StrEnum):
    INCREMENT = "increment"
    RESET = "reset"


@attrs.frozen
class CounterChange:
    counter: Counter
    op: CounterOp
    node_id: str | None = None


def on_node_success(node_id: str | None) -> tuple[CounterChange, ...]:
    """Success clears only that node's counter, never a sibling's (seed #123), and the streak.

    The total is never cleared: it is the last bound when node keys drift.
    """
    return (
        CounterChange(Counter.NODE_RETRIES, CounterOp.RESET, node_id),
        CounterChange(Counter.NO_FAIL, CounterOp.RESET),
    )


class FailureAction(enum.StrEnum):
    PERSIST = "persist"  # checkpoint unchanged plus the counter changes, fenced
    TERMINALISE = "terminalise"  # error (cancelled for a cancel) with failed_node, node_retries
    RELEASE_LEASE = "release_lease"
    SCHEDULE_COPY = "schedule_copy"  # delay queue, due now + delay_ms, source age and schema
    ACK_ORIGINAL = "ack_original"
    DEAD_LETTER = "dead_letter"  # via the W9 guard, which sees a terminal execution


class TerminalReason(enum.StrEnum):
    NODE_BUDGET_EXHAUSTED = "node_budget_exhausted"
    TOTAL_BUDGET_EXHAUSTED = "total_budget_exhausted"
    DETERMINISTIC = "deterministic_failure"
    TERMINAL = "terminal_failure"  # timeout, deadline, cancel, graph error


# The copy is scheduled only once the lease is free, so it never meets its own holder, and
# the original is acked last, so a crash at any point still leaves a carrier (W8, I0).
_RETRY = (
    FailureAction.PERSIST,
    FailureAction.RELEASE_LEASE,
    FailureAction.SCHEDULE_COPY,
    FailureAction.ACK_ORIGINAL,
)
_EXHAUSTED = (FailureAction.TERMINALISE, FailureAction.RELEASE_LEASE, FailureAction.DEAD_LETTER)
_FAILED = (FailureAction.TERMINALISE, FailureAction.RELEASE_LEASE, FailureAction.ACK_ORIGINAL)


@attrs.frozen
class FailureDecision:
    actions: tuple[FailureAction, ...]
    failed_node: str | None
    node_retries: int  # retries of failed_node already spent before this decision
    delay_ms: int | None = None
    terminal_reason: TerminalReason | None = None
    counter_changes: tuple[CounterChange, ...] = ()

    @property
    def retries(self) -> bool:
        return self.terminal_reason is None


def decide_node_failure(
    kind: FailureKind,
    *,
    failed_node: str | None,
    node_retries: int,
    total_retries: int,
    max_deliveries: int,
) -> FailureDecision:
    """Retry a transient failure within budget = max_deliveries and total 100; else terminal.

    ``node_retries``/``total_retries`` are the counters as read: retries already scheduled.
    Timeouts, deadlines and cancels are terminal without retry (E5, W8); they and
    deterministic failures lengthen the no-fail streak that bounds wake-ups (seed #73).
    """
    if kind is not FailureKind.TRANSIENT:
        reason = (
            TerminalReason.DETERMINISTIC
            if kind is FailureKind.DETERMINISTIC
            else TerminalReason.TERMINAL
        )
        streak = (CounterChange(Counter.NO_FAIL, CounterOp.INCREMENT),)
        return FailureDecision(_FAILED, failed_node, node_retries, None, reason, streak)
    if node_retries >= max_deliveries or total_retries >= NODE_RETRY_TOTAL_MAX:
        spent = (
            TerminalReason.NODE_BUDGET_EXHAUSTED
            if node_retries >= max_deliveries
            else TerminalReason.TOTAL_BUDGET_EXHAUSTED
        )
        return FailureDecision(_EXHAUSTED, failed_node, node_retries, None, spent)
    delay_ms = int(backoff_seconds(node_retries + 1) * 1000)
    changes = (
        CounterChange(Counter.NODE_RETRIES, CounterOp.INCREMENT, failed_node),
        CounterChange(Counter.TOTAL_RETRIES, CounterOp.INCREMENT),
    )
    return FailureDecision(_RETRY, failed_node, node_retries, delay_ms, None, changes)


class WakeupRefusal(enum.StrEnum):
    G1_WAKEUPS_EXHAUSTED = "g1_wakeups_exhausted"
    DETERMINISTIC_FAILURE_EXHAUSTED = "deterministic_failure_exhausted"


@attrs.frozen
class WakeUpCaps:
    max_wakeups: int = G1_MAX_WAKEUPS
    max_consecutive_failures: int = DETERMINISTIC_FAILURE_MAX


@attrs.frozen
class WakeupDecision:
    refusal: WakeupRefusal | None
    counter_changes: tuple[CounterChange, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.refusal is None


def decide_wakeup(
    *, wakeups: int, no_fail_streak: int, caps: WakeUpCaps = WakeUpCaps()
) -> WakeupDecision:
    """Budget side of "error + retry" (W7): at most 2 wake-ups, refused after 12 deterministic
    failures in a row (the default caps). Refusal is a value, never an exception, and changes
    nothing.

    A wake-up grants every node a fresh budget but keeps the streak, or a flow that always
    fails would be woken for ever (seed #73). Only ``error`` executions reach this.
    """
    if wakeups >= caps.max_wakeups:
        return WakeupDecision(WakeupRefusal.G1_WAKEUPS_EXHAUSTED)
    if no_fail_streak >= caps.max_consecutive_failures:
        return WakeupDecision(WakeupRefusal.DETERMINISTIC_FAILURE_EXHAUSTED)
    return WakeupDecision(
        None,
        (
            CounterChange(Counter.WAKEUPS, CounterOp.INCREMENT),
            CounterChange(Counter.ALL_NODE_RETRIES, CounterOp.RESET),
        ),
    )
