"""`plaita dev` registers its flow folder deployment-wide (C4, ADR 0011)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plaita.application.tenancy import tenant_scope
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.container import build_container
from plaita.entrypoints.dev import register_flow_folder
from plaita.entrypoints.settings import Settings


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
