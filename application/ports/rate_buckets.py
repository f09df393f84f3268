"""Rate limit buckets (W23): one GCRA bucket per key of a tenant, shared by every worker."""

from __future__ import annotations

from typing import Protocol

from plaita.domain.rate_limits import RateRule, Take


class RateBuckets(Protocol):
    """The buckets of the current tenant (``plaita.application.tenancy``); the rule is the
    domain's (``decide_take``), a store only keeps each bucket (its TAT and its waiters'
    tail) and swaps it safely."""

    async def take(self, key: str, rule: RateRule, *, now_ms: int) -> Take:
        """Take a token from ``key``'s bucket at ``now_ms``, or say when one is due.

        Admitted: the bucket moved on. Denied: not before ``due_ms`` (this waiter's turn, one
        interval after the waiter denied before it), only the queue's tail moved. A store
        that keeps losing races to other takers answers "not yet" (``contended``) rather than
        wait or fail.
        """
        ...
