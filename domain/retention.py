"""Retention (S5): how long a terminal execution is kept, and what a checkpoint does to the
lifetime of the execution's keys; streams are trimmed only below what is still needed.

A running or suspended execution is kept until it ends or is deleted: nothing of it expires
on its own. The checkpoint that makes it terminal gives every record of it (state, node
results, variables, counters, heartbeat, operator flags and parked carriers) a lifetime of
at most the retention, in the same atomic write; a checkpoint that makes it live again (an
error woken up by a retry, an operator's retry from a node) takes that lifetime away. A
terminal execution is so kept for the retention after its last checkpoint. The fence
generation counter is never part of it (W4: never deleted, no TTL).

Why there is no "0 = delete at once": a terminal state answers the carriers that arrive
after the end — a redelivered start, a late timer, a duplicate event — with W7's idempotent
short-circuit. Without it a redelivered start would run the execution again and a late timer
would be dead-lettered as an unknown execution; the retention is how long those late
arrivals stay harmless, so it must be positive.
"""

from __future__ import annotations

import enum

from plaita.domain.execution import ExecutionStatus

DAY_MS = 24 * 60 * 60 * 1000
DEFAULT_RETENTION_DAYS = 7.0
DEFAULT_RETENTION_MS = int(DEFAULT_RETENTION_DAYS * DAY_MS)
#: How long a notification every event filter is done with stays on its stream: every event
#: bus reads the stream without a group, from where it stopped, and must find it there after
#: a reconnect back-off (at most 5 s) or a slow batch.
NOTIFICATION_GRACE_MS = 60_000


class Lifetime(enum.StrEnum):
    """What one checkpoint does to the lifetime of the execution's records."""

    #: Nothing: the execution stays live, or stays terminal with the lifetime it has.
    KEEP = "keep"
    #: It is terminal: its records expire the retention from now; a counter or heartbeat
    #: with a shorter TTL of its own keeps it.
    EXPIRE = "expire"
    #: It is live (again): the records that have no lifetime of their own are kept until the
    #: execution ends or is deleted.
    PERSIST = "persist"


def lifetime_change(previous: ExecutionStatus | None, current: ExecutionStatus) -> Lifetime:
    """What a checkpoint of ``current`` over a stored ``previous`` (None: nothing known, a
    full write) does to the lifetime (S5).

    Every terminal checkpoint expires the records, not only the first one: a wake-up that
    fails again is kept for the retention after that second end, and records written
    before retention existed get their lifetime at the next terminal write.
    """
    if current.is_terminal:
        return Lifetime.EXPIRE
    if previous is None or previous.is_terminal:
        return Lifetime.PERSIST
    return Lifetime.KEEP


def check_retention_ms(retention_ms: int) -> int:
    """``retention_ms`` if it is at least 1 ms; ``ValueError`` otherwise (see the module)."""
    if isinstance(retention_ms, bool) or not isinstance(retention_ms, int) or retention_ms < 1:
        raise ValueError(
            f"a retention must be a positive number of milliseconds, got {retention_ms!r}: a "
            "terminal execution is kept so late carriers meet it (there is no 'delete at once')"
        )
    return retention_ms


def check_trim_age_ms(min_age_ms: int) -> int:
    """The minimum age of a trimmed stream entry: a whole number of ms, 0 for none."""
    if isinstance(min_age_ms, bool) or not isinstance(min_age_ms, int) or min_age_ms < 0:
        raise ValueError(f"a minimum age is a whole number of ms >= 0, got {min_age_ms!r}")
    return min_age_ms
