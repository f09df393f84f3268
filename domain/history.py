"""The history of an execution (C7): an append-only, bounded log of what happened to it.

Every write that changes an execution carries the entries of what led to it — a step's
checkpoint carries ``node_started`` and ``node_finished`` (or ``node_failed`` and
``retry_scheduled``), a suspend its ``suspended``, an operator's borrowed write its
``operator_action`` — and the store appends them in the same atomic write. The store numbers
them (``seq``, from 1, never reused) and keeps the last ``HISTORY_CAP`` of each execution: an
append past the cap drops the oldest, and ``dropped`` counts what was dropped.

The builders here are pure: they take facts and return entries whose text fields are bounded
(``MAX_MESSAGE_CHARS``, ``MAX_TRACEBACK_CHARS``, ``MAX_NAME_CHARS``), so one entry never
grows with what a handler raised or returned. ``encode``/``decode`` are the stored form:
compact JSON without ``seq`` (a store derives it from the entry's position).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from plaita.domain.errors import InvalidOperatorRequestError
from plaita.domain.failures import FailureKind

JSON = Any

#: Entries kept per execution; appending past it drops the oldest (counted in ``dropped``).
HISTORY_CAP = 1_000
#: A message (an error's text, an operator's reason) is cut to this many characters.
MAX_MESSAGE_CHARS = 1_000
#: A traceback keeps its last this-many characters (where the raising frame is).
MAX_TRACEBACK_CHARS = 8_000
#: Names (node, worker, event type, error class, operator) are cut to this many characters.
MAX_NAME_CHARS = 200
#: A task's rendered params are kept in its ``node_started`` entry up to this many bytes.
MAX_PARAMS_BYTES = 2_000
#: The most entries one history page returns.
MAX_HISTORY_PAGE = 500
DEFAULT_HISTORY_PAGE = 100


class HistoryKind(enum.StrEnum):
    ACCEPTED = "accepted"
    STARTED = "started"
    NODE_STARTED = "node_started"
    NODE_FINISHED = "node_finished"
    NODE_FAILED = "node_failed"
    RETRY_SCHEDULED = "retry_scheduled"
    SUSPENDED = "suspended"
    EVENT_RECEIVED = "event_received"
    TIMER_FIRED = "timer_fired"
    LEASE_LOST = "lease_lost"
    ATTEMPT_CRASHED = "attempt_crashed"
    FENCED = "fenced"
    OPERATOR_ACTION = "operator_action"
    #: W25: a worker passed a carrier on towards the instance it names.
    HANDED_OVER = "handed_over"
    #: W25: a worker dropped a carrier's target (not running, or passed on too often).
    TARGET_STRIPPED = "target_stripped"
    #: W23: a node over its rate limit was not run; it runs at ``due_ms``.
    RATE_LIMITED = "rate_limited"
    ENDED = "ended"


@attrs.frozen
class HistoryEntry:
    """One thing that happened to an execution, at ``at_ms`` (ms since the epoch)."""

    kind: HistoryKind
    at_ms: int
    node_id: str | None = None
    attempt: int | None = None
    #: The worker instance (lease holder id) that wrote it, when a worker did.
    worker: str | None = None
    #: Small, bounded facts of the kind (see the builders).
    detail: Mapping[str, JSON] = attrs.field(factory=dict)
    #: Position in the execution's history, from 1; 0 until a store numbered it.
    seq: int = 0

    def encode(self) -> str:
        """The stored form: compact JSON, ``seq`` left out, absent fields omitted."""
        document: dict[str, JSON] = {"k": self.kind.value, "t": self.at_ms}
        if self.node_id is not None:
            document["n"] = self.node_id
        if self.attempt is not None:
            document["a"] = self.attempt
        if self.worker is not None:
            document["w"] = self.worker
        if self.detail:
            document["d"] = dict(self.detail)
        return json.dumps(document, separators=(",", ":"), sort_keys=True)

    @classmethod
    def decode(cls, text: str | bytes, seq: int) -> HistoryEntry:
        document = json.loads(text)
        return cls(
            kind=HistoryKind(document["k"]),
            at_ms=int(document["t"]),
            node_id=document.get("n"),
            attempt=document.get("a"),
            worker=document.get("w"),
            detail=document.get("d", {}),
            seq=seq,
        )

    def to_json(self) -> dict[str, JSON]:
        """The API's form: every field by its name."""
        return {
            "seq": self.seq,
            "at_ms": self.at_ms,
            "kind": self.kind.value,
            "node_id": self.node_id,
            "attempt": self.attempt,
            "worker": self.worker,
            "detail": dict(self.detail),
        }


@attrs.frozen
class HistoryPage:
    """Entries after a cursor, oldest first."""

    entries: tuple[HistoryEntry, ...]
    #: Pass back as ``after`` for the next page; None when this page reached the newest entry.
    next_cursor: int | None
    #: How many of the oldest entries the cap dropped.
    dropped: int


@attrs.frozen
class HistoryWindow:
    """Which stored entries a page reads: list positions ``start`` to ``stop`` (exclusive)."""

    start: int
    stop: int
    first_seq: int
    dropped: int
    total: int


def check_history_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_HISTORY_PAGE:
        raise InvalidOperatorRequestError(
            f"a history page limit is a whole number from 1 to {MAX_HISTORY_PAGE}, got {limit!r}"
        )
    return limit


def check_history_cursor(after: int | None) -> int | None:
    if after is None:
        return None
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InvalidOperatorRequestError(
            f"a history cursor is the seq of an entry (a whole number >= 0), got {after!r}; "
            "pass a page's next_cursor"
        )
    return after


def check_history_cap(cap: int) -> int:
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValueError(f"a history cap is a whole number of entries >= 1, got {cap!r}")
    return cap


def history_window(*, total: int, held: int, after: int | None, limit: int) -> HistoryWindow:
    """The stored entries a page after ``after`` reads, given how many entries were ever
    appended (``total``) and how many are kept (``held``, the newest ones)."""
    check_history_limit(limit)
    after = check_history_cursor(after)
    first_seq = total - held + 1
    start_seq = max(first_seq, (after or 0) + 1)
    count = max(0, min(limit, total - start_seq + 1))
    start = start_seq - first_seq
    return HistoryWindow(start, start + count, first_seq, total - held, total)


def page_of(texts: Sequence[str | bytes], window: HistoryWindow) -> HistoryPage:
    """The page of the stored ``texts`` a store read for ``window``."""
    entries = tuple(
        HistoryEntry.decode(text, window.first_seq + window.start + index)
        for index, text in enumerate(texts)
    )
    last = entries[-1].seq if entries else None
    more = last is not None and last < window.total
    return HistoryPage(entries, last if more else None, window.dropped)


def kept_after_append(held: int, appended: int, cap: int) -> int:
    """How many of the oldest entries an append of ``appended`` to ``held`` drops."""
    return max(0, held + appended - cap)


# --- bounds ---------------------------------------------------------------------------------


#: Characters a cut keeps free for its marker (which says how many characters were cut).
_MARKER_ROOM = 40


def bounded(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, saying how much was cut (head kept)."""
    if len(text) <= limit:
        return text
    kept = max(0, limit - _MARKER_ROOM)
    return f"{text[:kept]} [... {len(text) - kept} more characters]"


def bounded_tail(text: str, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters keeping its end (a traceback's raising
    frame), saying how much was cut."""
    if len(text) <= limit:
        return text
    kept = max(0, limit - _MARKER_ROOM)
    return f"[... {len(text) - kept} earlier characters]\n{text[len(text) - kept :]}"


def _name(value: str | None) -> str | None:
    return None if value is None else bounded(value, MAX_NAME_CHARS)


def json_size(value: JSON) -> int:
    """Bytes of ``value`` as compact JSON (what a checkpoint stores of it)."""
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


# --- builders -------------------------------------------------------------------------------


def accepted(
    at_ms: int,
    *,
    input_size: int,
    via: str,
    by: str,
    dedup_key: str | None,
    target: str | None = None,
    priority: str | None = None,
) -> HistoryEntry:
    """A start was accepted (the ``pending`` state, ADR 0022): through which entry point
    (``via``: api, cli, sdk …), by whom (a token's name, an OS user), the input's size, the
    worker instance it asks for (``target``, W25) and its priority when not normal."""
    facts: dict[str, JSON] = {
        "input_bytes": input_size,
        "via": bounded(via, MAX_NAME_CHARS),
        "by": bounded(by, MAX_NAME_CHARS),
    }
    if dedup_key is not None:
        facts["dedup_key"] = bounded(dedup_key, MAX_NAME_CHARS)
    if target is not None:
        facts["target"] = bounded(target, MAX_NAME_CHARS)
    if priority is not None:
        facts["priority"] = bounded(priority, MAX_NAME_CHARS)
    return HistoryEntry(HistoryKind.ACCEPTED, at_ms, detail=facts)


def started(at_ms: int, *, input_size: int, via: str, worker: str | None) -> HistoryEntry:
    """A worker took the execution up: the input's size and the carrier that started it."""
    return HistoryEntry(
        HistoryKind.STARTED,
        at_ms,
        worker=_name(worker),
        detail={"input_bytes": input_size, "via": bounded(via, MAX_NAME_CHARS)},
    )


def node_started(
    at_ms: int,
    *,
    node_id: str,
    attempt: int,
    worker: str | None,
    params: JSON = None,
    has_params: bool = False,
) -> HistoryEntry:
    """A node began. A task node's params as its handler got them (``has_params``), when
    they are at most ``MAX_PARAMS_BYTES`` as JSON; larger ones only by their size."""
    detail: dict[str, JSON] = {}
    if has_params:
        size = json_size(params)
        detail = {"params": params} if size <= MAX_PARAMS_BYTES else {"params_bytes": size}
    return HistoryEntry(
        HistoryKind.NODE_STARTED, at_ms, _name(node_id), attempt, _name(worker), detail
    )


def node_finished(
    at_ms: int,
    *,
    node_id: str,
    attempt: int,
    worker: str | None,
    result_size: int,
    duration_ms: int,
) -> HistoryEntry:
    return HistoryEntry(
        HistoryKind.NODE_FINISHED,
        at_ms,
        _name(node_id),
        attempt,
        _name(worker),
        {"result_bytes": result_size, "duration_ms": max(0, duration_ms)},
    )


def node_failed(
    at_ms: int,
    *,
    node_id: str | None,
    attempt: int,
    worker: str | None,
    error_class: str,
    message: str,
    traceback: str,
    failure: FailureKind,
    duration_ms: int,
) -> HistoryEntry:
    """A node raised: its class, message and traceback (bounded), and the failure's kind:
    transient (retried while the budget lasts), deterministic (the error handler, or the
    end) or terminal (a timeout, a cancel)."""
    return HistoryEntry(
        HistoryKind.NODE_FAILED,
        at_ms,
        _name(node_id),
        attempt,
        _name(worker),
        {
            "error_class": bounded(error_class, MAX_NAME_CHARS),
            "message": bounded(message),
            "traceback": bounded_tail(traceback),
            "failure": failure.value,
            "duration_ms": max(0, duration_ms),
        },
    )


def retry_scheduled(
    at_ms: int, *, node_id: str | None, attempt: int, worker: str | None, due_ms: int
) -> HistoryEntry:
    """The failed node runs again at ``due_ms`` as attempt ``attempt + 1``."""
    return HistoryEntry(
        HistoryKind.RETRY_SCHEDULED,
        at_ms,
        _name(node_id),
        attempt,
        _name(worker),
        {"due_ms": due_ms, "next_attempt": attempt + 1},
    )


def rate_limited(
    at_ms: int, *, node_id: str, worker: str | None, key: str, due_ms: int
) -> HistoryEntry:
    """The node was over its rate limit (bucket ``key``): not run, not an attempt; it is
    tried again at ``due_ms``."""
    return HistoryEntry(
        HistoryKind.RATE_LIMITED,
        at_ms,
        _name(node_id),
        None,
        _name(worker),
        {"key": bounded(key, MAX_NAME_CHARS), "due_ms": due_ms},
    )


def suspended(
    at_ms: int,
    *,
    node_id: str,
    worker: str | None,
    event_type: str | None,
    timer_due_ms: int | None,
) -> HistoryEntry:
    """The execution waits: for an event of ``event_type``, a timer, or both."""
    detail: dict[str, JSON] = {}
    if event_type is not None:
        detail["event_type"] = bounded(event_type, MAX_NAME_CHARS)
    if timer_due_ms is not None:
        detail["timer_due_ms"] = timer_due_ms
    return HistoryEntry(HistoryKind.SUSPENDED, at_ms, _name(node_id), None, _name(worker), detail)


def event_received(
    at_ms: int,
    *,
    node_id: str | None,
    worker: str | None,
    event_id: str | None,
    event_type: str | None,
    via: str | None = None,
) -> HistoryEntry:
    """An event reached the wait: ``via`` is how (``filter``: the event filter routed it
    when it was published; ``reconciler``: a re-scan found it after its notification was
    lost; ``inbox``: it was there before the wait, which took it at once)."""
    detail: dict[str, JSON] = {}
    for name, value in (("event_id", event_id), ("event_type", event_type), ("via", via)):
        if value is not None:
            detail[name] = bounded(value, MAX_NAME_CHARS)
    return HistoryEntry(
        HistoryKind.EVENT_RECEIVED, at_ms, _name(node_id), None, _name(worker), detail
    )


def timer_fired(at_ms: int, *, node_id: str | None, worker: str | None) -> HistoryEntry:
    return HistoryEntry(HistoryKind.TIMER_FIRED, at_ms, _name(node_id), None, _name(worker))


def lease_lost(
    at_ms: int, *, fenced: bool, node_id: str | None, worker: str | None, generation: int
) -> HistoryEntry:
    """A worker lost its lease (``fenced``: its write was refused because another holder's
    generation is current); what it had not checkpointed is run again by the next holder."""
    return HistoryEntry(
        HistoryKind.FENCED if fenced else HistoryKind.LEASE_LOST,
        at_ms,
        _name(node_id),
        None,
        _name(worker),
        {"generation": generation},
    )


def attempt_crashed(
    at_ms: int, *, node_id: str | None, crashes: int, generation: int, worker: str | None
) -> HistoryEntry:
    """An earlier dispatch (under lease ``generation``) began and never returned: its worker
    died or was cut off mid-step. Noticed by ``worker``'s dispatch, the next one; ``crashes``
    counts such attempts at ``node_id`` (W2: at ``--max-deliveries`` the carrier is given up)."""
    return HistoryEntry(
        HistoryKind.ATTEMPT_CRASHED,
        at_ms,
        _name(node_id),
        None,
        _name(worker),
        {"crashes": crashes, "generation": generation},
    )


def handed_over(
    at_ms: int, *, worker: str | None, target: str, handovers: int, reason: str
) -> HistoryEntry:
    """``worker`` took a carrier that names ``target`` and passed it on (W25); ``handovers``
    counts the passes so far, this one included."""
    return _affinity(HistoryKind.HANDED_OVER, at_ms, worker, target, handovers, reason)


def target_stripped(
    at_ms: int, *, worker: str | None, target: str, handovers: int, reason: str
) -> HistoryEntry:
    """``worker`` dropped the carrier's ``target`` (W25; ``reason``: it is not running, or
    the carrier was passed on ``handovers`` times): any worker runs it now."""
    return _affinity(HistoryKind.TARGET_STRIPPED, at_ms, worker, target, handovers, reason)


def _affinity(
    kind: HistoryKind,
    at_ms: int,
    worker: str | None,
    target: str,
    handovers: int,
    reason: str,
) -> HistoryEntry:
    facts: dict[str, JSON] = {
        "target": bounded(target, MAX_NAME_CHARS),
        "handovers": handovers,
        "reason": bounded(reason, MAX_NAME_CHARS),
    }
    return HistoryEntry(kind, at_ms, worker=_name(worker), detail=facts)


def operator_action(
    at_ms: int, *, who: str, action: str, detail: Mapping[str, JSON] | None = None
) -> HistoryEntry:
    """An operator (``who``: the caller's identity) asked for ``action``."""
    facts: dict[str, JSON] = {
        "who": bounded(who, MAX_NAME_CHARS),
        "action": bounded(action, MAX_NAME_CHARS),
    }
    for name, value in (detail or {}).items():
        facts[name] = bounded(value) if isinstance(value, str) else value
    return HistoryEntry(HistoryKind.OPERATOR_ACTION, at_ms, detail=facts)


def ended(
    at_ms: int,
    *,
    status: str,
    worker: str | None,
    node_id: str | None = None,
    error_code: int | None = None,
    message: str | None = None,
) -> HistoryEntry:
    detail: dict[str, JSON] = {"status": status}
    if error_code is not None:
        detail["error_code"] = error_code
    if message is not None:
        detail["message"] = bounded(message)
    return HistoryEntry(HistoryKind.ENDED, at_ms, _name(node_id), None, _name(worker), detail)


@attrs.frozen
class HistorySummary:
    """What an execution's history adds up to, for ``executions show`` (and its ``--json``):
    how many entries, how many the cap dropped, node attempts, failures, retries scheduled,
    events received, operator actions, the newest entry's kind and time, and the priority
    its start asked for when not normal (its ``accepted`` entry's; None: normal)."""

    entries: int = 0
    dropped: int = 0
    attempts: int = 0
    failures: int = 0
    retries: int = 0
    events: int = 0
    operator_actions: int = 0
    last_kind: str | None = None
    last_at_ms: int | None = None
    priority: str | None = None

    def to_json(self) -> dict[str, JSON]:
        return attrs.asdict(self)


_COUNTED = {
    HistoryKind.NODE_STARTED: "attempts",
    HistoryKind.NODE_FAILED: "failures",
    HistoryKind.RETRY_SCHEDULED: "retries",
    HistoryKind.EVENT_RECEIVED: "events",
    HistoryKind.OPERATOR_ACTION: "operator_actions",
}


def summarize(entries: Sequence[HistoryEntry], *, dropped: int) -> HistorySummary:
    """The summary of the kept ``entries`` (oldest first); ``dropped`` older ones are not
    counted, only reported."""
    counts = dict.fromkeys(_COUNTED.values(), 0)
    priority: str | None = None
    for entry in entries:
        field = _COUNTED.get(entry.kind)
        if field is not None:
            counts[field] += 1
        if entry.kind is HistoryKind.ACCEPTED:
            asked = entry.detail.get("priority")
            priority = asked if isinstance(asked, str) else priority
    last = entries[-1] if entries else None
    return HistorySummary(
        entries=len(entries) + dropped,
        dropped=dropped,
        last_kind=None if last is None else last.kind.value,
        last_at_ms=None if last is None else last.at_ms,
        priority=priority,
        **counts,
    )
