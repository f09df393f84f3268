"""Which executions a listing or a bulk action is about: flow, status, when they were
created, and what their input holds (C1).

One value, ``ExecutionQuery``, read the same way by every store (``matches``), by the list
use case and by bulk actions, so "the executions this search shows" and "the executions a
bulk cancel acts on" are the same set. An input condition is written ``path = value`` as an
operator types it: ``customer.id = 42`` holds for an input ``{"customer": {"id": 42}}``, and
for ``{"customer": {"id": "42"}}`` too (the value is compared as JSON when it reads as JSON,
and as the text typed against a string field).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.domain.errors import InvalidExecutionQueryError
from plaita.domain.execution import ExecutionState, ExecutionStatus

JSON = Any
#: An input condition's path has at most this many keys, its text at most this many characters.
MAX_PATH_KEYS = 16
MAX_CONDITION_CHARS = 1_000
#: The query parameter an input condition arrives in (named by its errors).
INPUT_PARAMETER = "input"
_MISSING = object()


@attrs.frozen
class InputCondition:
    """``path`` (keys from the input's top level) holds ``value``; ``text`` is how it was typed."""

    path: tuple[str, ...]
    value: JSON
    text: str

    @classmethod
    def parse(cls, condition: str, *, parameter: str = INPUT_PARAMETER) -> InputCondition:
        """``customer.id = 42``: the first ``=`` splits the path from the value."""
        if not isinstance(condition, str) or len(condition) > MAX_CONDITION_CHARS:
            raise InvalidExecutionQueryError(
                parameter, f"give a condition of at most {MAX_CONDITION_CHARS} characters"
            )
        path_text, equals, value_text = condition.partition("=")
        keys = tuple(key.strip() for key in path_text.strip().split("."))
        if not equals or not all(keys):
            raise InvalidExecutionQueryError(
                parameter,
                f"{condition!r} is not a condition; write a field of the input, '=' and a "
                'value, for example customer.id = 42 or status = "open"',
            )
        if len(keys) > MAX_PATH_KEYS:
            raise InvalidExecutionQueryError(
                parameter, f"a field path has at most {MAX_PATH_KEYS} keys, got {len(keys)}"
            )
        value_text = value_text.strip()
        try:
            value = json.loads(value_text)
        except ValueError:
            value = value_text
        return cls(keys, value, value_text)

    def holds(self, document: Mapping[str, JSON]) -> bool:
        found: JSON = document
        for key in self.path:
            if not isinstance(found, Mapping):
                return False
            found = found.get(key, _MISSING)
            if found is _MISSING:
                return False
        if _same_json(found, self.value):
            return True
        # What was typed, against a string field: 42 finds "42", open finds "open".
        return isinstance(found, str) and found == self.text

    def describe(self) -> str:
        return f"{'.'.join(self.path)} = {self.text}"


def _same_json(left: JSON, right: JSON) -> bool:
    """JSON equality: ``true`` is not ``1`` (Python's ``True == 1`` would say it is)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left is right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return bool(left == right)
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_same_json(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(_same_json, left, right))
    return bool(left == right)


@attrs.frozen
class ExecutionQuery:
    """Executions of ``flow_id`` in ``status``, created in ``[created_from_ms,
    created_to_ms]`` (both inclusive, ms since the epoch), whose input meets every condition.
    A field left None (no conditions) does not filter."""

    flow_id: str | None = None
    status: ExecutionStatus | None = None
    created_from_ms: int | None = None
    created_to_ms: int | None = None
    input_conditions: tuple[InputCondition, ...] = ()

    def __attrs_post_init__(self) -> None:
        for name in ("created_from_ms", "created_to_ms"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise InvalidExecutionQueryError(
                    name, f"give a time in milliseconds since the epoch (>= 0), got {value!r}"
                )
        if (
            self.created_from_ms is not None
            and self.created_to_ms is not None
            and self.created_to_ms < self.created_from_ms
        ):
            raise InvalidExecutionQueryError(
                "created_to_ms",
                f"{self.created_to_ms} is before created_from_ms {self.created_from_ms}: "
                "no execution can match; swap them",
            )

    @classmethod
    def build(
        cls,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        created_from_ms: int | None = None,
        created_to_ms: int | None = None,
        input_condition: str | None = None,
    ) -> ExecutionQuery:
        """The query from what a caller typed: the input condition as text (or None)."""
        conditions = () if input_condition is None else (InputCondition.parse(input_condition),)
        return cls(flow_id, status, created_from_ms, created_to_ms, conditions)

    def narrowed(
        self, *, flow_id: str | None = None, status: ExecutionStatus | None = None
    ) -> ExecutionQuery:
        """This query, also limited to ``flow_id`` and ``status`` where given; a second,
        different value of one of them is a contradiction, refused by name."""
        for name, mine, given in (
            ("flow_id", self.flow_id, flow_id),
            ("status", self.status, status),
        ):
            if mine is not None and given is not None and mine != given:
                raise InvalidExecutionQueryError(
                    name, f"given twice, as {mine!r} and {given!r}: give it once"
                )
        return attrs.evolve(
            self,
            flow_id=self.flow_id if flow_id is None else flow_id,
            status=self.status if status is None else status,
        )

    @property
    def needs_state(self) -> bool:
        """Whether it filters on more than an index of flow and status can answer."""
        return bool(
            self.created_from_ms is not None
            or self.created_to_ms is not None
            or self.input_conditions
        )

    def matches(self, state: ExecutionState) -> bool:
        return (
            (self.flow_id is None or state.flow_id == self.flow_id)
            and (self.status is None or state.status is self.status)
            and (self.created_from_ms is None or state.created_at_ms >= self.created_from_ms)
            and (self.created_to_ms is None or state.created_at_ms <= self.created_to_ms)
            and all(condition.holds(state.input) for condition in self.input_conditions)
        )

    def describe(self) -> str:
        """The query as an operator reads it in a log line or a confirmation."""
        parts = [
            f"flow_id={self.flow_id}" if self.flow_id is not None else "",
            f"status={self.status.value}" if self.status is not None else "",
            f"created_from_ms={self.created_from_ms}" if self.created_from_ms is not None else "",
            f"created_to_ms={self.created_to_ms}" if self.created_to_ms is not None else "",
            *(f"input: {condition.describe()}" for condition in self.input_conditions),
        ]
        return ", ".join(part for part in parts if part) or "every execution"


EVERY_EXECUTION = ExecutionQuery()
