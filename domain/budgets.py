"""Retry budgets: what a failed or crashed attempt does next (E3, E15, W2, W7, W8).

One retry policy per node (E15): ``retryTimes`` (absent: the deployment's default retries)
is the only count of a node's retries, decided by ``decide_retry`` — in process for
``plaita run`` (the runner sleeps the backoff), durably on a worker (a delayed copy of the
carrier per retry, never multiplied by a second layer). The attempt number counts every
attempt of the node across deliveries: retries already scheduled plus attempts that
crashed their worker (``attempt_number``).

A crashed attempt — a dispatch that started under the lease and never returned — is
counted against ``--max-deliveries`` (W2), apart from the node's retries: a worker killed
under an innocent step must not spend that step's retries, and a skipped redelivery
(the lease was live) costs nothing at all. A per-execution total and, for manual wake-ups,
two more caps bound everything (#91, #123, #73). Counters are read before the
decision and changed as the decision says, under the lease.
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
#: Wake-ups of one execution by ``retry``, manual and automatic alike (the ``g1wakeups`` cap, W7).
G1_MAX_WAKEUPS = 2
#: Consecutive deterministic failures before a retry is refused (the ``nofail`` cap, W7).
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

    A timeout, deadline or cancel anywhere in the chain is terminal (#267). A node's own
    failure is judged by its original exception, so an abort wrapper never turns a
    deterministic error back into a retryable one (A50-03). Any other flow error is a
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
    """The failing node: the NodeExecutionError's, else any flow error's (#123).

    Never the checkpoint's $LAST_NODE: a failed node writes no context, so that is the node
    before it. None makes the caller count per execution, the conservative fallback.
    """
    flow_errors = [x for x in _chain(error) if isinstance(x, FlowExecutionException)]
    ranked = sorted(flow_errors, key=lambda x: not isinstance(x, NodeExecutionError))
    return next((x.node_id for x in ranked if x.node_id), None)


#: A node without ``retryTimes`` is retried this many times (``--default-retries``, E15).
DEFAULT_RETRIES = 5


class Counter(enum.StrEnum):
    NODE_RETRIES = "noderetry"  # per (execution, node); node_id None = per execution
    ALL_NODE_RETRIES = "noderetry:*"  # every node counter of the execution
    #: Attempts of a node that crashed their worker (W2), per (execution, node).
    NODE_CRASHES = "nodecrash"
    ALL_NODE_CRASHES = "nodecrash:*"
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


#: Counters that hold one value per node.
PER_NODE_COUNTERS = frozenset({Counter.NODE_RETRIES, Counter.NODE_CRASHES})


def on_node_success(node_id: str | None) -> tuple[CounterChange, ...]:
    """Success clears only that node's counters, never a sibling's (#123), and the streak.

    The total is never cleared: it is the last bound when node keys drift.
    """
    return (
        CounterChange(Counter.NODE_RETRIES, CounterOp.RESET, node_id),
        CounterChange(Counter.NODE_CRASHES, CounterOp.RESET, node_id),
        CounterChange(Counter.NO_FAIL, CounterOp.RESET),
    )


def attempt_number(*, node_retries: int, node_crashes: int) -> int:
    """The node's attempt about to run, counting every earlier one across deliveries (E15).

    ``ctx.attempt`` is this number: it never restarts on a redelivery.
    """
    return 1 + node_retries + node_crashes


def resolve_retry_times(retry_times: int | None, default_retries: int) -> int:
    """A node's retry count: its own ``retryTimes``, else the deployment default (E15)."""
    return default_retries if retry_times is None else retry_times


@attrs.frozen
class RetryVerdict:
    """Whether a failed attempt is tried again, and after how long."""

    retry: bool
    delay_ms: int | None = None


def decide_retry(kind: FailureKind, *, attempt: int, retry_times: int) -> RetryVerdict:
    """The one retry rule (E3, E15): a transient failure of attempt ``attempt`` is retried
    while ``attempt <= retry_times``, after ``min(30 s, 2^(attempt-1) s)``; anything else,
    or a spent budget, goes to the node's errorHandler.

    The runner asks it in process and on a worker alike; on a worker the retry is a delayed
    copy of the carrier, so both count exactly ``1 + retry_times`` attempts.
    """
    if kind is not FailureKind.TRANSIENT or attempt > retry_times:
        return RetryVerdict(retry=False)
    return RetryVerdict(retry=True, delay_ms=int(backoff_seconds(attempt) * 1000))


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
    attempt: int,
    retry_times: int,
    node_retries: int,
    total_retries: int,
) -> FailureDecision:
    """What a worker does with a step that failed at ``attempt`` of ``failed_node`` (E15, W8).

    A transient failure the retry rule retries becomes a delayed copy (bounded by the
    execution's total of 100); one it does not retry spent the node's budget: terminal, and
    the carrier goes to the dead-letter queue. ``node_retries``/``total_retries`` are the
    counters as read: retries already scheduled. Timeouts, deadlines and cancels are terminal
    without retry (E5, W8); they and deterministic failures lengthen the no-fail streak that
    bounds wake-ups (#73).
    """
    if kind is not FailureKind.TRANSIENT:
        reason = (
            TerminalReason.DETERMINISTIC
            if kind is FailureKind.DETERMINISTIC
            else TerminalReason.TERMINAL
        )
        streak = (CounterChange(Counter.NO_FAIL, CounterOp.INCREMENT),)
        return FailureDecision(_FAILED, failed_node, node_retries, None, reason, streak)
    verdict = decide_retry(kind, attempt=attempt, retry_times=retry_times)
    if not verdict.retry or total_retries >= NODE_RETRY_TOTAL_MAX:
        spent = (
            TerminalReason.TOTAL_BUDGET_EXHAUSTED
            if verdict.retry
            else TerminalReason.NODE_BUDGET_EXHAUSTED
        )
        return FailureDecision(_EXHAUSTED, failed_node, node_retries, None, spent)
    changes = (
        CounterChange(Counter.NODE_RETRIES, CounterOp.INCREMENT, failed_node),
        CounterChange(Counter.TOTAL_RETRIES, CounterOp.INCREMENT),
    )
    return FailureDecision(_RETRY, failed_node, node_retries, verdict.delay_ms, None, changes)


# --- crashed attempts (W2) ------------------------------------------------------------


def crash_budget_spent(node_crashes: int, max_deliveries: int) -> bool:
    """Attempts that crashed their worker have used ``--max-deliveries`` up (W2)."""
    return node_crashes >= max_deliveries


@attrs.frozen
class CrashDecision:
    """What a dispatch does about the attempts before it that never returned."""

    counter_changes: tuple[CounterChange, ...]
    #: Crashed attempts of the node, this one's predecessor included.
    crashes: int
    budget_spent: bool


def decide_crashed_attempts(
    *, node_id: str | None, node_crashes: int, previous_unfinished: bool, max_deliveries: int
) -> CrashDecision:
    """Count an unfinished earlier attempt against the node at the checkpoint (W2).

    ``previous_unfinished``: a dispatch under an earlier lease generation started and never
    returned (its worker died, or it lost its lease); its step was the checkpoint's next node,
    the only one that can have been running. Once ``max_deliveries`` attempts crashed, the
    carrier is given up (dead-letter guard: terminal, then one DLQ entry); the spent budget is
    read again by every later dispatch, so a crash while giving up still gives up.
    A first delivery always runs: it has no predecessor.
    """
    changes: tuple[CounterChange, ...] = ()
    crashes = node_crashes
    if previous_unfinished:
        crashes += 1
        changes = (
            CounterChange(Counter.NODE_CRASHES, CounterOp.INCREMENT, node_id),
            CounterChange(Counter.TOTAL_RETRIES, CounterOp.INCREMENT),
        )
    return CrashDecision(changes, crashes, crash_budget_spent(crashes, max_deliveries))


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
    fails would be woken for ever (#73). Only ``error`` executions reach this.
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
            CounterChange(Counter.ALL_NODE_CRASHES, CounterOp.RESET),
        ),
    )
