"""`plaita dev`'s flow folder: registered deployment-wide, read again as files change, and the
handler modules the files name (C4, S2, ADR 0011, ADR 0021)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import UnknownHandlerError
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.dev import (
    FlowFolder,
    Scan,
    handler_modules_named,
    import_dev_handlers,
)
from plaita.entrypoints.settings import Settings


def pay(says: str, version: str = "1", handler: str | None = None) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = [{"id": "e", "type": "end", "output": says}]
    if handler is not None:
        nodes.insert(0, {"id": "t", "type": "task", "handler": handler, "next": "e"})
    return {"flow_id": "pay", "version": version, "start": nodes[0]["id"], "nodes": nodes}


def write(path: Path, document: dict[str, Any] | str) -> None:
    path.write_text(document if isinstance(document, str) else json.dumps(document))


def container(*modules: str) -> Container:
    return build_container(Settings(backend="memory", handler_modules=modules))


async def latest_output(c: Container) -> Any:
    with tenant_scope("acme"):
        entry = await c.flows().lookup("pay")
    assert entry.owner == SHARED
    return entry.flow.version, entry.flow.to_document()["nodes"][-1]["output"]


async def test_the_first_scan_registers_every_file_for_every_tenant_quietly(tmp_path: Path) -> None:
    c = container()
    write(tmp_path / "pay.json", pay("'original'"))
    lines: list[str] = []

    scan = await FlowFolder(c, tmp_path, lines.append).scan()

    assert scan == Scan(("pay v1",), 1)
    assert lines == []  # the banner lists what the first scan registered
    assert await latest_output(c) == ("1", "'original'")


async def test_a_new_version_registers_and_becomes_the_latest(tmp_path: Path) -> None:
    c = container()
    write(tmp_path / "pay.json", pay("'one'"))
    lines: list[str] = []
    folder = FlowFolder(c, tmp_path, lines.append)
    await folder.scan()

    write(tmp_path / "pay.json", pay("'two'", version="2"))
    scan = await folder.scan()

    assert scan.registered == ("pay v2",)
    [line] = lines
    assert "registered pay v2" in line and "now the latest version of pay" in line
    assert await latest_output(c) == ("2", "'two'")


async def test_an_edit_under_a_registered_version_is_refused_by_name_and_the_stored_one_stays(
    tmp_path: Path,
) -> None:
    """A version never changes (S2): the line says which file, why, and to bump the version."""
    c = container()
    write(tmp_path / "pay.json", pay("'original'"))
    lines: list[str] = []
    folder = FlowFolder(c, tmp_path, lines.append)
    await folder.scan()

    write(tmp_path / "pay.json", pay("'edited'"))
    assert (await folder.scan()).registered == ()
    assert (await folder.scan()).registered == ()  # said once, not on every read

    [line] = lines
    assert "pay.json: FlowVersionConflictError" in line
    assert 'bump "version" in pay.json' in line
    assert await latest_output(c) == ("1", "'original'")


async def test_a_kept_store_already_holding_the_version_is_named_at_start(
    tmp_path: Path,
) -> None:
    """--redis-url, --db: a restarted dev process meets the versions it registered before."""
    c = container()
    write(tmp_path / "pay.json", pay("'original'"))
    await FlowFolder(c, tmp_path, [].append).scan()

    write(tmp_path / "pay.json", pay("'edited'"))
    lines: list[str] = []
    assert (await FlowFolder(c, tmp_path, lines.append).scan()).registered == ()
    [line] = lines
    assert "FlowVersionConflictError" in line and "stays in use" in line


async def test_a_broken_file_is_named_once_then_registered_once_fixed(tmp_path: Path) -> None:
    c = container()
    lines: list[str] = []
    folder = FlowFolder(c, tmp_path, lines.append)
    assert await folder.scan() == Scan((), 0)

    write(tmp_path / "pay.json", "{not json")
    await folder.scan()
    await folder.scan()
    write(tmp_path / "pay.json", pay("'fixed'"))
    assert (await folder.scan()).registered == ("pay v1",)

    broken, registered = lines
    assert "pay.json: InvalidFlowDocumentError" in broken and "read again" in broken
    assert "registered pay v1" in registered


async def test_a_handler_outside_the_allowlist_says_the_modules_are_fixed_until_a_restart(
    tmp_path: Path,
) -> None:
    c = container("app.tasks")
    lines: list[str] = []
    folder = FlowFolder(c, tmp_path, lines.append)
    await folder.scan()

    write(tmp_path / "pay.json", pay("'x'", handler="other.tasks:run"))
    await folder.scan()

    [line] = lines
    assert "HandlerNotAllowedError" in line and "restart it" in line


async def test_a_removed_file_is_said_and_what_it_registered_stays(tmp_path: Path) -> None:
    c = container()
    write(tmp_path / "pay.json", pay("'kept'"))
    write(tmp_path / "broken.json", "{")
    lines: list[str] = []
    folder = FlowFolder(c, tmp_path, lines.append)
    await folder.scan()
    lines.clear()

    (tmp_path / "pay.json").unlink()
    (tmp_path / "broken.json").unlink()
    await folder.scan()

    assert sorted(lines) == [
        f"plaita dev: {tmp_path / 'broken.json'} was removed",
        f"plaita dev: {tmp_path / 'pay.json'} was removed; pay v1 stays registered (a version "
        "never changes)",
    ]
    assert await latest_output(c) == ("1", "'kept'")


async def test_a_missing_folder_is_watched_for_files_that_appear(tmp_path: Path) -> None:
    folder_path = tmp_path / "flows"
    c = container()
    folder = FlowFolder(c, folder_path, [].append)
    assert await folder.scan() == Scan((), 0)

    folder_path.mkdir()
    write(folder_path / "pay.json", pay("'late'"))
    assert (await folder.scan()).registered == ("pay v1",)


def test_the_default_handler_modules_are_the_ones_the_flow_files_name(tmp_path: Path) -> None:
    write(tmp_path / "a.json", pay("'a'", handler="app.tasks:double"))
    write(tmp_path / "b.json", {**pay("'b'", handler="app.tasks:half"), "flow_id": "b"})
    write(tmp_path / "c.json", {**pay("'c'", handler="flows.steps:go"), "flow_id": "c"})
    write(tmp_path / "broken.json", "{")

    assert handler_modules_named(tmp_path) == {
        "app.tasks": ["a.json", "b.json"],
        "flows.steps": ["c.json"],
    }
    assert handler_modules_named(tmp_path / "missing") == {}


def test_a_module_the_files_name_that_cannot_be_imported_names_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnknownHandlerError) as raised:
        import_dev_handlers(["no_such_module_here"], {"no_such_module_here": ["a.json"]})
    message = str(raised.value)
    assert "'no_such_module_here'" in message and "a.json" in message
    assert "project's root" in message
