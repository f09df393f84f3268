"""Registering and loading flow definitions, with the handler allowlist applied (E1, E2)."""

from __future__ import annotations

from plaita.application.engine.expressions import compile_flow_expressions
from plaita.application.handlers import HandlerRegistry
from plaita.application.ports import FlowRepository
from plaita.domain.errors import UnknownFlowError
from plaita.domain.flow import Flow


def validate_flow(flow: Flow, handlers: HandlerRegistry | None) -> None:
    """Refuse a flow whose expressions do not parse or whose handlers are not allowed."""
    compile_flow_expressions(flow)
    if handlers is not None:
        handlers.check_flow(flow)


class FlowCatalog:
    """The one door to flow definitions: validates on the way in, names misses on the way out."""

    def __init__(self, flows: FlowRepository, handlers: HandlerRegistry | None) -> None:
        self._flows = flows
        self._handlers = handlers

    def validate(self, flow: Flow) -> None:
        validate_flow(flow, self._handlers)

    async def register(self, flow: Flow) -> Flow:
        self.validate(flow)
        await self._flows.put(flow)
        return flow

    async def get(self, flow_id: str, version: str | None = None) -> Flow:
        flow = await self._flows.get(flow_id, version)
        if flow is None:
            which = f"{flow_id!r}" if version is None else f"{flow_id!r} version {version!r}"
            known = ", ".join(await self._flows.list_ids()) or "none"
            raise UnknownFlowError(
                f"flow {which} is not registered (registered flows: {known}); "
                "register it with `plaita flows register FILE`"
            )
        return flow
