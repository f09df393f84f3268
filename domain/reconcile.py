"""Which stored events a reconcile round replays, and where the next round starts (V5).

The reconciler is the second line of defence behind the notification stream (ADR 0002): it
re-reads stored events by time and runs the event filter on each again. A round covers the
window ``[cursor - overlap, now - settle)``:

- the **cursor** is the end of the last window that was replayed completely; it is kept in
  a store and only ever moves forward, and only after a whole round succeeded — a round
  that fails half way replays its window again next time (V5: a failed replay voids it);
- the **overlap** re-reads a margin before the cursor, for events stored after the round
  that should have seen them listed (a slow publisher, a publisher whose clock lags);
- the **settle** time leaves fresh events to the notification stream, which normally
  handles them within milliseconds; replaying them at once would only enqueue duplicates;
- with no cursor yet, the first round starts **lookback** before now;
- one round covers at most **max span** after the cursor, so a reconciler that was down for
  days catches up in bounded rounds, each one's progress kept.

Events come in pages, oldest first. Several events may share a millisecond, and a query
can only say "from this millisecond on", so the next page starts at the last page's newest
millisecond and skips the ids already replayed there, asking for enough more that it always
makes progress.

Pure: no clock (``now_ms`` is passed in), no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from plaita.domain.errors import InvalidConfigurationError, PlaitaError
from plaita.domain.events import MAX_LISTING_LIMIT
from plaita.domain.outages import Backoff

DEFAULT_INTERVAL_MS = 30_000
DEFAULT_LOOKBACK_MS = 60 * 60 * 1000
DEFAULT_OVERLAP_MS = 10_000
DEFAULT_SETTLE_MS = 5_000
DEFAULT_MAX_SPAN_MS = 60 * 60 * 1000
DEFAULT_PAGE_SIZE = 500
#: Failed rounds back off up to this long (or the interval, if that is longer).
MAX_RETRY_DELAY_MS = 5 * 60 * 1000


class InvalidReconcileSettingsError(InvalidConfigurationError):
    """A reconciler setting is negative, non-finite or out of range; nothing was started."""


class ReconcilePageOverflowError(PlaitaError):
    """More events share one millisecond than one listing may return; the round cannot page
    past them (V5)."""


class ReconcileRoundError(PlaitaError):
    """A reconcile round failed; its cursor was not advanced and nothing was counted (V5)."""


@attrs.frozen
class ReconcileSettings:
    """How far back, with what margins and page size a reconcile round reads (V5)."""

    lookback_ms: int = DEFAULT_LOOKBACK_MS
    overlap_ms: int = DEFAULT_OVERLAP_MS
    settle_ms: int = DEFAULT_SETTLE_MS
    max_span_ms: int = DEFAULT_MAX_SPAN_MS
    page_size: int = DEFAULT_PAGE_SIZE

    def __attrs_post_init__(self) -> None:
        problems = [
            problem
            for name, minimum in (
                ("lookback_ms", 0),
                ("overlap_ms", 0),
                ("settle_ms", 0),
                ("max_span_ms", 1),
            )
            if (problem := _integer_problem(name, getattr(self, name), minimum)) is not None
        ]
        # A page must leave room for the ids skipped at its first millisecond (see next_page).
        largest_page = MAX_LISTING_LIMIT // 2
        if (
            isinstance(self.page_size, bool)
            or not isinstance(self.page_size, int)
            or not 1 <= self.page_size <= largest_page
        ):
            problems.append(
                f"page_size must be an integer from 1 to {largest_page}, got {self.page_size!r}"
            )
        if problems:
            raise InvalidReconcileSettingsError("; ".join(problems))


def _integer_problem(name: str, value: object, minimum: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return f"{name} must be an integer >= {minimum} (milliseconds), got {value!r}"
    return None


def seconds_to_ms(name: str, value: object, *, allow_zero: bool) -> int:
    """An operator's setting in seconds as milliseconds; a named error for anything unusable.

    ``name`` is how the operator spelled the setting (a flag or variable), so the message
    says which value to fix.
    """
    bound = ">= 0" if allow_zero else "> 0"
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not allow_zero)
    ):
        raise InvalidReconcileSettingsError(
            f"{name} must be a finite number of seconds {bound}, got {value!r}"
        )
    ms = round(value * 1000)
    if ms == 0 and not allow_zero:
        raise InvalidReconcileSettingsError(
            f"{name} must be at least 0.001 seconds (one millisecond), got {value!r}"
        )
    return ms


# --- the window of one round ----------------------------------------------------------------


@attrs.frozen
class ReconcileWindow:
    """The events one round replays: timestamps in ``[since_ms, until_ms)``."""

    since_ms: int
    until_ms: int
    #: Where the new part of the window begins: the stored cursor, or now - lookback.
    start_ms: int
    #: The cursor to store once every event of the window was replayed.
    cursor_after_ms: int
    #: False when the window was cut at ``max_span_ms``: the next round should follow at once.
    caught_up: bool

    @property
    def is_empty(self) -> bool:
        """Nothing after the cursor has settled yet: the round lists nothing."""
        return self.until_ms <= self.start_ms


def plan_window(cursor_ms: int | None, now_ms: int, settings: ReconcileSettings) -> ReconcileWindow:
    """The window of the round that begins at ``now_ms`` after the stored ``cursor_ms``."""
    if cursor_ms is None:
        start = now_ms - settings.lookback_ms
        since = start
    else:
        start = cursor_ms
        since = cursor_ms - settings.overlap_ms
    horizon = now_ms - settings.settle_ms
    capped = start + settings.max_span_ms
    until = max(since, min(horizon, capped))
    return ReconcileWindow(
        since_ms=max(0, since),
        until_ms=max(0, until),
        start_ms=start,
        # Never backwards (a clock that went back, a cursor another filter moved ahead): an
        # empty first round still records where it began, so the next one has a cursor.
        cursor_after_ms=max(start, until),
        caught_up=capped >= horizon,
    )


# --- paging ---------------------------------------------------------------------------------


@attrs.frozen
class PageRequest:
    """One listing: events in ``[since_ms, until_ms)``, at most ``limit``, minus ``skip``."""

    since_ms: int
    until_ms: int
    limit: int
    #: Ids at ``since_ms`` an earlier page of the round already replayed.
    skip: frozenset[str] = frozenset()


def first_page(window: ReconcileWindow, page_size: int) -> PageRequest:
    return PageRequest(since_ms=window.since_ms, until_ms=window.until_ms, limit=page_size)


def next_page(
    request: PageRequest, page: Sequence[tuple[int, str]], page_size: int
) -> PageRequest | None:
    """The listing after ``page`` (its events as ``(timestamp_ms, event_id)``), or None.

    A page shorter than its limit was the last. Otherwise the next starts at the page's
    newest millisecond, skips the ids seen there and asks for ``page_size`` more than it
    skips, so every page brings at least ``page_size`` new events while there are any.
    """
    if len(page) < request.limit:
        return None
    newest = max(timestamp for timestamp, _ in page)
    seen = {event_id for timestamp, event_id in page if timestamp == newest}
    if newest == request.since_ms:
        seen |= request.skip
    limit = len(seen) + page_size
    if limit > MAX_LISTING_LIMIT:
        raise ReconcilePageOverflowError(
            f"{len(seen)} stored events share the millisecond {newest}; a listing returns at "
            f"most {MAX_LISTING_LIMIT}, so the round cannot page past them. Lower the page "
            f"size (now {page_size}) so more of them fit, or replay that millisecond by hand"
        )
    return PageRequest(
        since_ms=newest, until_ms=request.until_ms, limit=limit, skip=frozenset(seen)
    )


# --- cadence --------------------------------------------------------------------------------


def delay_before_next_round_ms(
    interval_ms: int, *, consecutive_failures: int, caught_up: bool = True
) -> int:
    """How long the service waits before the next round.

    After a success: the interval, or nothing while a capped window is still catching up.
    After ``consecutive_failures`` failed rounds: twice the interval per failure, up to
    ``MAX_RETRY_DELAY_MS`` (or the interval, if that is longer) — a Redis outage is not
    hammered, and the voided window is replayed once the store answers again.
    """
    if consecutive_failures <= 0:
        return interval_ms if caught_up else 0
    return round_backoff(interval_ms).delay_ms(consecutive_failures)


def round_backoff(interval_ms: int) -> Backoff:
    """Failed rounds wait twice, four times … the interval, at most ``MAX_RETRY_DELAY_MS`` (or the
    interval, if that is longer)."""
    cap = max(interval_ms, MAX_RETRY_DELAY_MS)
    return Backoff(base_ms=min(2 * interval_ms, cap), cap_ms=cap)
