"""Task handlers: ``"module:function"`` references resolved only inside an allowlist.

A flow author can name any string; only modules the operator listed in
``--handler-modules`` / ``PLAITA_HANDLER_MODULES`` are ever imported, so a definition can never
make a worker run code nobody deployed on purpose (a ``code`` node that runs source text
from the definition is out of scope: docs/requirements.md, "Decided out of scope").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from plaita.domain.errors import HandlerNotAllowedError, UnknownHandlerError
from plaita.domain.flow import Flow, TaskNode

Handler = Callable[..., Any]


class HandlerRegistry:
    def __init__(
        self,
        allowed_modules: Iterable[str],
        importer: Callable[[str], Any] = importlib.import_module,
    ) -> None:
        self.allowed_modules = frozenset(m.strip() for m in allowed_modules if m.strip())
        self._import = importer
        self._resolved: dict[str, Handler] = {}

    def check_flow(self, flow: Flow) -> None:
        """Raise ``HandlerNotAllowedError`` naming every task outside the allowlist."""
        refused = sorted(
            f"{node.id} ({node.handler})"
            for node in flow.nodes()
            if isinstance(node, TaskNode) and node.handler_module not in self.allowed_modules
        )
        if refused:
            allowed = ", ".join(sorted(self.allowed_modules)) or "none"
            raise HandlerNotAllowedError(
                f"flow {flow.flow_id!r}: handlers outside the allowlist in nodes "
                f"{', '.join(refused)}; allowed modules: {allowed}. Add the module to "
                "--handler-modules (PLAITA_HANDLER_MODULES) or change the flow"
            )

    def resolve(self, reference: str) -> Handler:
        if reference in self._resolved:
            return self._resolved[reference]
        module_name, _, function_name = reference.partition(":")
        if module_name not in self.allowed_modules:
            raise HandlerNotAllowedError(
                f"handler {reference!r}: module {module_name!r} is not in the allowlist"
            )
        try:
            module = self._import(module_name)
        except ImportError as exc:
            raise UnknownHandlerError(
                f"handler {reference!r}: module {module_name!r} cannot be imported: {exc}"
            ) from None
        handler: Handler | None = getattr(module, function_name, None)
        if not callable(handler):
            raise UnknownHandlerError(
                f"handler {reference!r}: {module_name!r} has no callable {function_name!r}"
            )
        self._resolved[reference] = handler
        return handler
