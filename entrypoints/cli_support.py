"""Helpers shared by the CLI commands and the demo: reading flow files, importing handlers."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import click

from plaita.domain.errors import PlaitaError, UnknownHandlerError
from plaita.domain.execution import ExecutionState
from plaita.domain.flow import Flow

JSON = Any


def execution_view(state: ExecutionState) -> dict[str, JSON]:
    return {
        "execution_id": state.execution_id,
        "flow_id": state.flow_id,
        "flow_version": state.flow_version,
        "status": state.status.value,
        "last_node_id": state.last_node_id,
        "next_node_id": state.next_node_id,
        "waiting_for": None if state.suspension is None else state.suspension.to_json(),
        "result": state.result,
        "error": None if state.error is None else state.error.to_json(),
        "node_results": dict(state.node_results),
        "steps": state.steps,
        "created_at_ms": state.created_at_ms,
        "updated_at_ms": state.updated_at_ms,
    }


def load_flow_file(path: Path) -> Flow:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc.strerror}. Run from the repository root or pass the "
            "right path"
        ) from None
    try:
        return Flow.from_json(text)
    except PlaitaError as exc:
        raise click.ClickException(f"{path}: {type(exc).__name__}: {exc}") from None


def import_handler_modules(modules: tuple[str, ...]) -> None:
    """Import the allowlisted modules now, from the cwd too (as ``celery -A``), to fail fast."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UnknownHandlerError(
                f"handler module {module!r} cannot be imported from {cwd} or the installed "
                f"packages: {exc}"
            ) from None
