"""Execution checkpoints on Redis: incremental, fenced saves and deletes in Lua (S1, S3, S5,
W4, W13).

One execution is stored in three hashes that share its hash tag:

- ``…:state``  header field -> JSON (every field but the node results and the variables;
  ``input`` is written once, when the execution is created);
- ``…:nodes``  node id -> result JSON;
- ``…:vars``   variable name -> JSON;

and the history beside them: ``…:history``, a list of the newest entries (the cap, oldest
dropped by LTRIM), and ``…:history:n``, how many were ever appended (the seq of the newest).
A save's history entries travel in the save's own EVALSHA (no extra round trip).

A save with ``previous`` sends only what the step changed, in one EVALSHA that checks the
fence first; the index ZADD travels in the same pipeline, so a steady-state save is one round
trip (P2) and its size does not depend on how many steps came before (S3, P3). The saves of
the executions that step in one event-loop tick share that pipeline (``TickPipeline``).

Retention (S5): the script of a terminal checkpoint gives every key of the execution (the
three hashes, history, counters, heartbeat, operator flags, parked carriers) a TTL of at most
``retention_ms``; one that makes it live again removes the TTLs it set. The generation
counter never gets one (W4). The ``{ns}:executions`` index keeps an expired execution's id
until a listing meets it or the janitor walks past it (``prune_indexes``); both prune it
with a script that checks the state again, so an id written back meanwhile stays. Listing,
paging and that sweep read the index in ``execution_index``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis.asyncio as redis
from redis.exceptions import NoScriptError

from plaita.adapters.redis.execution_index import (
    ExecutionIndexReads,
    assemble_read,
    checkpoint_keys,
)
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.adapters.redis.tick_pipeline import tick_pipeline
from plaita.application.ports import NodeHeartbeat
from plaita.application.tenancy import current_tenant
from plaita.domain.checkpoint import (
    CheckpointDelta,
    checkpoint_delta,
    encode_value,
)
from plaita.domain.execution import ExecutionState
from plaita.domain.history import (
    DEFAULT_HISTORY_PAGE,
    HISTORY_CAP,
    HistoryEntry,
    HistoryPage,
    check_history_cap,
    check_history_cursor,
    check_history_limit,
    history_window,
    page_of,
)
from plaita.domain.lease import check_fence, check_fenced_write
from plaita.domain.retention import DEFAULT_RETENTION_MS, check_retention_ms
from plaita.domain.tenancy import check_same_tenant
from plaita.domain.tombstone import Tombstone

#: Three lease TTLs of the default 120 s lease: the record outlives the reaper's window.
DEFAULT_HEARTBEAT_TTL_MS = 360_000

_FENCED = "fenced"
_DELETED = "deleted"
_MISSING = "missing"
_OK = "ok"


class RedisExecutionRepository(ExecutionIndexReads):
    """ExecutionRepository and IndexJanitor on the execution hashes plus the
    ``{ns}:executions`` index (score: updated_at)."""

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        *,
        heartbeat_ttl_ms: int = DEFAULT_HEARTBEAT_TTL_MS,
        retention_ms: int = DEFAULT_RETENTION_MS,
        history_cap: int = HISTORY_CAP,
    ) -> None:
        if heartbeat_ttl_ms <= 0:
            raise ValueError(
                f"a heartbeat ttl must be a positive number of milliseconds, got {heartbeat_ttl_ms}"
            )
        super().__init__(client, keys)
        self._heartbeat_ttl_ms = heartbeat_ttl_ms
        self._retention_ms = check_retention_ms(retention_ms)
        self._history_cap = check_history_cap(history_cap)
        self._save = client.register_script(read_script("execution_save"))
        self._history_read = client.register_script(read_script("execution_history_read"))
        self._history_append = client.register_script(read_script("execution_history_append"))
        self._delete = client.register_script(read_script("execution_delete"))
        self._heartbeat = client.register_script(read_script("execution_heartbeat"))
        self._load = client.register_script(read_script("execution_load"))
        self._tick = tick_pipeline(client)

    # --- reads --------------------------------------------------------------------------

    async def load(self, execution_id: str) -> ExecutionState | None:
        # One script: one round trip, and a snapshot no concurrent save can tear.
        keys = checkpoint_keys(self._keys, execution_id)
        return assemble_read(await self._tick.script(self._load, keys=keys, args=[]))

    async def history(
        self, execution_id: str, *, after: int | None = None, limit: int = DEFAULT_HISTORY_PAGE
    ) -> HistoryPage:
        """One EVALSHA: the counts and the page's entries, read atomically."""
        check_history_limit(limit)
        keys = [
            self._keys.execution_history(execution_id),
            self._keys.execution_history_total(execution_id),
        ]
        reply = await self._history_read(keys=keys, args=[check_history_cursor(after) or 0, limit])
        total, held, *texts = reply
        window = history_window(total=int(total), held=int(held), after=after, limit=limit)
        return page_of(texts, window)

    async def tombstone(self, execution_id: str) -> Tombstone | None:
        document = await self._tick.command("GET", self._keys.tombstone(execution_id))
        return None if document is None else Tombstone.from_json(json.loads(document))

    async def last_heartbeat(self, execution_id: str) -> NodeHeartbeat | None:
        document = await self._client.get(self._keys.execution_heartbeat(execution_id))
        if document is None:
            return None
        fields = json.loads(text(document))
        return NodeHeartbeat(str(fields["node_id"]), int(fields["last_update_ms"]))

    # --- writes -------------------------------------------------------------------------

    async def save(
        self,
        state: ExecutionState,
        *,
        fence: int,
        previous: ExecutionState | None = None,
        history: Sequence[HistoryEntry] = (),
    ) -> None:
        check_same_tenant(state.tenant_id, current_tenant(), f"execution {state.execution_id!r}")
        delta = checkpoint_delta(previous, state)
        entries = [entry.encode() for entry in history]
        outcome, current = await self._fenced_save(delta, fence, state.updated_at_ms, entries)
        if outcome == _MISSING:
            # A delta with nothing stored under it (the caller's ``previous`` was never saved,
            # or the state vanished): write the whole state instead, still under the fence.
            delta = checkpoint_delta(None, state)
            outcome, current = await self._fenced_save(delta, fence, state.updated_at_ms, entries)
        check_fence(state.execution_id, fence, current)
        if outcome == _DELETED:
            # The pipeline put the deleted id back into the index; take it out again.
            await self._client.zrem(self._keys.executions(), state.execution_id)
            check_fenced_write(state.execution_id, fence, current, None)

    async def accept(self, state: ExecutionState, *, history: Sequence[HistoryEntry] = ()) -> bool:
        check_same_tenant(state.tenant_id, current_tenant(), f"execution {state.execution_id!r}")
        entries = [entry.encode() for entry in history]
        outcome, _ = await self._fenced_save(
            checkpoint_delta(None, state), None, state.updated_at_ms, entries
        )
        if outcome == _OK:
            return True
        # Stored already (its index entry left as it was), or deleted: the id the pipeline
        # put back into the index is taken out again, as after a refused save.
        if outcome == _DELETED:
            await self._client.zrem(self._keys.executions(), state.execution_id)
        return False

    async def append_history(self, execution_id: str, entries: Sequence[HistoryEntry]) -> None:
        if not entries:
            return
        keys = [
            self._keys.execution_state(execution_id),
            self._keys.tombstone(execution_id),
            self._keys.execution_history(execution_id),
            self._keys.execution_history_total(execution_id),
        ]
        await self._history_append(
            keys=keys, args=[self._history_cap, *(entry.encode() for entry in entries)]
        )

    async def _fenced_save(
        self, delta: CheckpointDelta, fence: int | None, updated_at_ms: int, history: list[str]
    ) -> tuple[str, int | None]:
        """Run the fenced save (``fence`` None: an acceptance) and the index update in one
        round trip.

        The index lives in another hash slot, so it cannot join the script. It is advisory:
        ``list`` skips ids that have no state, so an entry left by a rejected save is harmless.
        """
        execution_id = delta.execution_id
        keys = [
            self._keys.fence_generation(execution_id),
            self._keys.execution_state(execution_id),
            self._keys.execution_nodes(execution_id),
            self._keys.execution_vars(execution_id),
            self._keys.tombstone(execution_id),
            self._keys.counters(execution_id),
            self._keys.execution_heartbeat(execution_id),
            self._keys.execution_control(execution_id),
            self._keys.execution_parked(execution_id),
            self._keys.execution_history(execution_id),
            self._keys.execution_history_total(execution_id),
        ]
        args = _save_arguments(delta, fence, self._retention_ms, history, self._history_cap)
        index = self._keys.executions()

        def queue(pipe: Any) -> None:
            # execute_command, not pipe.evalsha: redis-py's cluster pipeline refuses the
            # latter, and routes the former by its keys (all of one execution's hash tag).
            pipe.execute_command("EVALSHA", self._save.sha, len(keys), *keys, *args)
            # An acceptance never moves an execution that exists already (NX).
            pipe.zadd(index, {execution_id: updated_at_ms}, nx=fence is None)
            if delta.full:
                # Where the janitor finds this tenant's index; a full save starts every run.
                pipe.sadd(self._keys.execution_indexes(), index)

        (outcome, current), _ = await self._run(queue)
        return text(outcome), _generation(current)

    async def delete(
        self,
        execution_id: str,
        *,
        fence: int | None,
        tombstone: Tombstone,
        tombstone_ttl_ms: int,
    ) -> Tombstone:
        if tombstone_ttl_ms <= 0:
            raise ValueError(
                f"a tombstone ttl must be a positive number of milliseconds, got {tombstone_ttl_ms}"
            )
        keys = [
            self._keys.fence_generation(execution_id),
            self._keys.execution_state(execution_id),
            self._keys.execution_nodes(execution_id),
            self._keys.execution_vars(execution_id),
            self._keys.lease(execution_id),
            self._keys.counters(execution_id),
            self._keys.tombstone(execution_id),
            self._keys.execution_heartbeat(execution_id),
            self._keys.execution_control(execution_id),
            self._keys.execution_parked(execution_id),
            self._keys.execution_history(execution_id),
            self._keys.execution_history_total(execution_id),
        ]
        args = [
            "" if fence is None else str(fence),
            json.dumps(tombstone.to_json(), separators=(",", ":")),
            tombstone_ttl_ms,
        ]

        def queue(pipe: Any) -> None:
            pipe.execute_command("EVALSHA", self._delete.sha, len(keys), *keys, *args)
            pipe.zrem(self._keys.executions(), execution_id)

        (outcome, current, detail), _ = await self._run(queue)
        if fence is not None and text(outcome) == _FENCED:
            if detail is not None:
                # The pipeline removed the index entry of an execution the script kept. GT: a
                # save that re-indexed it meanwhile with a newer score is not turned back.
                await self._client.zadd(
                    self._keys.executions(), {execution_id: int(text(detail))}, gt=True
                )
            check_fence(execution_id, fence, _generation(current))
        return Tombstone.from_json(json.loads(text(detail)))

    async def heartbeat(self, execution_id: str, *, fence: int, node_id: str, now_ms: int) -> None:
        """One EVALSHA (the script object reloads itself on NOSCRIPT): fence, tombstone, SET PX."""
        keys = [
            self._keys.fence_generation(execution_id),
            self._keys.tombstone(execution_id),
            self._keys.execution_heartbeat(execution_id),
        ]
        document = json.dumps({"node_id": node_id, "last_update_ms": now_ms}, separators=(",", ":"))
        outcome, current = await self._heartbeat(
            keys=keys, args=[fence, document, self._heartbeat_ttl_ms]
        )
        generation = _generation(current)
        check_fence(execution_id, fence, generation)
        if text(outcome) == _DELETED:
            check_fenced_write(execution_id, fence, generation, None)

    async def _run(self, queue: Callable[[Any], None]) -> tuple[Any, Any]:
        """One pipeline round trip: the script reply and the index reply.

        A server that has not seen the script yet (first call, restart, failover) answers
        NOSCRIPT: load it and send the pipeline again (the index updates are idempotent).
        """
        try:
            return await self._pipeline(queue)
        except NoScriptError:
            await self._client.script_load(self._save.script)
            await self._client.script_load(self._delete.script)
            return await self._pipeline(queue)

    async def _pipeline(self, queue: Callable[[Any], None]) -> tuple[Any, Any]:
        replies = await self._tick.run(queue)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        script, indexed = replies[:2]
        return script, indexed


def _save_arguments(
    delta: CheckpointDelta,
    fence: int | None,
    retention_ms: int,
    history: list[str],
    history_cap: int,
) -> list[str | int]:
    header = _pairs(delta.header)
    nodes = _pairs(delta.nodes)
    variables = _pairs(delta.variables)
    return [
        "" if fence is None else fence,
        "1" if delta.full else "0",
        delta.lifetime.value,
        retention_ms,
        len(delta.header),
        len(delta.nodes),
        len(delta.removed_nodes),
        len(delta.variables),
        len(delta.removed_variables),
        len(history),
        history_cap,
        *header,
        *nodes,
        *delta.removed_nodes,
        *variables,
        *delta.removed_variables,
        *history,
    ]


def _pairs(values: Mapping[str, Any]) -> list[str]:
    flat: list[str] = []
    for name, value in values.items():
        flat += (name, encode_value(value))
    return flat


def _generation(reply: Any) -> int | None:
    return None if reply is None else int(text(reply))
