"""The public face: ``import plaita`` exports what ``__all__`` says, lazily, and
``plaita --version`` / ``plaita.__version__`` tell the installed version (ADR 0020)."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

import plaita
from plaita.entrypoints.cli import main

PUBLIC_INIT = Path(__file__).parents[2] / "public" / "__init__.py"


def type_checking_names() -> set[str]:
    tree = ast.parse(PUBLIC_INIT.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imported in ast.walk(node):
                if isinstance(imported, ast.ImportFrom):
                    names.update(alias.name for alias in imported.names)
    return names


def test_all_the_lazy_table_and_the_type_checking_imports_agree() -> None:
    exported = set(plaita.__all__) - {"__version__"}
    assert exported == set(plaita._HOMES)
    assert exported == type_checking_names()
    assert sorted(plaita.__all__) == plaita.__all__


def test_every_exported_name_resolves_from_where_the_table_says() -> None:
    for name, home in plaita._HOMES.items():
        value = getattr(plaita, name)
        assert value.__module__ == home or getattr(importlib.import_module(home), name) is value


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        plaita.FlowExecution  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no attribute 'FlowExecution'" in str(exc)
    else:
        raise AssertionError("plaita.FlowExecution resolved")


def test_importing_the_engine_does_not_load_the_client_or_redis() -> None:
    probe = (
        "import sys, plaita.domain.flow; "
        "print(any(m == 'redis' or m.startswith('plaita.entrypoints') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"


def test_the_version_is_the_installed_one() -> None:
    installed = importlib.metadata.version("plaita")
    assert plaita.__version__ == installed
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"plaita {installed}\n"
