"""What an ``http`` node's response means (E11, E3): a success, a transient failure that is
retried, or a deterministic one that goes straight to the node's errorHandler.

A status in the node's ``expect`` is a success (default: every 2xx). Otherwise 429 (too
many requests) and every 5xx are transient — the server may answer differently later — and
every other status is deterministic: the same request gets the same answer. A connection
that could not be made or broke, or a timeout, is transient (the adapter's part).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence

import attrs

#: Statuses an HTTP response can have.
MIN_STATUS, MAX_STATUS = 100, 599
_CLASS = re.compile(r"^([1-5])xx$")


class ResponseVerdict(enum.StrEnum):
    SUCCESS = "success"
    TRANSIENT = "transient"
    DETERMINISTIC = "deterministic"


@attrs.frozen
class ExpectedStatuses:
    """The statuses a node counts as success: exact codes and whole classes (``"2xx"``)."""

    codes: frozenset[int] = frozenset()
    classes: frozenset[int] = frozenset({2})

    @classmethod
    def parse(cls, raw: Sequence[int | str] | None) -> ExpectedStatuses:
        """``expect`` as a flow writes it: a list of status codes (``200``) and classes
        (``"2xx"``); None is every 2xx. ``ValueError`` naming the entry that is neither."""
        if raw is None:
            return cls()
        if isinstance(raw, str | bytes) or not raw:
            raise ValueError(
                f"expect must be a non-empty list of status codes (200) or classes ('2xx'), "
                f"got {raw!r}"
            )
        codes: set[int] = set()
        classes: set[int] = set()
        for entry in raw:
            if isinstance(entry, int) and not isinstance(entry, bool):
                if not MIN_STATUS <= entry <= MAX_STATUS:
                    raise ValueError(
                        f"expect: {entry} is not an HTTP status ({MIN_STATUS}-{MAX_STATUS})"
                    )
                codes.add(entry)
                continue
            found = _CLASS.match(entry) if isinstance(entry, str) else None
            if found is None:
                raise ValueError(
                    f"expect: {entry!r} is neither a status code (e.g. 204) nor a class "
                    "('1xx' to '5xx')"
                )
            classes.add(int(found.group(1)))
        return cls(frozenset(codes), frozenset(classes))

    def __contains__(self, status: object) -> bool:
        return isinstance(status, int) and (status in self.codes or status // 100 in self.classes)


def judge_response(status: int, expected: ExpectedStatuses) -> ResponseVerdict:
    """Success, transient or deterministic, by the rules above."""
    if status in expected:
        return ResponseVerdict.SUCCESS
    if status == 429 or 500 <= status <= MAX_STATUS:
        return ResponseVerdict.TRANSIENT
    return ResponseVerdict.DETERMINISTIC
