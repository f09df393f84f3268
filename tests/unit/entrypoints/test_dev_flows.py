"""`plaita dev` registers its flow folder deployment-wide, by the latest rule, checking each
handler function (C4, E1, S2, ADR 0011)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import UnknownHandlerError
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.container import build_container
from plaita.entrypoints.dev import register_flow_folder
from plaita.entrypoints.settings import Settings

from ..application.conftest import one_task


def pay(says: str) -> dict[str, Any]:
    return {"flow_id": "pay", "start": "e", "nodes": [{"id": "e", "type": "end", "output": says}]}


async def test_the_folder_is_registered_for_every_tenant_and_an_edited_version_is_skipped(
    tmp_path: Path,
) -> None:
    """A kept store (--redis-url, --db) already holds version 1: the edited file under the
    same version is named and skipped — the dev process starts with the stored definition."""
    container = build_container(Settings(backend="memory"))
    (tmp_path / "pay.json").write_text(json.dumps(pay("'original'")))
    lines: list[str] = []
    assert await register_flow_folder(container, tmp_path, lines.append) == ["pay v1"]
    with tenant_scope("acme"):
        entry = await container.flows().lookup("pay")
    assert entry.owner == SHARED

    (tmp_path / "pay.json").write_text(json.dumps(pay("'edited'")))
    assert await register_flow_folder(container, tmp_path, lines.append) == []

    [line] = lines
    assert "pay.json: FlowVersionConflictError" in line and "new version" in line
    with tenant_scope("default"):
        kept = await container.flows().get("pay")
    assert kept.to_document()["nodes"][0]["output"] == "'original'"


async def test_an_older_version_in_the_folder_is_registered_and_the_latest_stays(
    tmp_path: Path,
) -> None:
    """The folder registers by the latest rule: the banner and a line say which is latest."""
    container = build_container(Settings(backend="memory"))
    (tmp_path / "pay.json").write_text(json.dumps({**pay("'two'"), "version": "2"}))
    await register_flow_folder(container, tmp_path, [].append)
    (tmp_path / "pay.json").write_text(json.dumps(pay("'one'")))
    lines: list[str] = []

    assert await register_flow_folder(container, tmp_path, lines.append) == ["pay v1 (latest v2)"]

    [line] = lines
    assert "pay.json: pay v1: latest stays version 2 (higher)" in line
    assert "plaita flows register FILE --shared --latest" in line
    with tenant_scope("default"):
        assert (await container.flows().get("pay")).version == "2"


async def test_a_function_the_handler_module_lacks_stops_the_folder_by_name(
    tmp_path: Path,
) -> None:
    """``plaita dev`` imports its handler modules (it runs them): a misspelt function is
    refused at registration, naming what the module has."""
    container = build_container(Settings(backend="memory", handler_modules=("examples.handlers",)))
    typo = one_task("examples.handlers:aprove", flow_id="typo")
    (tmp_path / "typo.json").write_text(json.dumps(typo))

    with pytest.raises(UnknownHandlerError, match=r"'aprove'.*its public callables: "):
        await register_flow_folder(container, tmp_path, [].append)
