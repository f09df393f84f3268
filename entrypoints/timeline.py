"""Listeners that make an execution's life visible: a readable timeline and structured logs."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

JSON = Any
log = logging.getLogger("plaita.timeline")


def _short(value: JSON, limit: int = 80) -> str:
    text = json.dumps(value, default=str, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TimelinePrinter:
    """Prints one line per lifecycle event, labelled per execution (used by ``plaita demo``)."""

    def __init__(self, write: Callable[[str], None], labels: dict[str, str] | None = None) -> None:
        self._write = write
        self._labels = labels if labels is not None else {}
        self._origin = time.monotonic()

    def _line(self, execution_id: str, text: str) -> None:
        elapsed = (time.monotonic() - self._origin) * 1000
        label = self._labels.get(execution_id, execution_id[:8])
        self._write(f"{elapsed:8.1f} ms  {label:<14} {text}")

    def on_flow_start(self, execution_id: str, flow_id: str) -> None:
        self._line(execution_id, f"flow {flow_id} started")

    def on_node_start(self, execution_id: str, node_id: str, node_type: str) -> None:
        self._line(execution_id, f"  {node_type:<6} {node_id} started")

    def on_node_end(
        self, execution_id: str, node_id: str, result: JSON, branch: str | None
    ) -> None:
        taken = f" branch={branch}" if branch else ""
        self._line(execution_id, f"  {'':<6} {node_id} ended{taken} result={_short(result)}")

    def on_node_suspend(self, execution_id: str, node_id: str, reason: str) -> None:
        self._line(execution_id, f"  {'':<6} {node_id} suspended ({reason})")

    def on_flow_resume(self, execution_id: str, node_id: str, resume_type: str) -> None:
        self._line(execution_id, f"resumed at {node_id} by {resume_type}")

    def on_flow_end(self, execution_id: str, result: JSON, error: BaseException | None) -> None:
        if error is None:
            self._line(execution_id, f"flow completed result={_short(result)}")
        else:
            self._line(execution_id, f"flow failed: {type(error).__name__}: {error}")


class LogListener:
    """Structured log lines for operators (``event=node.end execution_id=…``)."""

    def on_flow_start(self, execution_id: str, flow_id: str) -> None:
        log.info("event=flow.start execution_id=%s flow_id=%s", execution_id, flow_id)

    def on_node_start(self, execution_id: str, node_id: str, node_type: str) -> None:
        log.info(
            "event=node.start execution_id=%s node_id=%s type=%s", execution_id, node_id, node_type
        )

    def on_node_end(
        self, execution_id: str, node_id: str, result: JSON, branch: str | None
    ) -> None:
        log.info(
            "event=node.end execution_id=%s node_id=%s branch=%s", execution_id, node_id, branch
        )

    def on_node_suspend(self, execution_id: str, node_id: str, reason: str) -> None:
        log.info(
            "event=node.suspend execution_id=%s node_id=%s reason=%r", execution_id, node_id, reason
        )

    def on_flow_resume(self, execution_id: str, node_id: str, resume_type: str) -> None:
        log.info(
            "event=flow.resume execution_id=%s node_id=%s resume_type=%s",
            execution_id,
            node_id,
            resume_type,
        )

    def on_flow_end(self, execution_id: str, result: JSON, error: BaseException | None) -> None:
        if error is None:
            log.info("event=flow.end execution_id=%s status=completed", execution_id)
        else:
            log.warning(
                "event=flow.end execution_id=%s status=error error=%r", execution_id, str(error)
            )
