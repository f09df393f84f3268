"""Rate limits of task and http nodes (W23): a GCRA bucket per key, decided here only.

A node's ``rate_limit`` (``key``, ``per_second``, ``burst``) admits at most ``burst`` runs at
once and ``per_second`` runs a second after that. The generic cell rate algorithm keeps one
number per bucket, the theoretical arrival time (TAT, µs since the epoch): each admitted run
moves it one emission interval (``1 / per_second``) on from ``max(TAT, now)``; a run is
admitted while the TAT is at most ``burst - 1`` intervals ahead of now. Only an admitted take
moves the TAT, so the take at run time alone decides whether a run may start.

A denied take is told when to come back, in the order takes were denied: the bucket keeps a
second number, the tail of a virtual queue of waiters. A denied take is due at
``max(next free token, tail)`` and moves the tail one interval past its due time, so N
waiters come back one interval apart rather than all at the next free token (where one
would win and N - 1 be denied again: ~N²/2 tries). The tail reserves nothing: a waiter that
comes back early, late or after a newcomer took its token is simply denied again, at the end
of the queue. A bucket whose TAT and tail have both passed is the same as no bucket, so a
store may forget it then.

In any window of ``L`` seconds a bucket admits at most ``burst + floor(L / interval)`` runs,
which is at most ``burst + per_second * L`` (the interval is rounded up to whole µs).
"""

from __future__ import annotations

import json
import math
from typing import Any

import attrs
from pydantic import BaseModel, ConfigDict

from plaita.domain.errors import InvalidRateLimitError

JSON = Any

#: The highest ``per_second`` a node may ask for (one run every 100 µs).
MAX_PER_SECOND = 10_000
#: The highest ``burst``.
MAX_BURST = 100_000
_US_PER_S = 1_000_000
_US_PER_MS = 1_000
#: How long a store keeps a bucket after its TAT has passed (by then it equals no bucket):
#: a bucket expiring between a taker's read and its compare-and-set would make it retry.
BUCKET_GRACE_MS = 1_000


class RateLimitSpec(BaseModel):
    """``rate_limit`` as written in a flow; checked by ``rule_of`` (values of any JSON type,
    so a bad one is named by ``InvalidRateLimitError`` rather than a type error)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: JSON = None
    per_second: JSON = None
    burst: JSON = None


@attrs.frozen
class RateRule:
    per_second: float
    burst: int

    @property
    def interval_us(self) -> int:
        """Time between two runs at the steady rate, rounded up (never faster than asked)."""
        return math.ceil(_US_PER_S / self.per_second)

    @property
    def tolerance_us(self) -> int:
        """How far ahead of now the TAT may be for a run to be admitted."""
        return (self.burst - 1) * self.interval_us


@attrs.frozen
class Bucket:
    """What a store keeps per key: the TAT, and the tail of the waiters' queue (µs since the
    epoch; 0 when no take was ever denied)."""

    tat_us: int
    tail_us: int = 0

    def expires_us(self) -> int:
        """From then on the bucket equals no bucket: full, nobody queued."""
        return max(self.tat_us, self.tail_us)


@attrs.frozen
class Take:
    """One take's answer: ``allowed`` now, or not before ``due_ms``. ``bucket`` is what the
    store holds after the take (None: leave it as it is — a contended take)."""

    allowed: bool
    due_ms: int
    bucket: Bucket | None = None


def default_burst(per_second: float) -> int:
    return max(1, math.ceil(per_second))


def rule_of(spec: RateLimitSpec, *, where: str) -> RateRule:
    """The rule ``spec`` asks for, or ``InvalidRateLimitError`` naming each bad value."""
    problems: list[str] = []
    per_second = spec.per_second
    if (
        isinstance(per_second, bool)
        or not isinstance(per_second, int | float)
        or not math.isfinite(per_second)
        or not 0 < per_second <= MAX_PER_SECOND
    ):
        problems.append(
            f"per_second must be a number above 0 and at most {MAX_PER_SECOND} "
            f"(0.5 is one run every 2 s), got {per_second!r}"
        )
        per_second = 1
    burst = spec.burst
    if burst is None:
        burst = default_burst(per_second)
    elif isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_BURST:
        problems.append(
            f"burst must be a whole number from 1 to {MAX_BURST} (runs allowed at once), "
            f"got {burst!r}; leave it out for max(1, ceil(per_second))"
        )
    key = spec.key
    if key is not None and (not isinstance(key, str) or not key.strip()):
        problems.append(
            f"key must be a non-empty string such as '${{input.customer}}', got {key!r}; "
            "leave it out for one bucket per node"
        )
    if problems:
        raise InvalidRateLimitError(f"{where} rate_limit: {'; '.join(problems)}")
    return RateRule(per_second=float(per_second), burst=int(burst))


def node_bucket(flow_id: str, node_id: str) -> str:
    """The bucket of a node whose ``rate_limit`` names no key: its own, in its flow."""
    return f"{flow_id}:{node_id}"


def key_value(rendered: JSON) -> str:
    """The bucket name a rendered key gives: a string as it is, any other value as JSON."""
    if isinstance(rendered, str):
        return rendered
    return json.dumps(rendered, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def decide_take(stored: Bucket | None, now_ms: int, rule: RateRule) -> Take:
    """GCRA: admit a run at ``now_ms`` against ``stored`` (None: no bucket, i.e. full), or
    give it its turn in the waiters' queue (see the module docstring)."""
    now_us = now_ms * _US_PER_MS
    tat = now_us if stored is None else max(stored.tat_us, now_us)
    tail = 0 if stored is None else stored.tail_us
    allowed_from_us = tat - rule.tolerance_us
    if allowed_from_us <= now_us:
        return Take(allowed=True, due_ms=now_ms, bucket=Bucket(tat + rule.interval_us, tail))
    # The tail never lags the next free token: a queue whose turns have passed is empty.
    due_us = max(allowed_from_us, tail)
    due_ms = -(-due_us // _US_PER_MS)
    # The next waiter's turn: one interval after this one's — after the millisecond it
    # really comes back, when the tolerance cannot absorb that rounding (a waiter admitted
    # late moves the TAT from its own time), so a waiter coming back on time with nobody
    # ahead of it is admitted.
    next_tail = max(due_us, due_ms * _US_PER_MS - rule.tolerance_us) + rule.interval_us
    return Take(allowed=False, due_ms=due_ms, bucket=Bucket(tat, next_tail))


def contended(now_ms: int, rule: RateRule) -> Take:
    """A take that lost its compare-and-set too often: not now, again one interval later
    (at least 1 ms), when the bucket has moved on."""
    return Take(allowed=False, due_ms=now_ms + max(1, -(-rule.interval_us // _US_PER_MS)))


def bucket_ttl_ms(bucket: Bucket, now_ms: int) -> int:
    """How long a store keeps ``bucket``: until its TAT and tail have passed (then it equals
    no bucket), and ``BUCKET_GRACE_MS`` more."""
    return max(0, -(-(bucket.expires_us() - now_ms * _US_PER_MS) // _US_PER_MS)) + BUCKET_GRACE_MS
