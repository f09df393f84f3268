"""`plaita run`: a flow in-process, its result or one JSON line per node, named failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from plaita.entrypoints.cli import main

from ..contract.http_server import serve

REPO_ROOT = Path(__file__).resolve().parents[2]
APPROVAL = "examples/flows/approval.json"


@pytest.fixture(autouse=True)
def at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)  # handler modules are imported from the cwd


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["run", *args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_run_prints_the_result_and_exits_zero() -> None:
    code, out, err = run(APPROVAL, "--input", '{"amount": 30}')
    assert code == 0, err
    assert json.loads(out) == {"amount": 30, "approved": True, "outcome": "shipped"}
    assert "trusting the handler modules" in err


def test_run_stream_prints_one_json_line_per_node() -> None:
    code, out, _ = run(
        APPROVAL,
        "--input",
        '{"amount": 5000}',
        "--event",
        'approval_decision={"approved": false}',
        "--handler-modules",
        "examples.handlers",
        "--stream",
    )
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["node_id"] for line in lines] == [
        "request",
        "check",
        "wait_decision",
        "record_decision",
        "route",
        "reject",
        "done",
    ]
    assert lines[-1]["is_end"] and lines[-1]["result"]["outcome"] == "rejected"


def test_run_failure_exits_one_naming_the_node_and_the_error() -> None:
    code, _, err = run(APPROVAL, "--input", '{"amount": -1}')
    assert code == 1
    assert "at node 'request'" in err and "NodeExecutionError" in err


def test_run_wait_that_nothing_can_satisfy_fails_instead_of_hanging() -> None:
    code, _, err = run(APPROVAL, "--input", '{"amount": 5000}')
    assert code == 1 and "UnboundedWaitError" in err and "--event" in err


def test_run_refuses_handlers_outside_an_explicit_allowlist() -> None:
    code, _, err = run(APPROVAL, "--handler-modules", "other.mod")
    assert code == 1 and "HandlerNotAllowedError" in err


def test_run_refuses_a_malformed_event_option() -> None:
    code, _, err = run(APPROVAL, "--event", "no-equals-sign")
    assert code == 2 and "TYPE=JSON" in err


def test_run_zero_execution_deadline_means_zero_budget(tmp_path: Path) -> None:
    """E5: without a flow or caller timeout the default deadline applies, and 0 is no time."""
    document = json.loads((REPO_ROOT / APPROVAL).read_text())
    del document["timeout"]
    flow_file = tmp_path / "untimed.json"
    flow_file.write_text(json.dumps(document))
    code, _, err = run(
        str(flow_file), "--input", '{"amount": 1}', env={"PLAITA_EXECUTION_DEADLINE_SECONDS": "0"}
    )
    assert code == 1 and "ExecutionDeadlineError" in err


def test_run_flow_timeout_wins_over_the_default_deadline() -> None:
    code, _, _ = run(
        APPROVAL, "--input", '{"amount": 1}', env={"PLAITA_EXECUTION_DEADLINE_SECONDS": "0"}
    )
    assert code == 0


def http_flow_file(tmp_path: Path, url: str) -> str:
    flow = {
        "flow_id": "http_run",
        "start": "call",
        "nodes": [
            {"id": "call", "type": "http", "url": url, "next": "done"},
            {"id": "done", "type": "end", "output": "NODE['call']['body']"},
        ],
    }
    path = tmp_path / "http_run.json"
    path.write_text(json.dumps(flow))
    return str(path)


def test_run_calls_an_http_node_against_a_real_server(tmp_path: Path) -> None:
    """E11 in-process: the same node and client as on a worker."""
    with serve() as server:
        code, out, err = run(http_flow_file(tmp_path, server.url("/json")))
    assert code == 0, err
    assert json.loads(out) == {"ok": True}


def test_run_under_the_block_private_setting_refuses_a_loopback_target(tmp_path: Path) -> None:
    with serve() as server:
        code, _, err = run(
            http_flow_file(tmp_path, server.url("/json")), env={"PLAITA_HTTP_BLOCK_PRIVATE": "1"}
        )
        assert server.requests == []
    assert code == 1
    assert "HttpTargetBlockedError" in err and "a loopback address" in err
