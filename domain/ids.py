"""The id rule: which execution, event, flow and schedule ids plaita accepts.

An id travels into URL paths (``/api/v1/executions/{id}``), Redis keys and hash tags
(``{ns}:x:{<id>}:state``), dedup keys and log lines, so it is refused where it enters unless
every one of them can carry it unchanged: letters, digits and ``_ . : -``, starting with a
letter or digit, at most ``MAX_ID_LENGTH`` characters. That refuses ``/`` (a path segment),
braces (a hash tag), whitespace and control characters (logs, CLI arguments) and the path
names ``.`` and ``..``; it keeps the ``:`` that derived ids and the subscription indexes use,
and every uuid (hex or dashed) plaita generates.

Tenant ids have a stricter rule of their own (no ``:``, ``domain/tenancy.py``).
"""

from __future__ import annotations

import enum
import re

from plaita.domain.errors import (
    InvalidEventIdError,
    InvalidExecutionIdError,
    InvalidFlowIdError,
    InvalidIdError,
    InvalidScheduleIdError,
)

MAX_ID_LENGTH = 128

#: The rule as a regular expression, for schemas that publish it (the console's OpenAPI).
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
_ID = re.compile(ID_PATTERN)


class IdKind(enum.Enum):
    EXECUTION = ("execution id", InvalidExecutionIdError)
    EVENT = ("event id", InvalidEventIdError)
    FLOW = ("flow id", InvalidFlowIdError)
    SCHEDULE = ("schedule id", InvalidScheduleIdError)

    def __init__(self, label: str, error: type[InvalidIdError]) -> None:
        self.label = label
        self.error = error


def id_problem(value: object, label: str = "id") -> str | None:
    """Why ``value`` is not a valid id, or None when it is one."""
    if not isinstance(value, str) or not value:
        return f"{label} must be a non-empty string, got {value!r}"
    if len(value) > MAX_ID_LENGTH:
        return (
            f"{label} {value[:20]!r}… is {len(value)} characters long; at most "
            f"{MAX_ID_LENGTH} are allowed"
        )
    if _ID.fullmatch(value) is None:
        return (
            f"{label} {value!r} may hold only letters, digits, '_', '.', ':' and '-' and must "
            "start with a letter or digit (no '/', spaces or control characters)"
        )
    return None


def validate_id(kind: IdKind, value: object) -> str:
    """``value`` unchanged, or the kind's named error (an ``InvalidIdError``) saying why."""
    problem = id_problem(value, kind.label)
    if problem is not None:
        raise kind.error(problem)
    assert isinstance(value, str)
    return value


def validate_execution_id(value: object) -> str:
    return validate_id(IdKind.EXECUTION, value)


def validate_event_id(value: object) -> str:
    return validate_id(IdKind.EVENT, value)


def validate_flow_id(value: object) -> str:
    return validate_id(IdKind.FLOW, value)


def validate_schedule_id(value: object) -> str:
    return validate_id(IdKind.SCHEDULE, value)
