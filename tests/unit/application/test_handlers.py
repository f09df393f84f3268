"""What a flow's handler references are checked against (E1): the allowlist by name, and —
by a ``HandlerRegistry``, at registration — every function, refused by name with the
module's public callables (issue 15)."""

from __future__ import annotations

import types
from typing import Any

import pytest

from plaita.application.handlers import (
    MAX_LISTED_CALLABLES,
    HandlerAllowlist,
    HandlerRegistry,
    public_callables,
)
from plaita.domain.errors import HandlerNotAllowedError, UnknownHandlerError
from plaita.domain.flow import Flow


def handler(params: Any, ctx: Any) -> None:
    return None


def task_flow(*handlers: str) -> Flow:
    nodes: list[dict[str, Any]] = [
        {"id": f"n{index}", "type": "task", "handler": reference, "next": f"n{index + 1}"}
        for index, reference in enumerate(handlers)
    ]
    nodes.append({"id": f"n{len(handlers)}", "type": "end"})
    return Flow.from_document({"flow_id": "busy", "start": "n0", "nodes": nodes})


class Importer:
    """Modules by name, recording every import; an unknown name fails as import would."""

    def __init__(self, **modules: object) -> None:
        self.modules = modules
        self.imported: list[str] = []

    def __call__(self, name: str) -> object:
        self.imported.append(name)
        if name not in self.modules:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return self.modules[name]


MOD = types.SimpleNamespace(
    always_busy=handler,
    charge=handler,
    Refund=type("Refund", (), {"__call__": handler}),
    _private=handler,
    CONFIG={"not": "callable"},
)


def test_a_misspelt_function_is_refused_naming_the_modules_callables() -> None:
    registry = HandlerRegistry(["mod"], importer=Importer(mod=MOD))

    with pytest.raises(UnknownHandlerError) as raised:
        registry.check_registration(task_flow("mod:charge", "mod:alwys_busy"))

    assert str(raised.value) == (
        "flow 'busy': handlers not found: node 'n1': handler 'mod:alwys_busy': module 'mod' "
        "has no callable 'alwys_busy' (did you mean 'always_busy'?); its public callables: "
        "Refund, always_busy, charge. Fix the handler references, or deploy the functions "
        "before the flow"
    )


def test_every_missing_function_is_named_by_its_node_in_node_order() -> None:
    registry = HandlerRegistry(["mod"], importer=Importer(mod=MOD))

    with pytest.raises(UnknownHandlerError) as raised:
        registry.check_registration(task_flow("mod:zzz", "mod:CONFIG", "mod:_private"))

    message = str(raised.value)
    assert message.index("node 'n0'") < message.index("node 'n1'")
    assert "has no callable 'zzz'" in message
    assert "has no callable 'CONFIG'" in message  # there, but not callable
    # A private function is a valid reference (only the list of callables leaves it out).
    assert "node 'n2'" not in message and "_private" not in message


def test_a_module_that_cannot_be_imported_is_refused_saying_why_and_what_to_do() -> None:
    registry = HandlerRegistry(["ghost"], importer=Importer())

    with pytest.raises(UnknownHandlerError) as raised:
        registry.check_registration(task_flow("ghost:run"))

    assert str(raised.value) == (
        "flow 'busy': handlers not found: node 'n0': handler 'ghost:run': module 'ghost' "
        "cannot be imported (No module named 'ghost'); install it where this process runs, "
        "or fix the module name. Fix the handler references, or deploy the functions before "
        "the flow"
    )


def test_the_allowlist_is_checked_first_and_refuses_without_importing_anything() -> None:
    importer = Importer(mod=MOD)
    registry = HandlerRegistry(["mod"], importer=importer)

    with pytest.raises(HandlerNotAllowedError, match=r"nodes n1 \(evil:run\)"):
        registry.check_registration(task_flow("mod:alwys_busy", "evil:run"))

    assert importer.imported == []


def test_resolve_refuses_a_missing_function_with_the_same_words() -> None:
    """One rule: what a node meets at run time is what a registration is refused with."""
    registry = HandlerRegistry(["mod"], importer=Importer(mod=MOD))

    with pytest.raises(UnknownHandlerError) as at_run_time:
        registry.resolve("mod:alwys_busy")
    with pytest.raises(UnknownHandlerError) as at_registration:
        registry.check_registration(task_flow("mod:alwys_busy"))

    assert str(at_run_time.value) in str(at_registration.value)
    assert registry.resolve("mod:always_busy") is handler


def test_the_callables_listed_are_bounded_and_the_rest_counted() -> None:
    many = types.SimpleNamespace(**{f"step_{n:02}": handler for n in range(30)})
    registry = HandlerRegistry(["many"], importer=Importer(many=many))

    with pytest.raises(UnknownHandlerError) as raised:
        registry.resolve("many:nothing_like_it")

    listed = f"{', '.join(f'step_{n:02}' for n in range(MAX_LISTED_CALLABLES))} and 10 more"
    assert str(raised.value).endswith(f"its public callables: {listed}")
    assert "step_29" not in str(raised.value)


def test_a_module_without_public_callables_says_none() -> None:
    registry = HandlerRegistry(["empty"], importer=Importer(empty=types.SimpleNamespace(X=1)))

    with pytest.raises(UnknownHandlerError, match=r"its public callables: none$"):
        registry.resolve("empty:run")


def test_public_callables_are_sorted_and_skip_private_and_plain_values() -> None:
    assert public_callables(MOD) == ["Refund", "always_busy", "charge"]


def test_the_check_before_a_dispatch_compares_names_only_even_on_a_registry() -> None:
    """``check_flow`` (before a dispatch runs a flow) never imports: a missing function
    fails at its node, where the errorHandler applies."""
    importer = Importer(mod=MOD)
    registry = HandlerRegistry(["mod"], importer=importer)

    registry.check_flow(task_flow("mod:alwys_busy"))

    assert importer.imported == []


def test_a_names_only_allowlist_never_imports() -> None:
    """HandlerAllowlist (the console's choice): an allowlisted module that cannot even be
    imported passes, since nothing is imported; another module is refused by name."""
    allowlist = HandlerAllowlist(["no_such_module_anywhere", " ", ""])

    allowlist.check_registration(task_flow("no_such_module_anywhere:alwys_busy"))
    assert allowlist.allowed_modules == frozenset({"no_such_module_anywhere"})
    assert not hasattr(allowlist, "resolve")
    with pytest.raises(HandlerNotAllowedError, match="allowed modules: no_such_module_anywhere"):
        allowlist.check_registration(task_flow("other:run"))


def test_what_a_module_imported_from_elsewhere_is_not_listed_but_its_submodules_are() -> None:
    """``from typing import Any`` in a handler module is no handler to suggest; a function of
    its own package (a re-export from ``shop.refunds``) is."""
    shop = types.ModuleType("shop")
    exec("from typing import Any\ndef charge(params, ctx):\n    return None\n", shop.__dict__)
    refunds = types.ModuleType("shop.refunds")
    exec("def refund(params, ctx):\n    return None\n", refunds.__dict__)
    shop.refund = refunds.refund  # type: ignore[attr-defined]
    registry = HandlerRegistry(["shop"], importer=Importer(shop=shop))

    assert public_callables(shop) == ["charge", "refund"]
    with pytest.raises(UnknownHandlerError, match=r"its public callables: charge, refund$"):
        registry.resolve("shop:Charge")
    assert registry.resolve("shop:Any") is Any  # imported ones still resolve
