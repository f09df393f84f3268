"""``plaita flows register|list|show`` per tenant, deployment-wide with ``--shared``, and
immutable versions, on real Redis (C4, S2, W24; ADR 0011)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from plaita.domain.flow import Flow
from plaita.entrypoints.cli import main

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
