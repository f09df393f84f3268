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

from plaita.domain.errors import (
    HandlerNotAllowedError,
    HandlerNotImportableError,
    UnknownHandlerError,
)
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


def handler_reference(handler: Handler) -> str:
    """The ``"module:function"`` a worker resolves back to ``handler`` — the inverse of
    ``HandlerRegistry.resolve`` — or ``HandlerNotImportableError`` when there is none: a
    lambda, a nested function, a method, a function of ``__main__``, or a name that imports
    as another object."""
    if not callable(handler):
        raise HandlerNotImportableError(f"a task handler must be callable, got {handler!r}")
    module = getattr(handler, "__module__", None)
    name = getattr(handler, "__qualname__", None)
    what = f"handler {getattr(handler, '__qualname__', handler)!r}"
    fix = (
        "define it at the top level of an importable module (the workers import it by "
        "name), or pass its name as a 'module:function' string"
    )
    if not isinstance(module, str) or not isinstance(name, str):
        raise HandlerNotImportableError(f"{what} has no module and name to import it by: {fix}")
    if module == "__main__":
        raise HandlerNotImportableError(
            f"{what} is defined in __main__, which a worker cannot import: {fix}"
        )
    if "<lambda>" in name or "<locals>" in name or "." in name:
        kind = "a lambda" if "<lambda>" in name else "not a module-level function"
        raise HandlerNotImportableError(f"{what} in {module!r} is {kind}: {fix}")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as exc:
        raise HandlerNotImportableError(
            f"{what}: module {module!r} cannot be imported ({exc}): {fix}"
        ) from None
    if found is not handler:
        raise HandlerNotImportableError(
            f"{what}: {module}:{name} imports as another object ({found!r}): {fix}"
        )
    return f"{module}:{name}"
