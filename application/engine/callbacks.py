"""CallbackManager: lifecycle notifications of an execution (E9).

Listeners implement any subset of ``FlowListener``'s methods. A failing listener is logged and
never fails the execution: observability must not change outcomes.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

JSON = Any
log = logging.getLogger("plaita.engine.callbacks")


class FlowListener(Protocol):
    def on_flow_start(self, execution_id: str, flow_id: str) -> None: ...
    def on_node_start(self, execution_id: str, node_id: str, node_type: str) -> None: ...
    def on_node_end(
        self, execution_id: str, node_id: str, result: JSON, branch: str | None
    ) -> None: ...
    def on_node_suspend(self, execution_id: str, node_id: str, reason: str) -> None: ...
    def on_flow_suspend(self, execution_id: str, node_id: str) -> None: ...
    def on_flow_resume(self, execution_id: str, node_id: str, resume_type: str) -> None: ...
    def on_flow_end(self, execution_id: str, result: JSON, error: BaseException | None) -> None: ...


class CallbackManager:
    """Fans each lifecycle call out to the listeners that define it."""

    def __init__(self, listeners: list[object] | None = None) -> None:
        self._listeners: list[object] = list(listeners or [])

    def add(self, listener: object) -> None:
        self._listeners.append(listener)

    @property
    def listeners(self) -> tuple[object, ...]:
        return tuple(self._listeners)

    def _emit(self, name: str, *args: Any) -> None:
        for listener in self._listeners:
            method = getattr(listener, name, None)
            if method is None:
                continue
            try:
                method(*args)
            except Exception:
                log.exception("event=callback.failed callback=%s listener=%r", name, listener)

    def on_flow_start(self, execution_id: str, flow_id: str) -> None:
        self._emit("on_flow_start", execution_id, flow_id)

    def on_node_start(self, execution_id: str, node_id: str, node_type: str) -> None:
        self._emit("on_node_start", execution_id, node_id, node_type)

    def on_node_end(
        self, execution_id: str, node_id: str, result: JSON, branch: str | None
    ) -> None:
        self._emit("on_node_end", execution_id, node_id, result, branch)

    def on_node_suspend(self, execution_id: str, node_id: str, reason: str) -> None:
        self._emit("on_node_suspend", execution_id, node_id, reason)

    def on_flow_suspend(self, execution_id: str, node_id: str) -> None:
        self._emit("on_flow_suspend", execution_id, node_id)

    def on_flow_resume(self, execution_id: str, node_id: str, resume_type: str) -> None:
        self._emit("on_flow_resume", execution_id, node_id, resume_type)

    def on_flow_end(self, execution_id: str, result: JSON, error: BaseException | None) -> None:
        self._emit("on_flow_end", execution_id, result, error)
