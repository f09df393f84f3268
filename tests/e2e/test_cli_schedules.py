"""``plaita schedules create|list|show|pause|resume|delete|trigger`` on real Redis (W22, C4).

Output for people and ``--json``; a value a schedule cannot take is a usage error naming its
flag (exit 2, before anything connects); a refusal is one line naming the error (exit 1).
"""

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

from plaita.entrypoints.cli import main

REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")
pytestmark = pytest.mark.skipif(
    not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"
)

QUICK = {
    "flow_id": "quick",
    "version": "1",
    "start": "done",
    "nodes": [{"id": "done", "type": "end"}],
}


class Cli:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def invoke(self, *args: str, url: str | None = None) -> tuple[int, str, str]:
        result = CliRunner().invoke(
            main,
            [*args, "--redis-url", url or str(REDIS_URL)],
            env={"PLAITA_NAMESPACE": self.namespace, "PLAITA_TENANT": ""},
            catch_exceptions=False,
        )
        return result.exit_code, result.stdout, result.stderr

    def json(self, *args: str) -> Any:
        code, out, err = self.invoke(*args, "--json")
        assert code == 0, out + err
        return json.loads(out)


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    namespace = f"plaita-e2e-sched-{uuid.uuid4().hex[:12]}"
    commands = Cli(namespace)
    flow = tmp_path / "quick.json"
    flow.write_text(json.dumps(QUICK))
    code, out, err = commands.invoke("flows", "register", str(flow), "--shared")
    assert code == 0, out + err
    yield commands
    client = redis.Redis.from_url(str(REDIS_URL))
    try:
        keys = list(client.scan_iter(match=f"{namespace}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def test_create_list_show_pause_resume_trigger_and_delete(cli: Cli) -> None:
    code, out, _ = cli.invoke(
        "schedules", "create", "nightly", "--flow", "quick", "--cron", "30 2 * * *",
        "--timezone", "Europe/Berlin", "--input", '{"day": "mon"}', "--overlap", "skip",
        "--catch-up", "all",
    )  # fmt: skip
    assert code == 0 and "created schedule nightly (active) of flow quick" in out, out
    assert "next run:" in out and "Europe/Berlin" in out

    [listed] = cli.json("schedules", "list")["items"]
    assert (listed["schedule_id"], listed["overlap"], listed["catch_up"]) == (
        "nightly",
        "skip",
        "all",
    )
    assert listed["input"] == {"day": "mon"} and listed["next_run_ms"] is not None

    shown = cli.json("schedules", "show", "nightly", "--count", "3")
    assert len(shown["next_runs_ms"]) == 3
    code, out, _ = cli.invoke("schedules", "show", "nightly")
    assert code == 0 and "next runs:" in out and "in Europe/Berlin" in out
    assert out.count("Europe/Berlin\n") >= 5  # each next run, in the schedule's zone too

    assert cli.json("schedules", "pause", "nightly")["paused"] is True
    code, out, _ = cli.invoke("schedules", "list")
    assert code == 0 and "nightly  paused  quick" in out
    assert cli.json("schedules", "resume", "nightly")["paused"] is False

    triggered = cli.json("schedules", "trigger", "nightly")
    assert triggered["dedup_key"].startswith("sched:nightly:manual:")
    execution = cli.json("executions", "show", triggered["execution_id"])
    assert execution["status"] == "pending" and execution["input"] == {"day": "mon"}

    assert cli.json("schedules", "delete", "nightly") == {"schedule_id": "nightly", "deleted": True}
    code, _, err = cli.invoke("schedules", "show", "nightly")
    assert code == 1 and err.strip().startswith("Error: UnknownScheduleError: no schedule")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--cron", "0 3 * *"), "--cron"),
        (("--cron", "R * * * *"), "--cron"),
        (("--cron", "0 3 * * *", "--timezone", "Mars/Base"), "--timezone"),
        (("--cron", "0 3 * * *", "--input", "[1]"), "--input"),
        (("--cron", "0 3 * * *", "--input", "{nope"), "--input"),
        (("--cron", "0 3 * * *", "--overlap", "queue"), "--overlap"),
        (("--cron", "0 3 * * *", "--catch-up", "some"), "--catch-up"),
        (("--cron", "0 3 * * *", "--priority", "urgent"), "--priority"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_its_flag_before_anything_connects(
    cli: Cli, args: tuple[str, ...], flag: str
) -> None:
    # An unreachable Redis: the flag is refused before any connection is tried.
    code, _, err = cli.invoke(
        "schedules", "create", "nightly", "--flow", "quick", *args, url="redis://127.0.0.1:1/0"
    )

    assert code == 2, err
    assert flag in err and "Traceback" not in err


def test_a_cron_that_never_comes_is_refused_naming_the_flag(cli: Cli) -> None:
    code, _, err = cli.invoke(
        "schedules", "create", "feb30", "--flow", "quick", "--cron", "0 0 30 2 *"
    )

    assert code == 2 and "--cron" in err and "names no time after now" in err


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("create", "x", "--flow", "nowhere", "--cron", "0 3 * * *"), "UnknownFlowError"),
        (("pause", "nowhere"), "UnknownScheduleError"),
        (("resume", "nowhere"), "UnknownScheduleError"),
        (("trigger", "nowhere"), "UnknownScheduleError"),
        (("delete", "nowhere"), "UnknownScheduleError"),
    ],
)
def test_a_refusal_is_one_line_naming_the_error(
    cli: Cli, args: tuple[str, ...], error: str
) -> None:
    code, _, err = cli.invoke("schedules", *args)

    assert code == 1
    assert err.count("\n") == 1 and err.startswith(f"Error: {error}: ")


def test_an_id_taken_is_refused_and_a_bad_id_is_a_usage_error(cli: Cli) -> None:
    assert cli.invoke("schedules", "create", "n", "--flow", "quick", "--cron", "0 3 * * *")[0] == 0

    code, _, err = cli.invoke("schedules", "create", "n", "--flow", "quick", "--cron", "0 4 * * *")
    assert code == 1 and "ScheduleExistsError" in err
    code, _, err = cli.invoke("schedules", "show", "a/b")
    assert code == 2 and "schedule id" in err


def test_schedules_belong_to_their_tenant(cli: Cli) -> None:
    """W24: another tenant's schedule of the same id is another schedule."""
    code, _, _ = cli.invoke(
        "schedules", "create", "n", "--flow", "quick", "--cron", "0 3 * * *", "--tenant", "acme"
    )
    assert code == 0

    assert cli.json("schedules", "list")["items"] == []
    [mine] = cli.json("schedules", "list", "--tenant", "acme")["items"]
    assert mine["tenant_id"] == "acme"


def test_a_low_priority_schedule_shows_it_and_its_starts_carry_it(cli: Cli) -> None:
    code, out, err = cli.invoke(
        "schedules", "create", "batch", "--flow", "quick", "--cron", "0 3 * * *",
        "--priority", "low",
    )  # fmt: skip
    assert code == 0, err
    assert cli.json("schedules", "show", "batch")["priority"] == "low"
    code, out, _ = cli.invoke("schedules", "show", "batch")
    assert "priority" in out and "low" in out

    triggered = cli.json("schedules", "trigger", "batch")
    shown = cli.json("executions", "show", triggered["execution_id"])
    assert shown["history"]["priority"] == "low"
