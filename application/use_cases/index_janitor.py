"""The index janitor: prunes dead index members of the event and subscription stores (V7).

Listings prune the dead members they read, but an index nobody lists would keep the ids of
expired events until the index itself expires. The janitor walks every index of every store
``plan.budget`` members per store and tick, every ``plan.interval_seconds``; both come from
``plan_janitor``, which has already replaced unusable settings and said so.

A tick that fails for one store (Redis unreachable, a script error) is retried at the next
tick: the janitor runs beside the event filter and must never take it down. Its failures go
to the process's ``StoreOutages``: one WARNING per outage, one INFO when it is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping

import attrs

from plaita.application import ports
from plaita.application.outages import StoreOutages
from plaita.domain.janitor import JanitorPlan
from plaita.domain.outages import Backoff

log = logging.getLogger("plaita.janitor")


@attrs.frozen
class JanitorTick:
    """What one tick did: members pruned per store, and the stores whose prune failed."""

    pruned: Mapping[str, int]
    failed: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.pruned.values())


class IndexJanitorService:
    """Runs ``prune_indexes`` on each store once per tick until stopped.

    ``sleep`` is injected so tests drive ticks without waiting; the loop waits for whichever
    comes first, the sleep or the stop event, so a stop never waits out an interval.
    """

    def __init__(
        self,
        stores: Mapping[str, ports.IndexJanitor],
        plan: JanitorPlan,
        *,
        clock: ports.Clock,
        outages: StoreOutages | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._stores = dict(stores)
        self.plan = plan
        self._clock = clock
        self._sleep = sleep
        outages = outages or StoreOutages("indexes", log=log, monotonic=clock.monotonic)
        # The janitor ticks every interval whatever happens: that is its back-off too.
        every_ms = max(1, round(plan.interval_seconds * 1000))
        every = Backoff(base_ms=every_ms, cap_ms=every_ms)
        self._outages = {
            name: outages.loop(
                f"index_janitor.{name}",
                consequence=f"dead members of the {name} indexes are not pruned meanwhile "
                "(listings still prune what they read)",
                backoff=every,
            )
            for name in self._stores
        }

    async def tick(self) -> JanitorTick:
        """Prune each store once, within the budget; failures are logged, not raised."""
        pruned: dict[str, int] = {}
        failed: list[str] = []
        started = self._clock.monotonic()
        for name, store in self._stores.items():
            try:
                pruned[name] = await store.prune_indexes(budget=self.plan.budget)
            # Any failure, not just Redis's: the janitor must never stop the service beside it.
            except Exception as exc:
                failed.append(name)
                self._outages[name].failed(exc)
            else:
                self._outages[name].succeeded()
        result = JanitorTick(pruned, tuple(failed))
        if result.total:
            log.info(
                "event=janitor.tick pruned=%d %s took_ms=%d",
                result.total,
                " ".join(f"{name}={count}" for name, count in pruned.items()),
                round((self._clock.monotonic() - started) * 1000),
            )
        return result

    async def run(self, stop: asyncio.Event) -> None:
        """Tick every ``plan.interval_seconds`` until ``stop`` is set; at once if disabled."""
        for warning in self.plan.warnings:
            log.warning(
                "event=config.fallback setting=%s value=%r used=%r: %s",
                warning.setting,
                warning.value,
                warning.used,
                warning.message,
            )
        if not self.plan.enabled:
            return
        while not stop.is_set():
            await self.tick()
            await self._pause(stop)

    async def _pause(self, stop: asyncio.Event) -> None:
        sleeping = asyncio.ensure_future(self._sleep(self.plan.interval_seconds))
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if sleeping.done():
                sleeping.result()  # a failing sleep is a bug to see, not to swallow
        finally:
            for task in (sleeping, stopping):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
