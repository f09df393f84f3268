"""The ports package: one small Protocol a module, every method's contract in its summary line.

A port is read far more often than it is written (by each adapter family, each contract
suite, each use case), so its contract must be there at a glance: the first line of every
method's docstring says what the method promises, and the rest may add the details. The
package re-exports every public name, so ``from plaita.application.ports import X`` is the
one import a caller needs.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import attrs
import pytest

import plaita.application.ports as ports

MODULES: list[ModuleType] = [
    importlib.import_module(f"{ports.__name__}.{info.name}")
    for info in pkgutil.iter_modules(ports.__path__)
]


def defined_classes(module: ModuleType) -> list[type]:
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value) and value.__module__ == module.__name__
    ]


def is_protocol(cls: type) -> bool:
    return bool(getattr(cls, "_is_protocol", False))


def public_methods(cls: type) -> list[str]:
    """Methods and properties the class itself defines, without attrs' generated ones."""
    generated = set(vars(attrs.make_class("Empty", {}, frozen=True))) if attrs.has(cls) else set()
    return [
        name
        for name, value in vars(cls).items()
        if not name.startswith("_")
        and name not in generated
        and (inspect.isfunction(value) or isinstance(value, property))
    ]


METHODS = [
    pytest.param(cls, name, id=f"{cls.__name__}.{name}")
    for module in MODULES
    for cls in defined_classes(module)
    for name in public_methods(cls)
]


def summary_problem(doc: str | None) -> str | None:
    if not doc or not doc.strip():
        return "has no docstring"
    lines = inspect.cleandoc(doc).splitlines()
    if not lines[0].rstrip().endswith((".", ")", ":")):
        return f"has a summary that runs past its first line: {lines[0]!r}"
    if len(lines) > 1 and lines[1].strip():
        return "needs a blank line after its one-line summary"
    return None


def test_ports_is_a_package_of_modules() -> None:
    assert hasattr(ports, "__path__"), "plaita.application.ports must be a package"
    assert len(MODULES) >= 15


@pytest.mark.parametrize("module", MODULES, ids=lambda module: module.__name__.rsplit(".")[-1])
def test_each_port_module_holds_at_most_one_protocol_and_says_what_it_is(
    module: ModuleType,
) -> None:
    protocols = [cls.__name__ for cls in defined_classes(module) if is_protocol(cls)]
    assert len(protocols) <= 1, f"{module.__name__} defines several ports: {protocols}"
    assert module.__doc__ and module.__doc__.strip(), f"{module.__name__} has no docstring"


@pytest.mark.parametrize(("cls", "name"), METHODS)
def test_every_method_of_the_ports_package_states_its_contract_in_one_line(
    cls: type, name: str
) -> None:
    member = vars(cls)[name]
    doc = member.fget.__doc__ if isinstance(member, property) else member.__doc__
    problem = summary_problem(doc)
    assert problem is None, f"{cls.__module__}.{cls.__name__}.{name} {problem}"


@pytest.mark.parametrize(
    "cls",
    [cls for module in MODULES for cls in defined_classes(module)],
    ids=lambda cls: cls.__name__,
)
def test_every_class_of_the_ports_package_is_documented_and_re_exported(cls: type) -> None:
    assert cls.__doc__ and cls.__doc__.strip(), f"{cls.__qualname__} has no docstring"
    assert getattr(ports, cls.__name__) is cls, f"{cls.__name__} is not re-exported"
    assert cls.__name__ in ports.__all__


def test_there_is_no_separate_tombstone_port() -> None:
    """W13: the tombstone is read through the execution repository, which writes it."""
    assert not hasattr(ports, "TombstoneStore")
    assert "tombstone" in public_methods(ports.ExecutionRepository)
