"""Which registered version of a flow is its latest (S2): the version order, and when a
registration moves the latest pointer.

**The version order** is natural: a version is cut into runs of digits and runs of other
characters, and the runs are compared left to right — a run of the digits 0-9 as a number,
any other run as text (by code point, so case counts) — until one differs:

 "2"   < "10"         numbers, not text ("10" < "2" as text)
 "1.9" < "1.10"       run by run: 1 = 1, "." = ".", 9 < 10
 "v2"  < "v3" < "v10"
 "1"   < "1.0"        a version that is the start of another is lower
 "2"   < "v1"         where a number meets text at the same place, the number is lower
 "01"  < "1"          equal numbers (leading zeros): the plain text decides, so that two
                      different versions are never equal and the order is total
 "1.0" < "1.0-rc1"    suffixes carry no meaning: a pre-release written after its release is
                      higher; pick the latest explicitly then

**Whether a registration moves the latest** (``latest_decision``), for the version just
registered (new or already stored), the owner's current latest and whether the caller chose
it explicitly (``--latest``, a rollback):

 #  current latest        explicit  -> latest afterwards           reason
 V1 none                  any       -> the new version (moves)      FIRST
 V2 the new version       any       -> unchanged                    ALREADY
 V3 lower than the new    any       -> the new version (moves)      HIGHER
 V4 higher than the new   no        -> stays the current            LOWER
 V5 higher than the new   yes       -> the new version (moves)      CHOSEN

So an older version never becomes the latest by being registered after a newer one, and an
interrupted registration heals when it is repeated (the same document applies the rule
again). A rollback chosen with ``explicit`` lasts until a higher version is registered
again — also the same higher document once more, say by a worker's ``--flows`` at restart.
"""

from __future__ import annotations

import enum
import re

import attrs

_RUNS = re.compile(r"([0-9]+)|([^0-9]+)")

#: One run of a version: ``(0, digit count, digits)`` for a number without its leading zeros
#: (so numbers of any length compare as numbers, without converting them), ``(1, text)`` for
#: anything else. The first item puts a number before text at the same place.
_Run = tuple[int, int, str] | tuple[int, str]
VersionKey = tuple[tuple[_Run, ...], str]


def version_key(version: str) -> VersionKey:
    """The sort key of ``version`` in the version order (the module docstring): its runs,
    then the plain text for versions whose runs are equal (leading zeros)."""
    runs: list[_Run] = []
    for digits, text in _RUNS.findall(version):
        if digits:
            number = digits.lstrip("0")
            runs.append((0, len(number), number))
        else:
            runs.append((1, text))
    return tuple(runs), version


def is_higher(version: str, than: str) -> bool:
    """``version`` comes after ``than`` in the version order."""
    return version_key(version) > version_key(than)


class LatestReason(enum.Enum):
    FIRST = "first"
    ALREADY = "already"
    HIGHER = "higher"
    LOWER = "lower"
    CHOSEN = "chosen"


@attrs.frozen
class LatestDecision:
    """What a registration of ``version`` does to the owner's latest pointer (V1-V5)."""

    version: str
    #: The owner's latest before the registration (None: it had none).
    current: str | None
    reason: LatestReason

    @property
    def moves(self) -> bool:
        """The pointer must be set to ``version`` (from ``current``)."""
        return self.reason in (LatestReason.FIRST, LatestReason.HIGHER, LatestReason.CHOSEN)

    @property
    def latest(self) -> str:
        """The owner's latest once the decision is applied."""
        if self.moves or self.current is None:
            return self.version
        return self.current

    @property
    def is_latest(self) -> bool:
        return self.latest == self.version


def latest_decision(version: str, current: str | None, *, explicit: bool) -> LatestDecision:
    """V1-V5 for a registration of ``version`` while ``current`` is the latest."""
    if current is None:
        reason = LatestReason.FIRST
    elif current == version:
        reason = LatestReason.ALREADY
    elif is_higher(version, current):
        reason = LatestReason.HIGHER
    elif explicit:
        reason = LatestReason.CHOSEN
    else:
        reason = LatestReason.LOWER
    return LatestDecision(version, current, reason)
