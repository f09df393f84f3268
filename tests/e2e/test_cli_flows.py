"""``plaita flows register|list|show`` per tenant, deployment-wide with ``--shared``,
immutable versions, the latest version and the handler check, on real Redis (C4, E1, S2,
W24; ADR 0011)."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from plaita.domain.flow import Flow
from plaita.entrypoints.cli import main

from ..unit.application.conftest import one_task

REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")
pytestmark = pytest.mark.skipif(
    not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"
)


def pay(says: str, version: str = "1", flow_id: str = "pay") -> dict[str, Any]:
    return {
        "flow_id": flow_id,
        "version": version,
        "start": "done",
        "nodes": [{"id": "done", "type": "end", "output": repr(says)}],
    }


def fingerprint(document: dict[str, Any]) -> str:
    return Flow.from_document(document).fingerprint


class Cli:
    def __init__(self, namespace: str, files: Path) -> None:
        self.namespace = namespace
        self.files = files

    def file(self, document: dict[str, Any]) -> str:
        path = self.files / f"{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps(document))
        return str(path)

    def invoke(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        assert REDIS_URL is not None
        result = CliRunner().invoke(
            main,
            [*args, "--redis-url", REDIS_URL],
            env={"PLAITA_NAMESPACE": self.namespace, "PLAITA_TENANT": "", **(env or {})},
            catch_exceptions=False,
        )
        return result.exit_code, result.output

    def json(self, *args: str, env: dict[str, str] | None = None) -> Any:
        code, out = self.invoke(*args, "--json", env=env)
        assert code == 0, out
        return json.loads(out)

    def register(self, *args: str, env: dict[str, str] | None = None) -> Any:
        """``flows register FILE --json`` of one file: its one item."""
        [registered] = self.json("flows", "register", *args, env=env)["items"]
        return registered


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    namespace = f"plaita-e2e-flows-{uuid.uuid4().hex[:12]}"
    yield Cli(namespace, tmp_path)
    client = redis.Redis.from_url(str(REDIS_URL))
    try:
        for key in client.scan_iter(match=f"{namespace}:*", count=1000):
            client.delete(key)
    finally:
        client.close()


def listed(items: list[dict[str, Any]]) -> list[tuple[str, str | None, bool, str]]:
    return [(i["flow_id"], i["tenant_id"], i["shared"], i["fingerprint"]) for i in items]


def test_flows_are_registered_for_a_tenant_or_deployment_wide_and_listed_as_whose(
    cli: Cli,
) -> None:
    original, acme = cli.file(pay("original")), cli.file(pay("acme"))

    shared = cli.register(original, "--shared")
    own = cli.register(acme, "--tenant", "acme")

    assert (shared["tenant_id"], shared["shared"], shared["created"]) == (None, True, True)
    assert (own["tenant_id"], own["shared"], own["created"]) == ("acme", False, True)
    assert listed(cli.json("flows", "list", "--tenant", "acme")["items"]) == [
        ("pay", "acme", False, fingerprint(pay("acme")))
    ]
    assert listed(cli.json("flows", "list")["items"]) == [
        ("pay", None, True, fingerprint(pay("original")))
    ]
    assert listed(cli.json("flows", "list", "--shared")["items"]) == [
        ("pay", None, True, fingerprint(pay("original")))
    ]
    shown = cli.json("flows", "show", "pay", "--tenant", "acme")
    assert (shown["tenant_id"], shown["fingerprint"]) == ("acme", fingerprint(pay("acme")))
    shown = cli.json("flows", "show", "pay", "--shared", env={"PLAITA_TENANT": "acme"})
    assert shown["fingerprint"] == fingerprint(pay("original"))
    code, out = cli.invoke("flows", "list", "--tenant", "acme")
    assert code == 0 and "pay  version 1" in out and "tenant 'acme'" in out


def test_the_tenant_comes_from_plaita_tenant_and_shared_overrides_it(cli: Cli) -> None:
    acme = {"PLAITA_TENANT": "acme"}
    registered = cli.register(cli.file(pay("acme")), env=acme)
    shared = cli.register(cli.file(pay("all")), "--shared", env=acme)

    assert registered["tenant_id"] == "acme"
    assert shared["shared"] is True


def test_the_same_file_again_changes_nothing_and_another_document_is_refused(
    cli: Cli,
) -> None:
    """S2: a registered version never changes; the conflict names both fingerprints."""
    cli.register(cli.file(pay("one")), "--shared")
    cli.register(cli.file(pay("two", version="2")), "--shared")

    code, out = cli.invoke("flows", "register", cli.file(pay("one")), "--shared")
    assert code == 0 and "already registered deployment-wide" in out
    assert "nothing changed" in out
    again = cli.register(cli.file(pay("one")), "--shared")
    assert again["created"] is False

    code, out = cli.invoke("flows", "register", cli.file(pay("rogue")), "--shared")
    assert code == 1 and "FlowVersionConflictError" in out
    assert fingerprint(pay("one")) in out and fingerprint(pay("rogue")) in out
    latest = cli.json("flows", "show", "pay", "--shared")
    assert latest["version"] == "2"
    assert cli.json("flows", "show", "pay", "--shared", "--version", "1")["fingerprint"] == (
        fingerprint(pay("one"))
    )


def test_a_conflict_in_one_of_several_files_registers_none_of_them(cli: Cli) -> None:
    cli.register(cli.file(pay("one")), "--tenant", "acme")

    code, out = cli.invoke(
        "flows",
        "register",
        cli.file(pay("new", flow_id="ship")),
        cli.file(pay("rogue")),
        "--tenant",
        "acme",
    )

    assert code == 1 and "FlowVersionConflictError" in out
    assert [i["flow_id"] for i in cli.json("flows", "list", "--tenant", "acme")["items"]] == ["pay"]


def test_a_tenant_never_sees_another_tenants_flow(cli: Cli) -> None:
    cli.register(cli.file(pay("acme")), "--tenant", "acme")

    assert cli.json("flows", "list")["items"] == []
    code, out = cli.invoke("flows", "show", "pay")
    assert code == 1 and "UnknownFlowError" in out and "tenant 'default' or deployment-wide" in out


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("--shared", "--tenant", "acme"), "give one of them"),
        (("--tenant", "a:b"), "'a:b'"),
    ],
)
def test_an_impossible_owner_is_a_usage_error(
    cli: Cli, args: tuple[str, ...], problem: str
) -> None:
    for command in (("register", cli.file(pay("x"))), ("list",), ("show", "pay")):
        code, out = cli.invoke("flows", *command, *args)
        assert code == 2 and problem in out, (command, out)


def test_a_worker_whose_flows_folder_changed_a_registered_version_refuses_to_start(
    cli: Cli, tmp_path: Path
) -> None:
    """Its --flows are deployment-wide; an edited document under a registered version is
    named (both fingerprints) instead of being run or silently ignored."""
    cli.register(cli.file(pay("original")), "--shared")
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "pay.json").write_text(json.dumps(pay("edited")))

    code, out = cli.invoke("worker", "--flows", str(folder), "--read-block-ms", "100")

    assert code == 1 and "FlowVersionConflictError" in out
    assert fingerprint(pay("original")) in out and fingerprint(pay("edited")) in out


# --- which version is the latest (S2) ---------------------------------------------------------


def test_an_older_version_registered_later_does_not_become_latest_unless_chosen(
    cli: Cli,
) -> None:
    cli.json("flows", "register", cli.file(pay("two", version="2")), "--shared")

    code, out = cli.invoke("flows", "register", cli.file(pay("one")), "--shared")

    assert code == 0, out
    assert "registered pay version 1" in out
    assert "latest stays version 2 (higher); pass --latest to make it the latest" in out
    assert cli.json("flows", "show", "pay", "--shared")["version"] == "2"
    assert [i["version"] for i in cli.json("flows", "list", "--shared")["items"]] == ["2"]

    rollback = cli.register(cli.file(pay("one")), "--shared", "--latest")

    assert (rollback["created"], rollback["is_latest"]) == (False, True)
    assert (rollback["latest_version"], rollback["latest_reason"]) == ("1", "chosen")
    assert cli.json("flows", "show", "pay", "--shared")["version"] == "1"
    code, out = cli.invoke("flows", "register", cli.file(pay("ten", version="10")), "--shared")
    assert code == 0 and "it is the latest (higher than version 1)" in out


def test_latest_with_two_versions_of_one_flow_is_a_usage_error(cli: Cli) -> None:
    code, out = cli.invoke(
        "flows",
        "register",
        cli.file(pay("one")),
        cli.file(pay("two", version="2")),
        "--shared",
        "--latest",
    )

    assert code == 2 and "pay: versions 1, 2" in out
    assert cli.json("flows", "list", "--shared")["items"] == []


# --- the whole handler reference is checked (E1) -----------------------------------------------


@pytest.fixture
def handler_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A handler module in the current directory (where the commands import from), with a
    name of its own so no other test has imported it."""
    name = f"e2e_handlers_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "def always_busy(params, ctx):\n    return 'busy'\n\n"
        "def charge(params, ctx):\n    return 'charged'\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the cwd the command adds goes again
    return name


def test_a_misspelt_function_is_refused_by_name_and_nothing_is_registered(
    cli: Cli, handler_module: str
) -> None:
    good = cli.file(one_task(f"{handler_module}:charge", flow_id="fine"))
    typo = cli.file(one_task(f"{handler_module}:alwys_busy"))

    code, out = cli.invoke("flows", "register", good, typo, "--handler-modules", handler_module)

    assert code == 1, out
    assert "UnknownHandlerError" in out
    assert f"handler '{handler_module}:alwys_busy'" in out and "node 'work'" in out
    assert "did you mean 'always_busy'?" in out
    assert "its public callables: always_busy, charge" in out
    assert cli.json("flows", "list")["items"] == []
    registered = cli.register(
        cli.file(one_task(f"{handler_module}:always_busy")),
        "--handler-modules",
        handler_module,
    )
    assert registered["created"] is True


def test_a_handler_module_that_cannot_be_imported_is_refused_saying_why(
    cli: Cli, handler_module: str
) -> None:
    code, out = cli.invoke(
        "flows",
        "register",
        cli.file(one_task("e2e_no_such_module:run")),
        "--handler-modules",
        f"{handler_module},e2e_no_such_module",
    )

    assert code == 1, out
    assert (
        "UnknownHandlerError: flow 'busy': handlers not found: node 'work': handler "
        "'e2e_no_such_module:run': module 'e2e_no_such_module' cannot be imported (No module "
        "named 'e2e_no_such_module'); install it where this process runs, or fix the module name"
    ) in out
    assert cli.json("flows", "list")["items"] == []


def test_a_module_outside_the_allowlist_is_refused_as_before_and_not_imported(
    cli: Cli, handler_module: str
) -> None:
    code, out = cli.invoke(
        "flows",
        "register",
        cli.file(one_task(f"{handler_module}:alwys_busy")),
        "--handler-modules",
        "other.module",
    )

    assert code == 1 and "HandlerNotAllowedError" in out
    assert handler_module not in sys.modules


def test_without_handler_modules_nothing_is_checked_or_imported(
    cli: Cli, handler_module: str
) -> None:
    """The allowlist of ``flows register`` is optional: without it, no handler check."""
    registered = cli.register(cli.file(one_task(f"{handler_module}:nope")))

    assert registered["created"] is True
    assert handler_module not in sys.modules


def test_a_worker_whose_flows_folder_misspells_a_function_refuses_to_start(
    cli: Cli, tmp_path: Path, handler_module: str
) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "busy.json").write_text(json.dumps(one_task(f"{handler_module}:alwys_busy")))

    code, out = cli.invoke(
        "worker",
        "--flows",
        str(folder),
        "--handler-modules",
        handler_module,
        "--read-block-ms",
        "100",
    )

    assert code == 1, out
    assert "UnknownHandlerError" in out and "did you mean 'always_busy'?" in out
    assert cli.json("flows", "list", "--shared")["items"] == []
