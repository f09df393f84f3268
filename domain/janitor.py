"""How the index janitor runs and how far one pass over an index goes (V7).

Event and subscription indexes keep the ids of records that expired or vanished ("dead
members") until something prunes them: a listing that reads them, or the janitor that walks
the indexes a bounded budget at a time. The rules here are pure: the adapters and the janitor
service apply them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

import attrs

from plaita.domain.startup import ConfigWarning

T = TypeVar("T")

DEFAULT_INTERVAL_SECONDS = 60.0
DEFAULT_BUDGET = 500
#: A longer interval is as good as off (indexes hold 7 days of events), so it is refused
#: like an infinite one instead of silently disabling the janitor.
MAX_INTERVAL_SECONDS = 24 * 60 * 60.0
#: One tick may examine at most this many index members per store, whatever is configured:
#: a janitor tick shares Redis with the workers and must stay short.
MAX_BUDGET = 100_000
#: Dead members one prune script removes at most (V7: "≤ 500 per call"); a script runs
#: atomically on Redis, so a bigger batch would stall every other client for longer.
PRUNE_BATCH = 500
#: Candidates a listing fetches per round trip when its index does not decide every filter.
LISTING_PAGE = 500


@attrs.frozen
class JanitorPlan:
    """What the janitor runs with; ``warnings`` say what was not usable and what it used."""

    enabled: bool
    interval_seconds: float
    budget: int
    warnings: tuple[ConfigWarning, ...] = ()


def plan_janitor(
    *,
    enabled: bool = True,
    interval_seconds: object = DEFAULT_INTERVAL_SECONDS,
    budget: object = DEFAULT_BUDGET,
) -> JanitorPlan:
    """The janitor's plan from its settings: a bad interval or budget falls back, with a warning.

    The interval must be a finite number of seconds above 0 and at most a day: zero would
    spin, a negative or NaN one would make the wait undefined, and infinity (or a year)
    would silently disable pruning. The budget must be a whole number from 1 to
    ``MAX_BUDGET``. Disabling is an explicit switch (``enabled=False``) and warns too,
    because indexes then shrink only when they are read.
    """
    warnings: list[ConfigWarning] = []
    interval = _usable_interval(interval_seconds)
    if interval is None:
        interval = DEFAULT_INTERVAL_SECONDS
        warnings.append(
            ConfigWarning(
                "janitor_interval_seconds",
                interval_seconds,
                interval,
                f"{interval_seconds!r} is not a number of seconds above 0 and at most "
                f"{MAX_INTERVAL_SECONDS:g}; the index janitor runs every {interval:g} s "
                "instead (to stop it, set janitor_enabled=false rather than an unusable "
                "interval)",
            )
        )
    per_tick = _usable_budget(budget)
    if per_tick is None:
        per_tick = DEFAULT_BUDGET
        warnings.append(
            ConfigWarning(
                "janitor_budget",
                budget,
                per_tick,
                f"{budget!r} is not a whole number from 1 to {MAX_BUDGET}; the index janitor "
                f"examines {per_tick} index members per store and tick instead",
            )
        )
    if not enabled:
        warnings.append(
            ConfigWarning(
                "janitor_enabled",
                False,
                False,
                "the index janitor is disabled: index members of expired events and vanished "
                "subscriptions are then pruned only when a listing reads them, so indexes "
                "nobody lists keep them until the index itself expires; set "
                "janitor_enabled=true unless another process runs the janitor",
            )
        )
    return JanitorPlan(
        enabled=enabled, interval_seconds=interval, budget=per_tick, warnings=tuple(warnings)
    )


def _usable_interval(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return number if math.isfinite(number) and 0 < number <= MAX_INTERVAL_SECONDS else None


def _usable_budget(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        return None
    number = int(value)
    return number if 1 <= number <= MAX_BUDGET else None


def prune_batches(members: Sequence[T]) -> list[Sequence[T]]:
    """``members`` cut into consecutive batches of at most ``PRUNE_BATCH`` (one script each)."""
    return [members[at : at + PRUNE_BATCH] for at in range(0, len(members), PRUNE_BATCH)]


def listing_page_size(limit: int, *, exact: bool) -> int:
    """Index members a listing reads per round trip.

    When the index alone decides every filter of the query (``exact``), each live candidate
    is a result, so ``limit`` members suffice; otherwise some candidates will be filtered
    out, and a larger page saves round trips.
    """
    if limit < 1:
        raise ValueError(f"a listing limit is at least 1, got {limit}")
    return limit if exact else max(limit, LISTING_PAGE)
