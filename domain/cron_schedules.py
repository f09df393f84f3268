"""A cron schedule: what it starts, when, and what it did so far (W22).

A ``Schedule`` is the definition an operator creates — the flow (and optionally its version)
it starts with which input, its cron expression in a time zone, and two policies:

- **overlap** — what a due does while the execution the schedule started last is still
  running (pending, running or suspended): ``allow`` starts anyway; ``skip`` skips the due;
  ``buffer_one`` keeps at most one due waiting and starts it as soon as the running one ended
  (further dues meanwhile are skipped).
- **catch-up** — what happens to dues that were missed, because no scheduler ran or the
  schedule could not be reached: ``none`` skips them; ``latest`` starts only the most recent
  of them (when no due on time starts anyway); ``all`` starts each of them, at most
  ``MAX_CATCH_UP`` (the newest; older ones are skipped).

A ``ScheduleState`` is what the schedulers recorded: whether it is paused, its **cursor** (every
due at or before it is handled — started, skipped or buffered — and never looked at again),
the newest due it started and that execution, the buffered due, and counts. ``record_due``
is the one rule for moving it; the stores apply it atomically.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from plaita.domain.cron import DEFAULT_TIMEZONE, Cron
from plaita.domain.errors import (
    InvalidCronExpressionError,
    InvalidScheduleError,
    InvalidScheduleInputError,
    InvalidSchedulePolicyError,
    ScheduleExistsError,
)
from plaita.domain.ids import validate_execution_id, validate_flow_id, validate_schedule_id
from plaita.domain.limits import INPUT_LIMIT, check_json_text, check_json_value
from plaita.domain.priorities import Priority, parse_priority
from plaita.domain.tenancy import validate_tenant_id

JSON = Any
P = TypeVar("P", bound=enum.StrEnum)

#: The most missed dues ``catch-up all`` starts after a downtime: the newest ones.
MAX_CATCH_UP = 100
#: The longest flow version a schedule may name (a version travels in every carrier).
MAX_VERSION_LENGTH = 256
#: The longest error text a schedule keeps from its last failed start.
MAX_ERROR_LENGTH = 500


class OverlapPolicy(enum.StrEnum):
    ALLOW = "allow"
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"


class CatchUpPolicy(enum.StrEnum):
    NONE = "none"
    ALL = "all"
    LATEST = "latest"


DEFAULT_OVERLAP = OverlapPolicy.ALLOW
DEFAULT_CATCH_UP = CatchUpPolicy.LATEST


@attrs.frozen
class ScheduleRef:
    """Which schedule: its tenant and id (ids are unique per tenant)."""

    tenant_id: str
    schedule_id: str

    def __str__(self) -> str:
        return (
            self.schedule_id
            if self.tenant_id == "default"
            else (f"{self.schedule_id} (tenant {self.tenant_id})")
        )


@attrs.frozen
class Schedule:
    schedule_id: str
    tenant_id: str
    flow_id: str
    cron: Cron
    created_at_ms: int
    flow_version: str | None = None
    input: Mapping[str, JSON] = attrs.field(factory=dict)
    overlap: OverlapPolicy = DEFAULT_OVERLAP
    catch_up: CatchUpPolicy = DEFAULT_CATCH_UP
    #: The priority of every start it makes (``plaita.domain.priorities``).
    priority: Priority = Priority.NORMAL

    @property
    def ref(self) -> ScheduleRef:
        return ScheduleRef(self.tenant_id, self.schedule_id)

    @classmethod
    def create(
        cls,
        *,
        schedule_id: str,
        tenant_id: str,
        flow_id: str,
        cron: object,
        now_ms: int,
        timezone: object = DEFAULT_TIMEZONE,
        flow_version: object = None,
        input: object = None,
        overlap: object = DEFAULT_OVERLAP,
        catch_up: object = DEFAULT_CATCH_UP,
        priority: object = Priority.NORMAL,
    ) -> Schedule:
        """A new schedule from what an operator gave, every value checked (named errors;
        a bad ``priority`` is ``InvalidPriorityError``)."""
        validate_schedule_id(schedule_id)
        validate_tenant_id(tenant_id)
        validate_flow_id(flow_id)
        parsed = Cron.parse(cron, timezone, hash_id=schedule_id)
        if parsed.next_after(now_ms) is None:
            raise InvalidCronExpressionError(
                "cron",
                f"{parsed.expression!r} names no time after now in {parsed.timezone}, so the "
                "schedule would never start anything; check the day, month and year fields",
            )
        return cls(
            schedule_id=schedule_id,
            tenant_id=tenant_id,
            flow_id=flow_id,
            cron=parsed,
            created_at_ms=now_ms,
            flow_version=_version(flow_version),
            input=schedule_input(input),
            overlap=_policy(OverlapPolicy, "overlap", overlap),
            catch_up=_policy(CatchUpPolicy, "catch_up", catch_up),
            priority=parse_priority(priority),
        )

    def to_json(self) -> dict[str, JSON]:
        """Its stored shape; ``priority`` only when not normal (a normal schedule is stored
        as it was before priorities)."""
        document = {
            "schedule_id": self.schedule_id,
            "tenant_id": self.tenant_id,
            "flow_id": self.flow_id,
            "flow_version": self.flow_version,
            "cron": self.cron.expression,
            "timezone": self.cron.timezone,
            "input": dict(self.input),
            "overlap": self.overlap.value,
            "catch_up": self.catch_up.value,
            "created_at_ms": self.created_at_ms,
        }
        if self.priority is not Priority.NORMAL:
            document["priority"] = self.priority.value
        return document

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> Schedule:
        """A stored schedule (``to_json``'s shape) read back."""
        schedule_id = str(raw["schedule_id"])
        return cls(
            schedule_id=schedule_id,
            tenant_id=str(raw["tenant_id"]),
            flow_id=str(raw["flow_id"]),
            cron=Cron.parse(raw["cron"], raw["timezone"], hash_id=schedule_id),
            created_at_ms=int(raw["created_at_ms"]),
            flow_version=raw.get("flow_version"),
            input=dict(raw.get("input") or {}),
            overlap=OverlapPolicy(raw.get("overlap", DEFAULT_OVERLAP)),
            catch_up=CatchUpPolicy(raw.get("catch_up", DEFAULT_CATCH_UP)),
            priority=parse_priority(raw.get("priority", Priority.NORMAL.value)),
        )


class DueOutcome(enum.StrEnum):
    """What became of one due, as a scheduler records it."""

    #: A start was enqueued (or its dedup key found the execution started before).
    FIRED = "fired"
    SKIPPED = "skipped"
    #: Waits behind the running execution (``buffer_one``).
    BUFFERED = "buffered"
    #: The start was refused for good (the flow is gone, say); the due is not tried again.
    FAILED = "failed"


@attrs.frozen
class ScheduleState:
    cursor_ms: int
    paused: bool = False
    last_due_ms: int | None = None
    last_execution_id: str | None = None
    buffered_due_ms: int | None = None
    fired: int = 0
    skipped: int = 0
    failed: int = 0
    last_error: str | None = None

    @classmethod
    def new(cls, schedule: Schedule, *, paused: bool = False) -> ScheduleState:
        """Dues after the schedule's creation are its first."""
        return cls(cursor_ms=schedule.created_at_ms, paused=paused)

    def handles(self, due_ms: int) -> bool:
        """Whether ``due_ms`` still waits for a scheduler: after the cursor, or buffered."""
        return due_ms > self.cursor_ms or due_ms == self.buffered_due_ms

    def to_json(self) -> dict[str, JSON]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> ScheduleState:
        return cls(
            **{field.name: raw[field.name] for field in attrs.fields(cls) if field.name in raw}
        )


def record_due(
    state: ScheduleState,
    due_ms: int,
    outcome: DueOutcome,
    *,
    execution_id: str | None = None,
    error: str | None = None,
) -> ScheduleState | None:
    """The state after ``due_ms`` ended as ``outcome``, or None when the due was handled
    already (another replica recorded it first: nothing changes, nothing is counted twice).

    The buffered due is the one due at or before the cursor that may still fire (or fail).
    Any other due moves the cursor to itself — dues are recorded in ascending order, so
    every earlier due not recorded is passed over for good.
    """
    if outcome is DueOutcome.FIRED and execution_id is not None:
        validate_execution_id(execution_id)
    if due_ms == state.buffered_due_ms and outcome in (DueOutcome.FIRED, DueOutcome.FAILED):
        state = attrs.evolve(state, buffered_due_ms=None)
    elif due_ms > state.cursor_ms:
        state = attrs.evolve(state, cursor_ms=due_ms)
    else:
        return None
    if outcome is DueOutcome.FIRED:
        newest = state.last_due_ms is None or due_ms >= state.last_due_ms
        return attrs.evolve(
            state,
            fired=state.fired + 1,
            last_due_ms=due_ms if newest else state.last_due_ms,
            last_execution_id=execution_id if newest else state.last_execution_id,
        )
    if outcome is DueOutcome.SKIPPED:
        return attrs.evolve(state, skipped=state.skipped + 1)
    if outcome is DueOutcome.BUFFERED:
        return attrs.evolve(state, buffered_due_ms=due_ms)
    return attrs.evolve(state, failed=state.failed + 1, last_error=failure_text(error))


def failure_text(error: str | None) -> str:
    """What a schedule keeps of a failed start's error: its first ``MAX_ERROR_LENGTH``."""
    return (error or "refused")[:MAX_ERROR_LENGTH]


def schedule_exists(ref: ScheduleRef) -> ScheduleExistsError:
    """The error every store raises when a created schedule's id is taken."""
    return ScheduleExistsError(
        f"schedule {ref.schedule_id!r} exists already for tenant {ref.tenant_id!r}; delete it "
        "first (plaita schedules delete) or choose another id"
    )


def resumed(state: ScheduleState, now_ms: int) -> ScheduleState:
    """Unpaused: dues that fell while it was paused are passed over, not caught up."""
    return attrs.evolve(state, paused=False, cursor_ms=max(state.cursor_ms, now_ms))


def schedule_input(value: object) -> dict[str, JSON]:
    """The input of the executions a schedule starts: a JSON object within the input limit."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidScheduleInputError(
            "input", f'must be a JSON object such as {{"day": "monday"}}, got {value!r}'
        )
    check_json_value(dict(value), INPUT_LIMIT, field="input")
    return dict(value)


def schedule_input_from_text(text: str | None) -> dict[str, JSON]:
    """``--input``'s JSON text as a schedule's input; InvalidScheduleInputError when it is not
    JSON or not an object."""
    if text is None:
        return {}
    check_json_text(text, INPUT_LIMIT, field="input")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidScheduleInputError("input", f"is not valid JSON ({exc}): {text!r}") from None
    return schedule_input(value)


def _version(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_VERSION_LENGTH:
        raise InvalidScheduleError(
            "version",
            f"must be a flow version such as '3' (1 to {MAX_VERSION_LENGTH} characters), or "
            f"left out to start the latest, got {value!r}",
        )
    return value


def _policy(kind: type[P], setting: str, value: object) -> P:
    if isinstance(value, kind):
        return value
    if isinstance(value, str) and value in {member.value for member in kind}:
        return kind(value)
    choices = " | ".join(member.value for member in kind)
    raise InvalidSchedulePolicyError(setting, f"{value!r} is not a policy; use one of {choices}")
