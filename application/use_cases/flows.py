"""Registering and loading flow definitions, with the handler allowlist applied (E1, E2, W20)."""

from __future__ import annotations

from collections import OrderedDict

from plaita.application.engine.expressions import compile_flow_expressions
from plaita.application.handlers import HandlerRegistry
from plaita.application.ports import Clock, FlowRepository
from plaita.domain.errors import UnknownFlowError
from plaita.domain.flow import Flow

#: W20 defaults: definitions cached by ``flow_id:version`` (latest when absent).
FLOW_CACHE_SIZE = 100
FLOW_CACHE_TTL_MS = 300_000


def validate_flow(flow: Flow, handlers: HandlerRegistry | None) -> None:
    """Refuse a flow whose expressions do not parse or whose handlers are not allowed."""
    compile_flow_expressions(flow)
    if handlers is not None:
        handlers.check_flow(flow)


class FlowCatalog:
    """The one door to flow definitions: validates on the way in, names misses on the way out.

    With a clock it caches definitions (W20), so a worker does not re-read and re-parse the
    flow on every dispatch; a re-registered version is seen within the TTL.
    """

    def __init__(
        self,
        flows: FlowRepository,
        handlers: HandlerRegistry | None,
        *,
        clock: Clock | None = None,
        cache_size: int = FLOW_CACHE_SIZE,
        cache_ttl_ms: int = FLOW_CACHE_TTL_MS,
    ) -> None:
        self._flows = flows
        self._handlers = handlers
        self._clock = clock
        self._cache_size = cache_size
        self._cache_ttl_ms = cache_ttl_ms
        self._cache: OrderedDict[tuple[str, str | None], tuple[int, Flow]] = OrderedDict()
        self._validated: set[str] = set()

    def validate(self, flow: Flow) -> None:
        if flow.fingerprint in self._validated:
            return
        validate_flow(flow, self._handlers)
        self._validated.add(flow.fingerprint)

    async def register(self, flow: Flow) -> Flow:
        self.validate(flow)
        await self._flows.put(flow)
        self._cache.clear()
        return flow

    async def get(self, flow_id: str, version: str | None = None) -> Flow:
        key = (flow_id, version)
        cached = self._cached(key)
        if cached is not None:
            return cached
        flow = await self._flows.get(flow_id, version)
        if flow is None:
            which = f"{flow_id!r}" if version is None else f"{flow_id!r} version {version!r}"
            known = ", ".join(await self._flows.list_ids()) or "none"
            raise UnknownFlowError(
                f"flow {which} is not registered (registered flows: {known}); "
                "register it with `plaita flows register FILE`"
            )
        self._remember(key, flow)
        return flow

    def _cached(self, key: tuple[str, str | None]) -> Flow | None:
        if self._clock is None or key not in self._cache:
            return None
        expires_at, flow = self._cache[key]
        if expires_at <= self._clock.now_ms():
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        return flow

    def _remember(self, key: tuple[str, str | None], flow: Flow) -> None:
        if self._clock is None or self._cache_size <= 0:
            return
        self._cache[key] = (self._clock.now_ms() + self._cache_ttl_ms, flow)
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
