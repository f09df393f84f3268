"""Bad input at the command line: a named, readable error, a non-zero exit, nothing written."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from plaita.entrypoints.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]
APPROVAL = REPO_ROOT / "examples" / "flows" / "approval.json"
REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")
UNREACHABLE = "redis://127.0.0.1:1/0"
requires_redis = pytest.mark.skipif(
    not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"
)


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.output


def write_flow(tmp_path: Path, document: object) -> str:
    path = tmp_path / "flow.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def approval_with(**change: object) -> dict[str, object]:
    document = json.loads(APPROVAL.read_text())
    document.update(change)
    return document


def test_invalid_flow_json_is_refused_by_name(tmp_path: Path) -> None:
    code, out = invoke(
        "flows", "register", write_flow(tmp_path, "{nope"), "--redis-url", UNREACHABLE
    )
    assert code != 0 and "InvalidFlowDocumentError" in out and "not valid JSON" in out


def test_unknown_node_target_is_refused_by_name(tmp_path: Path) -> None:
    document = approval_with()
    document["nodes"][0]["next"] = "nowhere"  # type: ignore[index]
    code, out = invoke(
        "flows", "register", write_flow(tmp_path, document), "--redis-url", UNREACHABLE
    )
    assert code != 0 and "UnknownNodeTargetError" in out and "'nowhere'" in out


def test_empty_event_type_in_a_flow_is_refused_by_name(tmp_path: Path) -> None:
    document = approval_with()
    document["nodes"][2]["event_type"] = " "  # type: ignore[index]
    code, out = invoke(
        "flows", "register", write_flow(tmp_path, document), "--redis-url", UNREACHABLE
    )
    assert code != 0 and "EmptyEventTypeError" in out


def test_handler_outside_the_allowlist_is_refused_before_anything_runs() -> None:
    code, out = invoke(
        "flows",
        "register",
        str(APPROVAL),
        "--handler-modules",
        "other.handlers",
        "--redis-url",
        UNREACHABLE,
    )
    assert code != 0 and "HandlerNotAllowedError" in out and "examples.handlers" in out


def test_malformed_input_json_is_refused_before_connecting() -> None:
    code, out = invoke(
        "executions", "start", "approval", "--input", "{amount: 1", "--redis-url", UNREACHABLE
    )
    assert code == 2 and "--input" in out and "not valid JSON" in out


def test_input_that_is_not_an_object_is_refused() -> None:
    code, out = invoke(
        "executions", "start", "approval", "--input", "[1]", "--redis-url", UNREACHABLE
    )
    assert code == 2 and "must be a JSON object" in out


def test_unreachable_redis_names_the_url() -> None:
    code, out = invoke("executions", "show", "x", "--redis-url", UNREACHABLE)
    assert code == 1 and f"cannot reach Redis at {UNREACHABLE}" in out


def test_worker_refuses_an_invalid_setting_with_every_problem_listed() -> None:
    code, out = invoke(
        "worker", "--redis-url", UNREACHABLE, "--consumer-group", "", "--queue-name", ""
    )
    assert code == 2 and "consumer_group" in out and "queue_name" in out


@requires_redis
def test_unknown_flow_id_on_start_is_refused_by_name() -> None:
    assert REDIS_URL is not None
    env = {"PLAITA_NAMESPACE": f"plaita-e2e-{uuid.uuid4().hex[:8]}"}
    code, out = invoke("executions", "start", "no-such-flow", "--redis-url", REDIS_URL, env=env)
    assert code == 1 and "UnknownFlowError" in out and "'no-such-flow'" in out


@requires_redis
def test_empty_event_type_on_publish_is_refused_by_name() -> None:
    assert REDIS_URL is not None
    code, out = invoke("events", "publish", "", "--correlation-id", "x", "--redis-url", REDIS_URL)
    assert code == 1 and "InvalidEventError" in out and "event_type" in out


def test_demo_runs_both_approval_executions_to_completion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Quickstart's first command, in-process on the memory twin."""
    monkeypatch.chdir(REPO_ROOT)
    code, out = invoke("demo")
    assert code == 0, out
    assert out.count("completed") >= 2
    assert "waits for an approval_decision" in out


# --- R4, C4: JSON limits and the id rule, exit 2 before connecting ------------------------


def deep_object(depth: int) -> str:
    return '{"k": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize("depth", [300, 10_000])
@pytest.mark.parametrize(
    ("command", "option", "limit"),
    [
        (("executions", "start", "approval"), "--input", "execution input depth limit"),
        (("events", "publish", "t", "--correlation-id", "c"), "--data", "event data depth limit"),
    ],
)
def test_a_document_over_the_depth_limit_exits_2_naming_the_option_and_the_limit(
    command: tuple[str, ...], option: str, limit: str, depth: int
) -> None:
    """R4: 300 levels used to be sent (and dead-lettered by the worker); 10,000 levels
    crashed the CLI with RecursionError."""
    code, out = invoke(*command, option, deep_object(depth), "--redis-url", UNREACHABLE)
    assert code == 2, out
    assert option in out and limit in out


def test_run_refuses_input_and_event_data_over_the_depth_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO_ROOT)
    code, out = invoke("run", str(APPROVAL), "--input", deep_object(10_000))
    assert code == 2 and "--input" in out and "execution input depth limit" in out
    code, out = invoke("run", str(APPROVAL), "--event", f"approval_decision={deep_object(100)}")
    assert code == 2 and "--event" in out and "event data depth limit" in out


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("executions", "start", "approval", "--execution-id", "../../etc"), "execution id"),
        (("executions", "start", "app/roval"), "flow id"),
        (("executions", "show", "../../etc"), "execution id"),
        (("executions", "cancel", "has space"), "execution id"),
        (("executions", "retry", "{tag}"), "execution id"),
        (("executions", "delete", "."), "execution id"),
        (("events", "show", "a/b"), "event id"),
        (("flows", "show", "a b"), "flow id"),
    ],
)
def test_an_id_outside_the_id_rule_exits_2_before_connecting(
    args: tuple[str, ...], named: str
) -> None:
    """R4: `../../etc` used to start and complete, and was then unaddressable."""
    code, out = invoke(*args, "--redis-url", UNREACHABLE)
    assert code == 2, out
    assert named in out and "may hold only letters" in out


@requires_redis
def test_an_event_too_large_with_its_correlation_id_exits_2_naming_the_limit() -> None:
    """R4: the data fits, but the carrier that would embed the event would not."""
    assert REDIS_URL is not None
    env = {"PLAITA_NAMESPACE": f"plaita-e2e-{uuid.uuid4().hex[:8]}"}
    data = json.dumps({"blob": "x" * (1024 * 1024 - 100)})
    code, out = invoke(
        "events",
        "publish",
        "t",
        "--correlation-id",
        "c" * 1000,
        "--data",
        data,
        "--redis-url",
        REDIS_URL,
        env=env,
    )
    assert code == 2, out
    assert "PayloadTooLargeError" in out and "event data size limit" in out
