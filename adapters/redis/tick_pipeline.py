"""The checkpoints of one event-loop tick in one pipeline (P1, P2).

A worker runs many executions at once; each step ends with its checkpoint, a pipeline of its
own (the fenced save script and the index update). Sent one by one, every checkpoint pays
the client's per-round-trip cost: a connection taken from the pool and given back, a socket
write, a read. ``TickPipeline`` gathers the pipelines queued during one turn of the event
loop and sends them as one, then hands each caller the replies of its own commands. A
caller still waits for exactly one round trip (P2), and what it gets back is what its own
pipeline would have answered: the replies are positional, so one caller's error is never
another's.

Nothing is reordered within a caller's commands, and callers never share a command, so
every atomic unit (one script on one execution's keys) stays what it was; on a Redis
Cluster the pipeline routes each command by its own keys as before.

The adapters of one client share its ``TickPipeline`` (``tick_pipeline``): the lease of one
execution, the checkpoint of another and the attempt counters of a third, all due in the
same tick, leave together. A script goes as ``EVALSHA``; a server that does not know it
(first call, restart, failover) answers NOSCRIPT, and ``script`` loads it and sends it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from plaita.adapters.redis.connections import TRANSIENT_ERRORS

#: The pause before a cluster's commands that met a lost connection are sent again, as
#: redis-py's cluster pipeline pauses before its own retries.
CLUSTER_RETRY_PAUSE_SECONDS = 0.25
#: The most callers one pipeline carries; more in one tick go out as further pipelines,
#: concurrently, each on its own connection.
MAX_BATCH = 128

Queue = Callable[[Any], None]


#: Where a client keeps its ``TickPipeline``: on the client itself, so the two live and go
#: together (a registry keyed by the client would keep every client alive).
_ATTRIBUTE = "_plaita_tick_pipeline"


def tick_pipeline(client: redis.Redis) -> TickPipeline:
    """The ``TickPipeline`` every adapter of ``client`` shares (one per client)."""
    found: TickPipeline | None = getattr(client, _ATTRIBUTE, None)
    if found is None:
        found = TickPipeline(client)
        setattr(client, _ATTRIBUTE, found)
    return found


class TickPipeline:
    def __init__(self, client: redis.Redis, *, max_batch: int = MAX_BATCH) -> None:
        if max_batch < 1:
            raise ValueError(f"a tick pipeline carries at least one caller, got {max_batch}")
        self._client = client
        self._max_batch = max_batch
        self._waiting: list[tuple[Queue, asyncio.Future[list[Any]]]] = []
        # A cluster's commands that met a lost connection are sent again as often as the
        # client itself would retry a command (redis-py's ``retry``); a single node's
        # pipeline retries inside redis-py (the connection pool's ``Retry``).
        self._cluster_retries = (
            client.retry.get_retries() if isinstance(client, redis.RedisCluster) else 0
        )
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, queue: Queue) -> list[Any]:
        """The replies of the commands ``queue`` adds to a pipeline, sent with the others
        queued in this tick (errors as exception objects, as ``raise_on_error=False``)."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[list[Any]] = loop.create_future()
        if self._waiting and self._waiting[0][1].get_loop() is not loop:
            # Left by an event loop that ended before its flush ran: nobody awaits them.
            self._waiting = []
        if not self._waiting:
            # The first caller of the tick: send once every step ready now has queued.
            loop.call_soon(self._flush)
        self._waiting.append((queue, reply))
        return await reply

    async def command(self, *args: Any) -> Any:
        """One command's reply (its error raised), sent with this tick's others."""
        (reply,) = await self.run(lambda pipe: pipe.execute_command(*args))
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def script(self, script: AsyncScript, *, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """``script``'s reply (its error raised) for ``keys`` and ``args``, as ``EVALSHA``."""
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            return await self.command(*command)
        except NoScriptError:
            await self._client.script_load(script.script)
            return await self.command(*command)

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        for start in range(0, len(waiting), self._max_batch):
            task = asyncio.ensure_future(self._send(waiting[start : start + self._max_batch]))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[Queue, asyncio.Future[list[Any]]]]) -> None:
        pending, retries = batch, self._cluster_retries
        while True:
            try:
                answers = await self._execute([queue for queue, _ in pending])
            except asyncio.CancelledError:  # the loop is shutting down: so are the callers
                for _, reply in pending:
                    reply.cancel()
                raise
            except Exception as exc:  # the round trip failed: every caller sees why
                for _, reply in pending:
                    if not reply.done():
                        reply.set_exception(exc)
                return
            again = []
            for (queue, reply), answer in zip(pending, answers, strict=True):
                if reply.done():  # a caller cancelled meanwhile needs no answer
                    continue
                if retries > 0 and any(isinstance(part, TRANSIENT_ERRORS) for part in answer):
                    again.append((queue, reply))
                else:
                    reply.set_result(answer)
            if not again:
                return
            # A cluster pipeline answers a lost node's commands with its connection error
            # instead of raising it, so redis-py's own retry never runs: do what it does
            # (drop the connections and the slot map, pause, send again) for those callers.
            retries -= 1
            await self._client.aclose()
            await asyncio.sleep(CLUSTER_RETRY_PAUSE_SECONDS)
            pending = again

    async def _execute(self, queues: list[Queue]) -> list[list[Any]]:
        """One pipeline of ``queues``' commands; each queue's replies, errors as objects."""
        counts: list[int] = []
        async with self._client.pipeline(transaction=False) as pipe:
            for queue in queues:
                before = len(pipe)
                queue(pipe)
                counts.append(len(pipe) - before)
            replies = await pipe.execute(raise_on_error=False)
        answers, offset = [], 0
        for count in counts:
            answers.append(list(replies[offset : offset + count]))
            offset += count
        return answers
