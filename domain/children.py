"""Child executions of ``subflow`` and ``map`` nodes: their ids and a map's progress (E13, E14).

**Ids.** A child's id is derived from its parent's id and node (and, for a map, the item's
index), never drawn at random, so a re-run of the parent's step — after a crash, a lost
lease, a duplicate carrier — asks for the same child, and the start's dedup claim on that
id makes the second ask a no-op (ADR 0028). The readable form ``<parent>.<node>[.<index>]``
is used when it obeys the id rule (``plaita.domain.ids``); a node id the rule refuses, or a
deep nesting that passes ``MAX_ID_LENGTH``, gets ``child.<sha256 of parent, node, index>``
instead — deterministic too, and as unique.

**A map's progress** lives in the parent's checkpoint (its suspension) and stays small
whatever the number of items: counters, and which items ended as a *window* — every index
below ``low`` ended, and a bit per index from ``low`` up to the next item to start. Children
start in item order and at most ``concurrency`` run at once, so the window is as wide as the
spread between the oldest running child and the newest: a few bytes, not one entry per item.
The window tells a first completion from a repeated one, inside the same fenced checkpoint
that counts it — nothing to lose between two writes on a crash. The children's results stay
with the children until the node gathers them. The rules here decide, per completion, what
to start next and whether the node is done:

- at the beginning ``min(concurrency, items)`` children start, then one more per completion
  until every item started: never more than ``concurrency`` run at once;
- a repeated completion (the same child's end delivered twice) changes nothing;
- ``on_item_error: "collect"``: a failed item counts as ended and the map goes on;
  ``"fail"``: the first failure ends the node at once, and every child still running is to
  be cancelled; later completions change nothing.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from plaita.domain.failures import InvalidMapError
from plaita.domain.ids import id_problem

if TYPE_CHECKING:
    from plaita.domain.execution import ExecutionState

JSON = Any

#: The most items one map node may run over (the parent's gather reads them back in pages).
MAX_MAP_ITEMS = 100_000
#: The most children of one map running at once.
MAX_MAP_CONCURRENCY = 1_000


def child_execution_id(parent_id: str, node_id: str, index: int | None = None) -> str:
    """The id of the child ``node_id`` of ``parent_id`` starts (for item ``index`` of a map)."""
    readable = f"{parent_id}.{node_id}" + ("" if index is None else f".{index}")
    if id_problem(readable) is None:
        return readable
    digest = hashlib.sha256(
        "\x1f".join((parent_id, node_id, "" if index is None else str(index))).encode()
    ).hexdigest()
    return f"child.{digest}"  # 70 characters, within MAX_ID_LENGTH


class OnItemError(enum.StrEnum):
    FAIL = "fail"
    COLLECT = "collect"


#: How often a parent waiting for children checks on them itself, should a child's end
#: notice be lost (the worker that saved the child's end died before sending it).
CHILD_CHECK_INTERVAL_MS = 60_000


def repeats_end_notice(state: ExecutionState | None, *, reclaimed: bool) -> bool:
    """Whether a carrier meeting ``state`` sends its parent the end notice again.

    A *reclaimed* carrier of a child that has ended: the worker that saved the end may have
    died before its notice went out, and the parent's own check is a minute away. The
    parent counts an end once (its completion window), so a repeat costs it one look.
    """
    return reclaimed and state is not None and state.is_terminal and state.parent is not None


@attrs.frozen
class MapProgress:
    """Where one map node stands: ``started`` is also the index of the next item to start.

    ``low`` and ``done`` are the completion window: every index below ``low`` ended, and bit
    ``i`` of ``done`` says whether index ``low + i`` did.
    """

    total: int
    concurrency: int
    on_item_error: OnItemError
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    #: ``fail`` met a failure: the node has ended in error and nothing more starts.
    aborted: bool = False
    low: int = 0
    done: int = 0
    #: The item whose failure aborted the node (``fail``); None otherwise.
    failed_index: int | None = None

    @property
    def ended(self) -> int:
        return self.succeeded + self.failed

    @property
    def running(self) -> int:
        return 0 if self.aborted else self.started - self.ended

    @property
    def finished(self) -> bool:
        """The node's outcome is known: every item ended, or ``fail`` met a failure."""
        return self.aborted or self.ended == self.total

    def has_ended(self, index: int) -> bool:
        """Whether item ``index``'s child was counted as ended."""
        return index < self.low or bool(self.done >> (index - self.low) & 1)

    def running_indexes(self) -> list[int]:
        """The items whose children started and were not counted as ended, in order."""
        return [i for i in range(self.low, self.started) if not self.has_ended(i)]

    def to_json(self) -> dict[str, JSON]:
        return {
            "total": self.total,
            "concurrency": self.concurrency,
            "on_item_error": self.on_item_error.value,
            "started": self.started,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "aborted": self.aborted,
            "low": self.low,
            "done": format(self.done, "x"),
            "failed_index": self.failed_index,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> MapProgress:
        failed_index = raw.get("failed_index")
        return cls(
            total=int(raw["total"]),
            concurrency=int(raw["concurrency"]),
            on_item_error=OnItemError(raw["on_item_error"]),
            started=int(raw["started"]),
            succeeded=int(raw["succeeded"]),
            failed=int(raw["failed"]),
            aborted=bool(raw["aborted"]),
            low=int(raw["low"]),
            done=int(str(raw["done"]), 16),
            failed_index=None if failed_index is None else int(failed_index),
        )


def _mark_ended(progress: MapProgress, index: int) -> MapProgress:
    done = progress.done | 1 << (index - progress.low)
    low = progress.low
    while done & 1:  # slide the window past every ended index at its bottom
        done >>= 1
        low += 1
    return attrs.evolve(progress, low=low, done=done)


@attrs.frozen
class MapStep:
    progress: MapProgress
    #: The indexes of the items whose children start now (in order).
    start: range
    #: ``fail`` just met its failure: cancel the children still running.
    cancel_running: bool = False
    #: Whether the completion counted (False: a repeat, or the node had finished already).
    counted: bool = True


def begin_map(total: int, *, concurrency: int, on_item_error: OnItemError) -> MapStep:
    """A map over ``total`` items: the first children to start. ``InvalidMapError`` names a
    count or a concurrency out of bounds. An empty list is finished at once."""
    if not 0 <= total <= MAX_MAP_ITEMS:
        raise InvalidMapError(
            f"a map runs over 0 to {MAX_MAP_ITEMS} items, got {total}; split the list"
        )
    if not 1 <= concurrency <= MAX_MAP_CONCURRENCY:
        raise InvalidMapError(
            f"a map's concurrency is 1 to {MAX_MAP_CONCURRENCY}, got {concurrency}"
        )
    first = min(concurrency, total)
    progress = MapProgress(total, concurrency, on_item_error, started=first)
    return MapStep(progress, range(first))


def child_ended(progress: MapProgress, *, index: int, ok: bool) -> MapStep:
    """Item ``index``'s child ended (``ok`` or not).

    A repeated completion, one for an item not started, or any completion once the node
    finished changes nothing (``counted`` False)."""
    if progress.finished or not 0 <= index < progress.started or progress.has_ended(index):
        return MapStep(progress, range(0), counted=False)
    marked = _mark_ended(progress, index)
    if not ok and progress.on_item_error is OnItemError.FAIL:
        failed = attrs.evolve(marked, failed=marked.failed + 1, aborted=True, failed_index=index)
        return MapStep(failed, range(0), cancel_running=True)
    counted = attrs.evolve(
        marked,
        succeeded=marked.succeeded + (1 if ok else 0),
        failed=marked.failed + (0 if ok else 1),
    )
    if counted.started >= counted.total:
        return MapStep(counted, range(0))
    return MapStep(
        attrs.evolve(counted, started=counted.started + 1),
        range(counted.started, counted.started + 1),
    )
