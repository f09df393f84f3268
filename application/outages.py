"""What a background loop says, and how long it waits, when its store fails.

``StoreOutages`` is one store as seen by every background loop of one process; each loop
takes a ``LoopOutage`` from it and reports each attempt: ``failed(error)`` answers how long
to wait, ``succeeded()`` closes what the failures opened. The rules are the domain's
(``plaita.domain.outages``); this module only logs them:

- an *expected* error (the store is unreachable: the ``expected`` types, connection and
  timeout errors) joins the store's outage — the first one logs a WARNING
  ``event=store.unreachable``, the rest are counted, and the end logs one INFO
  ``event=store.recovered`` with the count and the duration; never a traceback;
- any other error is a bug or a surprise in that loop: its first failure in a row logs a
  WARNING ``event=loop.failed`` with the traceback, the repeats are counted, and its next
  success logs ``event=loop.recovered``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from plaita.domain.outages import Backoff, StoreHealth

#: Errors that say "the store did not answer" rather than "this code is wrong".
DEFAULT_EXPECTED: tuple[type[BaseException], ...] = (OSError,)


class StoreOutages:
    """One store's outages across the background loops of one process."""

    def __init__(
        self,
        store: str,
        *,
        log: logging.Logger,
        expected: tuple[type[BaseException], ...] = DEFAULT_EXPECTED,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.health = StoreHealth()
        self._log = log
        self._expected = expected
        self._monotonic = monotonic

    def loop(self, name: str, *, consequence: str, backoff: Backoff) -> LoopOutage:
        """The tracker of one loop; ``consequence`` says what waits while it fails."""
        return LoopOutage(self, name, consequence=consequence, backoff=backoff)

    def _now_ms(self) -> int:
        return int(self._monotonic() * 1000)

    def expects(self, error: BaseException) -> bool:
        """Whether ``error``, or an error it was raised from, says the store is unreachable.

        A use case may wrap the client's error in its own (a failed reconcile round): the
        outage is still an outage, logged without a traceback.
        """
        seen: set[int] = set()
        cause: BaseException | None = error
        while cause is not None and id(cause) not in seen:
            if isinstance(cause, self._expected):
                return True
            seen.add(id(cause))
            cause = cause.__cause__ or cause.__context__
        return False

    def _failed(self, loop: LoopOutage, error: BaseException, context: str) -> None:
        seen = self.health.failed(loop.name, now_ms=self._now_ms())
        self.health = seen.health
        if not seen.started:
            self._log.debug(
                "event=store.still_unreachable store=%s loop=%s%s error=%r",
                self.store,
                loop.name,
                context,
                error,
            )
            return
        self._log.warning(
            "event=store.unreachable store=%s loop=%s%s error=%r: %s; the background loops "
            "retry with back-off (at most %g s apart) and count further failures until it "
            "answers again; check that %s is running and reachable",
            self.store,
            loop.name,
            context,
            error,
            loop.consequence,
            loop.backoff.cap_ms / 1000,
            self.store,
        )

    def _succeeded(self, loop: LoopOutage) -> None:
        seen = self.health.succeeded(loop.name, now_ms=self._now_ms())
        self.health = seen.health
        if seen.ended is None:
            return
        self._log.info(
            "event=store.recovered store=%s failures=%d outage_s=%.1f loops=%s: %s answers "
            "again; the background loops are back to their normal pace",
            self.store,
            seen.ended.total,
            seen.ended.duration_ms / 1000,
            ",".join(f"{name}:{count}" for name, count in sorted(seen.ended.failures.items())),
            self.store,
        )

    def _failed_unexpectedly(self, loop: LoopOutage, error: BaseException, context: str) -> None:
        if loop.unexpected > 1:
            self._log.debug(
                "event=loop.still_failing loop=%s%s failures=%d error=%r",
                loop.name,
                context,
                loop.unexpected,
                error,
            )
            return
        self._log.warning(
            "event=loop.failed loop=%s%s error=%r: %s; retrying with back-off (at most %g s "
            "apart); repeats of this failure are counted until the loop works again",
            loop.name,
            context,
            error,
            loop.consequence,
            loop.backoff.cap_ms / 1000,
            exc_info=error,
        )

    def _recovered_unexpectedly(self, loop: LoopOutage) -> None:
        self._log.info("event=loop.recovered loop=%s failures=%d", loop.name, loop.unexpected)


class LoopOutage:
    """One background loop's failures in a row: its back-off, reported to its store."""

    def __init__(
        self, outages: StoreOutages, name: str, *, consequence: str, backoff: Backoff
    ) -> None:
        self.name = name
        self.consequence = consequence
        self.backoff = backoff
        #: Failures in a row, of any kind; what the back-off doubles on.
        self.failures = 0
        #: Of those, the ones that were not the store being unreachable.
        self.unexpected = 0
        self._outages = outages
        self._in_store_outage = False

    def failed(self, error: BaseException, **context: object) -> float:
        """Count ``error``; the seconds to wait before this loop tries again.

        ``context`` (e.g. ``event_id=…``) is logged with it as ``key=value`` fields.
        """
        self.failures += 1
        fields = "".join(f" {key}={value}" for key, value in context.items())
        if self._outages.expects(error):
            self._in_store_outage = True
            self._outages._failed(self, error, fields)
        else:
            self.unexpected += 1
            self._outages._failed_unexpectedly(self, error, fields)
        return self.backoff.delay_ms(self.failures) / 1000

    def succeeded(self) -> None:
        """The loop's attempt worked: close its streak and, if it was the last, the outage."""
        if not self.failures:
            return
        self.failures = 0
        if self.unexpected:
            self._outages._recovered_unexpectedly(self)
            self.unexpected = 0
        if self._in_store_outage:
            self._in_store_outage = False
            self._outages._succeeded(self)
