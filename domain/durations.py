"""Durations in flow definitions: milliseconds (numbers) or ISO-8601 strings (E1, E5)."""

from __future__ import annotations

import math
from datetime import timedelta
from functools import lru_cache

from pydantic import TypeAdapter, ValidationError

from plaita.domain.errors import InvalidTimeoutError

MAX_NODE_TIMEOUT_MS = 24 * 60 * 60 * 1000
MAX_WAIT_MS = 366 * 24 * 60 * 60 * 1000

_TIMEDELTA = TypeAdapter(timedelta)

Duration = int | float | str
#: More digits than any accepted duration has; longer strings are refused before int() runs.
_MAX_DIGITS = 20


def parse_duration_ms(value: Duration, *, field: str, maximum_ms: int = MAX_NODE_TIMEOUT_MS) -> int:
    """Return ``value`` in whole milliseconds, or raise ``InvalidTimeoutError`` naming ``field``."""
    if isinstance(value, bool):
        raise InvalidTimeoutError(
            f"{field}: expected milliseconds or an ISO-8601 duration, got {value!r}"
        )
    if isinstance(value, str):
        ms = _parse_text(value.strip(), field)
    elif isinstance(value, int | float):
        if not math.isfinite(value):
            raise InvalidTimeoutError(f"{field}: {value!r} is not a finite number of milliseconds")
        if value < 0:
            raise InvalidTimeoutError(
                f"{field}: {value!r} is negative; use a duration of 0 or more"
            )
        ms = int(value)
    else:
        raise InvalidTimeoutError(
            f"{field}: expected milliseconds or an ISO-8601 duration, got {type(value).__name__}"
        )
    if ms < 0:
        raise InvalidTimeoutError(f"{field}: {value!r} is negative; use a duration of 0 or more")
    if ms > maximum_ms:
        raise InvalidTimeoutError(
            f"{field}: {value!r} exceeds the maximum of {maximum_ms} ms; use a shorter duration"
        )
    return ms


@lru_cache(maxsize=1024)
def _parse_text(text: str, field: str) -> int:
    # lru_cache never stores a raised exception: an invalid string raises on every call (E5).
    if text.isascii() and text.isdigit():
        if len(text) > _MAX_DIGITS:
            raise InvalidTimeoutError(f"{field}: {text[:20]}… is far too large a duration")
        return int(text)
    if not text.upper().startswith("P"):
        raise InvalidTimeoutError(
            f"{field}: {text!r} is neither milliseconds nor an ISO-8601 duration such as 'PT30S'"
        )
    try:
        delta = _TIMEDELTA.validate_python(text)
    except ValidationError:
        raise InvalidTimeoutError(f"{field}: {text!r} is not a valid ISO-8601 duration") from None
    return int(delta.total_seconds() * 1000)
