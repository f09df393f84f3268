"""Child executions of ``subflow`` and ``map`` nodes: their ids and a map's progress (E13, E14).

**Ids.** A child's id is derived from its parent's id and node (and, for a map, the item's
index), never drawn at random, so a re-run of the parent's step — after a crash, a lost
lease, a duplicate carrier — asks for the same child, and the start's dedup claim on that
id makes the second ask a no-op (ADR 0028). The readable form ``<parent>.<node>[.<index>]``
is used when it obeys the id rule (``plaita.domain.ids``); a node id the rule refuses, or a
deep nesting that passes ``MAX_ID_LENGTH``, gets ``child.<sha256 of parent, node, index>``
instead — deterministic too, and as unique.

**A map's progress** is a handful of counters in the parent's checkpoint, whatever the
number of items: which items ended (and how) is kept beside it in a completion record that
tells a first completion from a repeated one, and the children's results stay with the
children until the node gathers them. The rules here decide, per completion, what to start
next and whether the node is done:

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

import attrs

from plaita.domain.failures import InvalidMapError
from plaita.domain.ids import id_problem

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


@attrs.frozen
class MapProgress:
    """Where one map node stands: ``started`` is also the index of the next item to start."""

    total: int
    concurrency: int
    on_item_error: OnItemError
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    #: ``fail`` met a failure: the node has ended in error and nothing more starts.
    aborted: bool = False

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


@attrs.frozen
class MapStep:
    progress: MapProgress
    #: The indexes of the items whose children start now (in order).
    start: range
    #: ``fail`` just met its failure: cancel the children still running.
    cancel_running: bool = False


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


def child_ended(progress: MapProgress, *, ok: bool, first_time: bool) -> MapStep:
    """One child ended (``ok`` or not); ``first_time`` is the completion record's answer.

    A repeated completion, or any completion once the node finished, changes nothing."""
    if not first_time or progress.finished:
        return MapStep(progress, range(0))
    if not ok and progress.on_item_error is OnItemError.FAIL:
        failed = attrs.evolve(progress, failed=progress.failed + 1, aborted=True)
        return MapStep(failed, range(0), cancel_running=True)
    counted = attrs.evolve(
        progress,
        succeeded=progress.succeeded + (1 if ok else 0),
        failed=progress.failed + (0 if ok else 1),
    )
    if counted.started >= counted.total:
        return MapStep(counted, range(0))
    return MapStep(
        attrs.evolve(counted, started=counted.started + 1),
        range(counted.started, counted.started + 1),
    )
