"""The console's parts without HTTP: the token table (C3), masking secrets, the timeline and
the flow graph views, and where ``plaita console`` takes its tokens from."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from plaita.domain.execution import (
    ExecutionError,
    ExecutionState,
    ExecutionStatus,
    NodeTiming,
    Suspension,
)
from plaita.domain.flow import Flow
from plaita.entrypoints.cli_console import load_tokens
from plaita.entrypoints.console.app import create_app
from plaita.entrypoints.console.auth import (
    ConsoleTokensError,
    Role,
    TokenTable,
)
from plaita.entrypoints.console.settings_view import mask_setting, mask_url
from plaita.entrypoints.console.views import edges_of, timeline
from plaita.entrypoints.container import Container
from plaita.entrypoints.settings import Settings

from .conftest import APPROVAL_FLOW, TOKENS

GOOD = {"token": "t" * 20, "name": "ops", "role": "operator", "tenants": ["acme", "beta"]}


# --- tokens ---------------------------------------------------------------------------------


def test_a_token_table_finds_each_token_and_nothing_else() -> None:
    table = TokenTable.from_entries(list(TOKENS.values()), source="test")
    admin = table.lookup(TOKENS["admin"]["token"])
    assert admin is not None
    assert admin.name == "root"
    assert admin.role is Role.ADMIN
    assert admin.may_act_for("anything")
    acme = table.lookup(TOKENS["acme"]["token"])
    assert acme is not None
    assert acme.may_act_for("acme")
    assert not acme.may_act_for("default")
    for near in ("", TOKENS["admin"]["token"][:-1], TOKENS["admin"]["token"] + " ", "x" * 24):
        assert table.lookup(near) is None


def test_roles_are_ordered_viewer_operator_admin() -> None:
    assert Role.VIEWER < Role.OPERATOR < Role.ADMIN
    table = TokenTable.from_entries([{**GOOD, "role": "VIEWER"}], source="test")
    assert next(iter(table)).role is Role.VIEWER


def test_a_token_never_shows_its_secret() -> None:
    token = next(iter(TokenTable.from_entries([GOOD], source="test")))
    assert "t" * 20 not in repr(token)
    assert token.describe() == {"name": "ops", "role": "operator", "tenants": ["acme", "beta"]}


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({**GOOD, "token": "short"}, "at least 16 characters"),
        ({**GOOD, "role": "root"}, "role must be one of viewer, operator, admin"),
        ({**GOOD, "tenants": []}, "tenants"),
        ({**GOOD, "tenants": ["*", "acme"]}, "'*' means every tenant and must stand alone"),
        ({**GOOD, "tenants": ["a:b"]}, "may hold only letters"),
        ({**GOOD, "name": ""}, "name"),
        ({**GOOD, "scope": "all"}, "scope: Extra inputs are not permitted"),
    ],
)
def test_an_unusable_token_entry_is_named(entry: dict[str, object], problem: str) -> None:
    with pytest.raises(ConsoleTokensError, match="entry 0") as raised:
        TokenTable.from_entries([entry], source="PLAITA_CONSOLE_TOKENS")
    assert problem in str(raised.value)
    assert "PLAITA_CONSOLE_TOKENS" in str(raised.value)


def test_a_rejected_token_is_not_echoed_in_the_error() -> None:
    with pytest.raises(ConsoleTokensError) as raised:
        TokenTable.from_entries([{**GOOD, "token": "s3cr3t"}], source="test")
    assert "s3cr3t" not in str(raised.value)


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(ConsoleTokensError) as raised:
        TokenTable.from_entries([{**GOOD, "role": "x"}, {**GOOD, "tenants": []}], source="test")
    assert "entry 0 ('ops')" in str(raised.value)
    assert "entry 1 ('ops')" in str(raised.value)


def test_two_tokens_may_not_share_a_secret() -> None:
    with pytest.raises(ConsoleTokensError, match="share one secret"):
        TokenTable.from_entries([GOOD, {**GOOD, "name": "other"}], source="test")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[{", "not valid JSON"),
        ('{"token": "x"}', "must be a JSON list of objects"),
        ('["abc"]', "must be a JSON list of objects"),
    ],
)
def test_tokens_json_that_is_not_a_list_of_objects_is_named(text: str, problem: str) -> None:
    with pytest.raises(ConsoleTokensError, match=problem):
        TokenTable.from_json(text, source="test")


def test_create_app_refuses_to_run_without_tokens(container: Container) -> None:
    with pytest.raises(ConsoleTokensError, match="nobody could use it"):
        create_app(container, tokens=[])


# --- where `plaita console` takes its tokens ---------------------------------------------------


def test_tokens_come_from_the_file_before_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps([GOOD]))
    settings = Settings(console_tokens=json.dumps([TOKENS["admin"]]))
    assert [t.name for t in load_tokens(settings, path)] == ["ops"]
    assert [t.name for t in load_tokens(settings, None)] == ["root"]


def test_no_tokens_at_all_is_a_named_error_saying_what_to_set() -> None:
    with pytest.raises(ConsoleTokensError, match="--tokens-file FILE or set PLAITA_CONSOLE_TOKENS"):
        load_tokens(Settings(), None)


def test_an_unreadable_tokens_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConsoleTokensError, match="cannot read the tokens file"):
        load_tokens(Settings(), tmp_path / "missing.json")


# --- secrets in /api/v1/config ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:pw@host:6379/1", "redis://:***@host:6379/1"),
        ("rediss://user:pw@host/0", "rediss://user:***@host/0"),
        ("https://hooks.example/x?token=abc&a=b", "https://hooks.example/x?token=***&a=***"),
        ("redis://host:notaport/0", "***"),
    ],
)
def test_urls_lose_their_passwords_and_query_values(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_settings_named_like_secrets_are_masked() -> None:
    assert mask_setting("console_tokens", "[...]") == "***"
    assert mask_setting("redis_password", "pw") == "***"
    assert mask_setting("dlq_key", "plaita:{q}:dlq") == "plaita:{q}:dlq"
    assert mask_setting("handler_modules", ("a", "b")) == ["a", "b"]
    assert mask_setting("dlq_key", None) is None


# --- the timeline ---------------------------------------------------------------------------


def _state(**changes: object) -> ExecutionState:
    base = ExecutionState.new(
        execution_id="x",
        flow_id="f",
        flow_version="1",
        fingerprint="",
        start_node_id="a",
        input={},
        now_ms=1000,
    )
    return attrs.evolve(base, **changes)  # type: ignore[arg-type]


def test_the_timeline_follows_node_timings_in_start_order() -> None:
    state = _state(
        status=ExecutionStatus.SUSPENDED,
        next_node_id="wait",
        suspension=Suspension("wait", "sub-1"),
        node_timings={
            "wait": NodeTiming(1300, None),
            "a": NodeTiming(1100, 1200),
            "b": NodeTiming(1200, 1250),
        },
    )
    assert [(e.node_id, e.started_at_ms, e.ended_at_ms, e.status) for e in timeline(state)] == [
        ("a", 1100, 1200, "completed"),
        ("b", 1200, 1250, "completed"),
        ("wait", 1300, None, "waiting"),
    ]


def test_the_timeline_marks_the_failed_node() -> None:
    state = _state(
        status=ExecutionStatus.ERROR,
        error=ExecutionError(1, "boom", "b"),
        node_timings={"a": NodeTiming(1100, 1200), "b": NodeTiming(1200, 1210)},
    )
    assert [e.status for e in timeline(state)] == ["completed", "failed"]


def test_a_running_execution_shows_its_open_node_even_before_its_timing() -> None:
    state = _state(
        updated_at_ms=1500,
        next_node_id="b",
        node_results={"a": 1},
        node_timings={"a": NodeTiming(1100, 1200)},
    )
    entries = timeline(state)
    assert [(e.node_id, e.status) for e in entries] == [("a", "completed"), ("b", "running")]
    assert entries[-1].started_at_ms == 1500
    assert entries[-1].ended_at_ms is None


def test_an_old_checkpoint_without_timings_falls_back_to_node_results() -> None:
    state = _state(
        status=ExecutionStatus.ERROR,
        node_results={"a": 1, "b": 2},
        error=ExecutionError(1, "boom", "c"),
        next_node_id="c",
    )
    assert [(e.node_id, e.started_at_ms, e.status) for e in timeline(state)] == [
        ("a", None, "completed"),
        ("b", None, "completed"),
        ("c", None, "failed"),
    ]


# --- the graph ------------------------------------------------------------------------------


def test_every_target_of_every_node_is_an_edge_with_its_role() -> None:
    flow = Flow.from_json(APPROVAL_FLOW.read_text())
    for node in flow.nodes():
        assert sorted(target for target, _ in edges_of(node)) == sorted(node.targets())
    check = flow.node("check")
    assert edges_of(check) == [("wait_decision", "then"), ("auto_approve", "else")]
