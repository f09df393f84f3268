"""When a background loop that lost its store waits, and when the log says so.

The worker's reads, timers, gauges and registry heartbeat, the event filter's reads, rounds
and housekeeping, the webhook sender: every loop of a long-running process retries forever,
so a store outage must neither hammer the store nor flood the log (an outage used to log a
traceback ten times a second per worker). The rules, in this one place:

- **Back off.** After the n-th consecutive failure a loop waits ``base · 2^(n-1)``, capped.
- **One WARNING per outage.** A process's loops share one ``StoreHealth`` per store: the
  first failure while the store was healthy starts an outage (and is the one announced);
  every later failure, of any loop, is only counted.
- **One INFO when it is over.** The outage ends when every loop that failed during it has
  succeeded again; the end carries how many failures there were, per loop, and how long it
  lasted.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

#: Doublings past which any cap has long been reached (keeps the powers of two small).
_MAX_DOUBLINGS = 32


@attrs.frozen
class Backoff:
    """Capped exponential back-off: ``base_ms`` after the first failure, doubling to ``cap_ms``."""

    base_ms: int
    cap_ms: int

    def __attrs_post_init__(self) -> None:
        if not 0 < self.base_ms <= self.cap_ms:
            raise ValueError(
                f"a back-off needs 0 < base_ms <= cap_ms, got {self.base_ms} and {self.cap_ms}"
            )

    def delay_ms(self, consecutive_failures: int) -> int:
        """How long to wait after ``consecutive_failures`` failures in a row (0: none)."""
        if consecutive_failures <= 0:
            return 0
        doublings = min(consecutive_failures - 1, _MAX_DOUBLINGS)
        return int(min(self.cap_ms, self.base_ms * 2**doublings))


@attrs.frozen
class Outage:
    started_ms: int
    #: Failures counted during the outage, per loop.
    failures: Mapping[str, int]
    #: The loops whose last attempt failed; the outage ends when none is left.
    failing: frozenset[str]

    @property
    def total(self) -> int:
        return sum(self.failures.values())


@attrs.frozen
class OutageEnded:
    failures: Mapping[str, int]
    duration_ms: int

    @property
    def total(self) -> int:
        return sum(self.failures.values())


@attrs.frozen
class FailureSeen:
    health: StoreHealth
    #: The failure started an outage: the one to announce.
    started: bool


@attrs.frozen
class SuccessSeen:
    health: StoreHealth
    #: Set when this success ended the outage: the one to report.
    ended: OutageEnded | None = None


@attrs.frozen
class StoreHealth:
    """One store as one process's loops see it; healthy when there is no ``outage``."""

    outage: Outage | None = None

    def failed(self, loop: str, *, now_ms: int) -> FailureSeen:
        outage = self.outage
        if outage is None:
            begun = Outage(now_ms, {loop: 1}, frozenset({loop}))
            return FailureSeen(StoreHealth(begun), started=True)
        counted = {**outage.failures, loop: outage.failures.get(loop, 0) + 1}
        going_on = Outage(outage.started_ms, counted, outage.failing | {loop})
        return FailureSeen(StoreHealth(going_on), started=False)

    def succeeded(self, loop: str, *, now_ms: int) -> SuccessSeen:
        outage = self.outage
        if outage is None or loop not in outage.failing:
            return SuccessSeen(self)
        failing = outage.failing - {loop}
        if failing:
            return SuccessSeen(StoreHealth(attrs.evolve(outage, failing=failing)))
        ended = OutageEnded(dict(outage.failures), max(0, now_ms - outage.started_ms))
        return SuccessSeen(StoreHealth(), ended)
