"""An open span of the tracing port (C6): what a traced piece of work hands on and ends with."""

from __future__ import annotations

from typing import Protocol

from plaita.domain.tracing import TraceContext


class Span(Protocol):
    """An open span: its context to hand on, and the outcome it ends with."""

    def context(self) -> TraceContext | None:
        """This span's context as a W3C traceparent to pass on (inject); None if not traced."""
        ...

    def outcome(self, outcome: str, *, error: BaseException | None = None) -> None:
        """Record how the span's work ended; ``error`` marks it failed and is recorded."""
        ...
