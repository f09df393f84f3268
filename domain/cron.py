"""Cron expressions in a time zone, and the instants they name (W22).

croniter reads and walks the expression; this module fixes what a schedule means by it:

- **Fields.** Five (minute hour day-of-month month day-of-week), six with a trailing
  *seconds* field (croniter's order: ``* * * * * */10`` is every ten seconds), seven with a
  year after that; nicknames such as ``@hourly`` and ``@daily``. ``H`` picks a value hashed
  from the schedule id, the same on every replica; ``R`` (random) is refused, since two
  replicas would compute different dues for one schedule.
- **Time zone.** The expression is read in an IANA zone (``Europe/Berlin``, default
  ``UTC``). A local time that does not exist on a spring-forward day fires at the first
  instant after the gap (``30 2 * * *`` fires at 03:00); a local time that occurs twice on a
  fall-back day fires **once**, at its first occurrence — each wall-clock time the
  expression names fires at most once.
- **Dues** are epoch milliseconds of whole seconds. Walking is bounded: a listing asks for
  at most ``limit`` dues, newest first when it walks back from now, so a schedule that has
  not run for a year costs no more than one that missed a minute.

The time zone database is data: ``zoneinfo`` reads it the same way every time, so these
functions are deterministic in their arguments.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterator
from datetime import UTC, datetime, tzinfo
from functools import lru_cache

import attrs
from croniter import CroniterBadDateError, CroniterError, croniter

from plaita.domain.errors import InvalidCronExpressionError, UnknownTimeZoneError

DEFAULT_TIMEZONE = "UTC"
#: The longest expression accepted (seven fields of lists are far shorter).
MAX_EXPRESSION_LENGTH = 256
#: Zone names that exist in the database but mean "this machine's zone": two replicas on
#: machines set differently would fire at different instants.
_MACHINE_ZONES = frozenset({"localtime", "posixrules", "Factory"})


@attrs.frozen
class Cron:
    """A validated expression in a validated zone; ``hash_id`` seeds its ``H`` fields."""

    expression: str
    timezone: str
    hash_id: str

    @classmethod
    def parse(cls, expression: object, timezone: object, *, hash_id: str) -> Cron:
        """The expression and zone checked; a named error saying which is wrong and why."""
        zone = validate_timezone(timezone)
        text = _expression(expression)
        try:
            _walker(text, datetime(2000, 1, 1, tzinfo=UTC), hash_id)
        except (CroniterError, ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
            raise InvalidCronExpressionError(
                "cron",
                f"{text!r} is not a cron expression ({exc}); give five fields (minute hour "
                "day month weekday), six with a trailing seconds field, or a nickname such "
                "as @hourly — e.g. '0 3 * * *' is every day at 03:00",
            ) from None
        return cls(text, zone, hash_id)

    def next_after(self, after_ms: int) -> int | None:
        """The first due strictly after ``after_ms``, or None when the expression names no
        later time (a past year)."""
        return next(self._walk(after_ms, forward=True), None)

    def next_runs(self, after_ms: int, count: int) -> list[int]:
        """Up to ``count`` dues strictly after ``after_ms``, ascending."""
        runs: list[int] = []
        if count <= 0:
            return runs
        for due in self._walk(after_ms, forward=True):
            runs.append(due)
            if len(runs) == count:
                break
        return runs

    def dues_between(self, after_ms: int, until_ms: int, limit: int) -> tuple[list[int], bool]:
        """The newest ``limit`` dues ``d`` with ``after_ms < d <= until_ms``, ascending, and
        whether older ones in that window were left out."""
        newest_first: list[int] = []
        if until_ms <= after_ms:
            return [], False
        # Walking back from one millisecond past ``until_ms`` includes a due at ``until_ms``.
        for due in self._walk(until_ms + 1, forward=False):
            if due <= after_ms:
                return newest_first[::-1], False
            if len(newest_first) == limit:
                return newest_first[::-1], True
            newest_first.append(due)
        return newest_first[::-1], False

    def _walk(self, start_ms: int, *, forward: bool) -> Iterator[int]:
        zone = _zone(self.timezone)
        start = datetime.fromtimestamp(start_ms / 1000, tz=UTC).astimezone(zone)
        walker = _walker(self.expression, start, self.hash_id)
        while True:
            try:
                moment = walker.get_next(datetime) if forward else walker.get_prev(datetime)
            except CroniterBadDateError:
                return
            if _second_occurrence(moment, zone):
                continue
            yield round(moment.timestamp() * 1000)


def _walker(expression: str, start: datetime, hash_id: str) -> croniter:
    # Only an expression with H fields gets the hash id: croniter reads a nickname given one
    # as hashed too (@hourly would fire at a minute hashed from the id, not at :00).
    hashed = any(_hashed_field(field) for field in expression.split(" "))
    return croniter(expression, start, hash_id=hash_id if hashed else None)


def validate_timezone(timezone: object) -> str:
    """``timezone`` unchanged when it names an IANA zone, else UnknownTimeZoneError."""
    if not isinstance(timezone, str) or not timezone:
        raise UnknownTimeZoneError(
            "timezone",
            f"must be an IANA time zone name such as 'UTC' or 'Europe/Berlin', got {timezone!r}",
        )
    if timezone in _MACHINE_ZONES:
        raise UnknownTimeZoneError(
            "timezone",
            f"{timezone!r} means this machine's own zone, which replicas may not share; name "
            "the zone itself, e.g. 'Europe/Berlin'",
        )
    try:
        _zone(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        suggestion = _suggest(timezone)
        raise UnknownTimeZoneError(
            "timezone",
            f"{timezone!r} is not a time zone this machine knows"
            + (f" (did you mean {suggestion!r}?)" if suggestion else "")
            + "; use an IANA name such as 'UTC', 'Europe/Berlin' or 'America/New_York'",
        ) from None
    return timezone


def _expression(expression: object) -> str:
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidCronExpressionError(
            "cron", f"must be a cron expression such as '0 3 * * *', got {expression!r}"
        )
    text = " ".join(expression.split())
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise InvalidCronExpressionError(
            "cron", f"is {len(text)} characters long; at most {MAX_EXPRESSION_LENGTH} are allowed"
        )
    if any(_random_field(field) for field in text.split(" ")):
        raise InvalidCronExpressionError(
            "cron",
            f"{text!r} has a random field (R): every replica would pick another time; use H "
            "(a value hashed from the schedule id, the same everywhere) or a fixed value",
        )
    return text


def _random_field(field: str) -> bool:
    return _special_field(field, "r")


def _hashed_field(field: str) -> bool:
    return _special_field(field, "h")


def _special_field(field: str, letter: str) -> bool:
    # croniter's random and hashed forms: R, R(a-b), R/n and H, H(a-b), H/n.
    lowered = field.lower()
    return lowered == letter or lowered.startswith((f"{letter}(", f"{letter}/"))


def _second_occurrence(moment: datetime, zone: tzinfo) -> bool:
    """Whether ``moment`` is the later instant of a wall-clock time that occurs twice."""
    wall = moment.replace(tzinfo=zone)
    first, second = wall.replace(fold=0), wall.replace(fold=1)
    # croniter never returns a time inside a spring-forward gap, so two offsets for one wall
    # time mean it occurs twice; fold=1 is its later occurrence (PEP 495).
    if first.utcoffset() == second.utcoffset():
        return False
    return moment.astimezone(UTC) == second.astimezone(UTC)


@lru_cache(maxsize=256)
def _zone(name: str) -> tzinfo:
    return zoneinfo.ZoneInfo(name)


@lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - _MACHINE_ZONES


def _suggest(name: str) -> str | None:
    lowered = name.lower()
    matches = sorted(zone for zone in _known_zones() if zone.lower() == lowered)
    return matches[0] if matches else None
