"""Every port a use case needs is mandatory (issue 13): a feature that is off gets a null
object or the memory twin, never a None that each caller must test for."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
import typing

import pytest

import plaita.application as application
import plaita.application.ports as ports

PORTS = {
    value
    for name in ports.__all__
    if inspect.isclass(value := getattr(ports, name)) and getattr(value, "_is_protocol", False)
}


def application_classes() -> list[type]:
    modules = [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(application.__path__, f"{application.__name__}.")
        if not info.name.startswith(ports.__name__)
    ]
    return [
        value
        for module in modules
        for value in vars(module).values()
        if inspect.isclass(value) and value.__module__ == module.__name__
    ]


def optional_ports(cls: type) -> list[str]:
    init = cls.__dict__.get("__init__")
    if not inspect.isfunction(init):
        return []
    hints = typing.get_type_hints(init)
    found = []
    for name, hint in hints.items():
        options = typing.get_args(hint) if isinstance(hint, types.UnionType) else ()
        if type(None) in options and any(option in PORTS for option in options):
            found.append(f"{name}: {hint}")
    return found


CLASSES = application_classes()


def test_the_scan_sees_the_use_cases() -> None:
    names = {cls.__name__ for cls in CLASSES}
    assert {"ReapZombies", "DeleteExecution", "PublishEvent", "FlowCatalog"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_no_application_constructor_takes_a_port_that_may_be_none(cls: type) -> None:
    assert optional_ports(cls) == []
