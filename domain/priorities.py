"""Priorities (``high``, ``normal``, ``low``): which carriers a worker's read takes first.

A carrier's priority picks one of three streams of its queue partition. A read sees what each
level has ready and takes, for each carrier it may take, the level whose turn it is in
``SHARE_CYCLE``: of every 10 carriers taken while all three levels have work, 7 are high, 2
normal and 1 low, so a saturated high level never starves the others. A level with nothing
ready gives its turn to the highest level that has something. The share is fixed, the same
on every worker, so an operator can tell from the priorities alone what runs first.

A message id names its priority as it names its partition (``plaita.domain.partitions``),
without changing its ``<ms>-<seq>`` shape: a high carrier's sequence is offset by
``PRIORITY_ID_BAND``, a low one's by twice that, a normal one's not at all — a normal
carrier's id is what it always was. The millisecond part (the carrier's age, W14) is kept.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from plaita.domain.errors import InvalidPriorityError


class Priority(enum.StrEnum):
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


#: The levels in the order they are read: highest first.
PRIORITIES: tuple[Priority, ...] = (Priority.HIGH, Priority.NORMAL, Priority.LOW)

_H, _N, _L = PRIORITIES
#: Whose turn each carrier taken is, cycling: 7 high, 2 normal, 1 low in every 10, spread out
#: (a smooth weighted round robin over 7:2:1) so a lower level never waits 9 turns in a row.
SHARE_CYCLE: tuple[Priority, ...] = (_H, _H, _N, _H, _H, _L, _H, _N, _H, _H)


def parse_priority(value: object) -> Priority:
    """``value`` as a ``Priority``; ``InvalidPriorityError`` naming it and the allowed ones."""
    if isinstance(value, str):
        try:
            return Priority(value)
        except ValueError:
            pass
    allowed = ", ".join(level.value for level in PRIORITIES)
    raise InvalidPriorityError(
        f"priority {value!r} is not one of {allowed}; start with one of them "
        "(normal when none is given)"
    )


@attrs.frozen
class PriorityTake:
    """What one read takes: how many carriers of each level, and the turn the next read
    starts at (carry it from read to read, so the share holds across small reads)."""

    taken: Mapping[Priority, int]
    next_turn: int

    @property
    def total(self) -> int:
        return sum(self.taken.values())


def take_in_priority_order(count: int, ready: Mapping[Priority, int], turn: int) -> PriorityTake:
    """Which of the ``ready`` carriers (per level) a read that may take ``count`` takes, from
    ``turn`` (a position in ``SHARE_CYCLE``) on.

    Total: it takes ``min(count, all ready)``, never more of a level than it has ready; a
    negative count or ready takes nothing. Each carrier taken uses one turn, whoever's it was.
    """
    left = {level: max(0, int(ready.get(level, 0))) for level in PRIORITIES}
    taken = dict.fromkeys(PRIORITIES, 0)
    turn %= len(SHARE_CYCLE)
    for _ in range(max(0, count)):
        level = SHARE_CYCLE[turn]
        if not left[level]:
            level = next((other for other in PRIORITIES if left[other]), level)
            if not left[level]:
                break
        left[level] -= 1
        taken[level] += 1
        turn = (turn + 1) % len(SHARE_CYCLE)
    return PriorityTake(taken, turn)


# --- message ids ---------------------------------------------------------------------------

#: How far a level's sequence numbers are offset in a message id (see the module docstring).
#: Redis numbers a stream's entries within one millisecond from 0, so no real sequence comes
#: near it, and 2 bands on top of any such sequence stay below 2**64.
PRIORITY_ID_BAND = 10**18
_BANDS: dict[Priority, int] = {Priority.NORMAL: 0, Priority.HIGH: 1, Priority.LOW: 2}
_BY_BAND = {band: level for level, band in _BANDS.items()}


def priority_id(message_id: str, priority: Priority) -> str:
    """The message id of entry ``message_id`` (``<ms>-<seq>``) of ``priority``'s stream."""
    band = _BANDS[priority]
    if not band:
        return message_id
    ms, _, seq = message_id.partition("-")
    return f"{ms}-{band * PRIORITY_ID_BAND + int(seq or 0)}"


def split_priority_id(message_id: str) -> tuple[Priority, str] | None:
    """(priority, id within its stream) of a ``priority_id``; None when it is not one."""
    ms, dash, seq = message_id.partition("-")
    if not (dash and ms.isascii() and ms.isdigit() and seq.isascii() and seq.isdigit()):
        return None
    band, number = divmod(int(seq), PRIORITY_ID_BAND)
    level = _BY_BAND.get(band)
    if level is None:
        return None
    return level, f"{ms}-{number}" if band else message_id
