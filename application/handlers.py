"""Task handlers: ``"module:function"`` references resolved only inside an allowlist.

A flow author can name any string; only modules the operator listed in
``--handler-modules`` / ``PLAITA_HANDLER_MODULES`` are ever imported, so a definition can never
make a worker run code nobody deployed on purpose (a ``code`` node that runs source text
from the definition is out of scope: docs/requirements.md, "Decided out of scope").

Every check of a flow (``check_flow``: before a dispatch runs it too) compares its handler
modules with the allowlist. A registration checks more or not, by the object the process
chose (``check_registration``):

- ``HandlerAllowlist`` compares module names only and never imports: for a process that never
  runs handler code (the console).
- ``HandlerRegistry`` also imports the allowlisted modules the flow names and finds every
  function, so a misspelt one is refused when the flow is registered, not when its node runs:
  for the processes that run the code anyway (worker, ``plaita dev``) and ``plaita flows
  register --handler-modules``. Its ``resolve`` is what the engine calls.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from plaita.domain.errors import (
    HandlerNotAllowedError,
    HandlerNotImportableError,
    UnknownHandlerError,
)
from plaita.domain.flow import Flow, TaskNode

Handler = Callable[..., Any]

#: The most callables an UnknownHandlerError lists of a module (the rest are counted).
MAX_LISTED_CALLABLES = 20


class HandlerAllowlist:
    """Names only: every task's handler module must be allowlisted. Imports nothing."""

    def __init__(self, allowed_modules: Iterable[str]) -> None:
        self.allowed_modules = frozenset(m.strip() for m in allowed_modules if m.strip())

    def check_flow(self, flow: Flow) -> None:
        """Raise ``HandlerNotAllowedError`` naming every task outside the allowlist."""
        refused = sorted(
            f"{node.id} ({node.handler})"
            for node in _tasks(flow)
            if node.handler_module not in self.allowed_modules
        )
        if refused:
            allowed = ", ".join(sorted(self.allowed_modules)) or "none"
            raise HandlerNotAllowedError(
                f"flow {flow.flow_id!r}: handlers outside the allowlist in nodes "
                f"{', '.join(refused)}; allowed modules: {allowed}. Add the module to "
                "--handler-modules (PLAITA_HANDLER_MODULES) or change the flow"
            )

    def check_registration(self, flow: Flow) -> None:
        """What a registration of ``flow`` must pass: here the allowlist alone."""
        self.check_flow(flow)


class HandlerRegistry(HandlerAllowlist):
    """The allowlist, and the handlers themselves: imports allowlisted modules (only those)
    and finds their functions, for a registration (``check_registration``) and for the engine
    (``resolve``)."""

    def __init__(
        self,
        allowed_modules: Iterable[str],
        importer: Callable[[str], Any] = importlib.import_module,
    ) -> None:
        super().__init__(allowed_modules)
        self._import = importer
        self._resolved: dict[str, Handler] = {}

    def __reduce__(self) -> tuple[type[HandlerRegistry], tuple[tuple[str, ...]]]:
        """Pickled as its allowlist alone (``plaita flows register`` sends it to a dev
        process, ADR 0021); the modules resolved so far are resolved again there."""
        if self._import is not importlib.import_module:
            raise TypeError("a HandlerRegistry with its own importer cannot be pickled")
        return (HandlerRegistry, (tuple(sorted(self.allowed_modules)),))

    def check_registration(self, flow: Flow) -> None:
        """The allowlist (``HandlerNotAllowedError``, nothing imported), then every task's
        function: ``UnknownHandlerError`` naming each node whose module cannot be imported
        or has no such callable."""
        self.check_flow(flow)
        missing = []
        for node in sorted(_tasks(flow), key=lambda task: task.id):
            try:
                self.resolve(node.handler)
            except UnknownHandlerError as exc:
                missing.append(f"node {node.id!r}: {exc}")
        if missing:
            raise UnknownHandlerError(
                f"flow {flow.flow_id!r}: handlers not found: {'; '.join(missing)}. Fix the "
                "handler references, or deploy the functions before the flow"
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
                f"handler {reference!r}: module {module_name!r} cannot be imported ({exc}); "
                "install it where this process runs, or fix the module name"
            ) from None
        handler: Handler | None = getattr(module, function_name, None)
        if not callable(handler):
            raise UnknownHandlerError(_no_callable(reference, module_name, function_name, module))
        self._resolved[reference] = handler
        return handler


def handler_reference(handler: Callable[..., object], *, where: str = "handler") -> str:
    """``"module:qualname"`` of ``handler`` — the reference ``HandlerRegistry.resolve``
    turns back into it — or ``HandlerNotImportableError`` when a worker could not import it
    back by that name (``where`` says whose handler it is)."""
    module = getattr(handler, "__module__", None)
    qualname = getattr(handler, "__qualname__", None)
    problem: str | None = f"a {type(handler).__name__} object has no module-level name"
    if isinstance(module, str) and isinstance(qualname, str):
        problem = _not_importable(handler, module, qualname)
    if problem is not None:
        raise HandlerNotImportableError(
            f"{where}: handler {_name_of(handler)} cannot be imported back by its name: "
            f"{problem}. Define it at module level in an importable module, or pass a "
            "'module:function' string"
        )
    return f"{module}:{qualname}"


def _not_importable(handler: object, module: str, qualname: str) -> str | None:
    if "<lambda>" in qualname:
        return "it is a lambda"
    if "<locals>" in qualname:
        return f"it is defined inside the function {qualname.split('.<locals>')[0]!r}"
    if "." in qualname:
        owner = qualname.rpartition(".")[0]
        return f"{qualname!r} is an attribute of {owner!r}, not a module-level name"
    if module == "__main__":
        return (
            "it is defined in __main__ (the script being run), which is another program on a worker"
        )
    try:
        found = getattr(importlib.import_module(module), qualname, None)
    except Exception as exc:  # an import runs arbitrary code: any failure means "not here"
        return f"its module {module!r} cannot be imported ({type(exc).__name__}: {exc})"
    if found is None:
        return f"module {module!r} has no {qualname!r}"
    if found is not handler:
        return f"{module}:{qualname} is another object (the name was rebound or shadowed)"
    return None


def _name_of(handler: object) -> str:
    qualname = getattr(handler, "__qualname__", None)
    module = getattr(handler, "__module__", None)
    if isinstance(qualname, str) and isinstance(module, str):
        return f"{qualname!r} of module {module!r}"
    return repr(handler)


def public_callables(module: ModuleType | object) -> list[str]:
    """The names of ``module``'s public callables (not starting with ``_``), sorted: those it
    defines, or its submodules do — not what it imported from elsewhere (``typing.Any``)."""
    own = getattr(module, "__name__", None)
    return sorted(
        name
        for name in dir(module)
        if not name.startswith("_")
        and callable(value := getattr(module, name, None))
        and _defined_in(value, own)
    )


def _defined_in(value: object, module_name: str | None) -> bool:
    where = getattr(value, "__module__", None)
    if module_name is None or not isinstance(where, str):
        return True
    return where == module_name or where.startswith(f"{module_name}.")


def _no_callable(reference: str, module_name: str, function_name: str, module: object) -> str:
    names = public_callables(module)
    close = difflib.get_close_matches(function_name, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    listed = ", ".join(names[:MAX_LISTED_CALLABLES]) or "none"
    more = len(names) - MAX_LISTED_CALLABLES
    if more > 0:
        listed += f" and {more} more"
    return (
        f"handler {reference!r}: module {module_name!r} has no callable {function_name!r}"
        f"{hint}; its public callables: {listed}"
    )


def _tasks(flow: Flow) -> list[TaskNode]:
    return [node for node in flow.nodes() if isinstance(node, TaskNode)]
