"""How long an execution and each node attempt may run (E3, E5).

The execution budget is the stricter of the flow's and the caller's timeout; only when
neither is given does the default deadline (1800 s, ``PLAITA_EXECUTION_DEADLINE_SECONDS``)
apply. An explicit timeout always wins over the default, and 0 is a zero budget — never
"unlimited". Each attempt is bounded by the stricter of the node's timeout and what is left
of the budget; when the budget is the bound, running out is ``ExecutionDeadlineError``
(terminal, no timeoutHandler, never retried), which the runner raises when told so here.

Times are passed in: seconds of a monotonic clock, as the runner's ``Clock`` gives them.
"""

from __future__ import annotations

import enum

import attrs

DEFAULT_EXECUTION_DEADLINE_MS = 1_800_000


def execution_budget_ms(
    flow_timeout_ms: int | None,
    caller_timeout_ms: int | None,
    default_deadline_ms: int = DEFAULT_EXECUTION_DEADLINE_MS,
) -> int:
    """Flow timeout vs caller timeout: the stricter; neither → the default deadline (E5)."""
    explicit = [t for t in (flow_timeout_ms, caller_timeout_ms) if t is not None]
    return min(explicit) if explicit else default_deadline_ms


def deadline_at(started_s: float, budget_ms: int | None) -> float | None:
    """The monotonic second the budget runs out; ``None`` for an unbounded run."""
    return None if budget_ms is None else started_s + budget_ms / 1000


def remaining_ms(deadline_s: float | None, now_s: float) -> float | None:
    """What is left of the budget, never below 0; ``None`` when there is no deadline."""
    if deadline_s is None:
        return None
    return max(0.0, (deadline_s - now_s) * 1000)


class AttemptBound(enum.StrEnum):
    """What limits one attempt, and so what its timing out means."""

    #: No node timeout and no deadline.
    UNBOUNDED = "unbounded"
    #: The node's own timeout: expiry goes to the node's timeoutHandler.
    NODE = "node"
    #: The execution budget: expiry is ``ExecutionDeadlineError``.
    DEADLINE = "deadline"


@attrs.frozen
class AttemptLimit:
    limit_ms: float | None
    bound: AttemptBound

    @property
    def deadline_bound(self) -> bool:
        return self.bound is AttemptBound.DEADLINE

    @property
    def deadline_spent(self) -> bool:
        """The budget is gone before the attempt starts: raise the deadline, do not try."""
        return self.deadline_bound and self.limit_ms is not None and self.limit_ms <= 0

    @property
    def timeout_seconds(self) -> float | None:
        return None if self.limit_ms is None else self.limit_ms / 1000


def attempt_limit(remaining: float | None, node_timeout_ms: int | None) -> AttemptLimit:
    """The stricter of the node's timeout and the remaining budget; a tie is the node's (E3)."""
    if remaining is None:
        if node_timeout_ms is None:
            return AttemptLimit(None, AttemptBound.UNBOUNDED)
        return AttemptLimit(node_timeout_ms, AttemptBound.NODE)
    if node_timeout_ms is None or remaining < node_timeout_ms:
        return AttemptLimit(remaining, AttemptBound.DEADLINE)
    return AttemptLimit(node_timeout_ms, AttemptBound.NODE)


def backoff_within_budget(delay_s: float, remaining: float | None) -> float:
    """A retry's backoff, cut to what is left: backoff time counts against the budget (E3)."""
    return delay_s if remaining is None else min(delay_s, remaining / 1000)
