"""`plaita hooks list|show|create|delete` on real Redis (V10, C4): a secret goes in through
standard input and never comes out; bad input is refused before anything connects."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from plaita.entrypoints.cli import main

from ..console.test_console_redis import namespace  # noqa: F401

REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")
SECRET = "whsec-0123456789abcdef"
requires_redis = pytest.mark.skipif(
    not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"
)


def invoke(ns: str, *args: str, stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(
        main,
        [*args, "--redis-url", REDIS_URL or "redis://127.0.0.1:1/0"],
        input=stdin,
        env={"PLAITA_NAMESPACE": ns, "PLAITA_TENANT": None, "PLAITA_HOOKS_FILE": None},
        catch_exceptions=False,
    )
    return result.exit_code, result.output


CREATE = (
    "hooks",
    "create",
    "approvals",
    "--event-type",
    "approval_decision",
    "--correlation-id-pointer",
    "/execution_id",
)


@requires_redis
@pytest.mark.redis
def test_create_list_show_and_delete_a_hook(namespace: str) -> None:  # noqa: F811
    code, output = invoke(namespace, *CREATE, "--secret-stdin", "--json", stdin=SECRET + "\n")
    assert code == 0, output
    assert json.loads(output)["secret_source"] == "stored"
    code, output = invoke(namespace, *CREATE, "--secret-ref", "env:OTHER")
    assert code == 1
    assert "HookConflictError" in output

    code, output = invoke(namespace, "hooks", "list")
    assert code == 0
    assert output.startswith("approvals  approval_decision  correlation=/execution_id")
    code, output = invoke(namespace, "hooks", "show", "approvals", "--json")
    assert code == 0
    assert SECRET not in output
    assert json.loads(output)["source"] == "api"
    code, output = invoke(namespace, "hooks", "list", "--tenant", "acme", "--json")
    assert json.loads(output) == {"items": []}

    assert invoke(namespace, "hooks", "delete", "approvals")[0] == 0
    code, output = invoke(namespace, "hooks", "show", "approvals")
    assert code == 1
    assert "UnknownHookError" in output


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((), "exactly one of --secret-stdin and --secret-ref"),
        (("--secret-stdin", "--secret-ref", "env:X"), "exactly one of"),
        (("--secret-ref", "vault:x"), "not a secret reference"),
        (("--secret-ref", "env:X", "--data-pointer", "data"), "not a JSON pointer"),
    ],
)
def test_bad_input_exits_2_before_anything_connects(args: tuple[str, ...], named: str) -> None:
    result = CliRunner().invoke(
        main,
        [*CREATE, *args, "--redis-url", "redis://127.0.0.1:1/0"],
        env={"PLAITA_NAMESPACE": "plaita-e2e-unused"},
    )
    assert result.exit_code == 2
    assert named in result.output


def test_a_short_secret_on_stdin_is_refused_without_echoing_it() -> None:
    result = CliRunner().invoke(
        main,
        [*CREATE, "--secret-stdin", "--redis-url", "redis://127.0.0.1:1/0"],
        input="hunter2-short\n",
        env={"PLAITA_NAMESPACE": "plaita-e2e-unused"},
    )
    assert result.exit_code == 2
    assert "at least 16" in result.output
    assert "hunter2" not in result.output
