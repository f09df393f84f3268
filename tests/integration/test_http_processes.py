"""The http node on a real ``plaita worker`` against a real Redis and a real loopback HTTP
server (E11, E15): a 503 is retried through the delay queue until the server answers, and
under ``PLAITA_HTTP_BLOCK_PRIVATE=1`` a loopback target is refused without a request.
Every wait is a bounded poll; the fixture stops the worker by its pid."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..contract.http_server import LoopbackServer, serve
from .conftest import Plaita, poll, requires_redis

pytestmark = [requires_redis, pytest.mark.process]

FLOW_ID = "http_call"


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with serve() as running:
        yield running


def flows_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "flows"
    folder.mkdir()
    flow = {
        "flow_id": FLOW_ID,
        "start": "call",
        "nodes": [
            {
                "id": "call",
                "type": "http",
                "method": "POST",
                "url": "${input['base']}/flaky/${input['key']}/2",
                "body": {"order": "${input['key']}"},
                "retryTimes": 3,
                "next": "done",
            },
            {"id": "done", "type": "end", "output": "NODE['call']['body']"},
        ],
    }
    (folder / "http_call.json").write_text(json.dumps(flow))
    return folder


def start_worker(plaita: Plaita, tmp_path: Path, **env: str) -> Any:
    process = plaita.spawn(
        "worker",
        "worker",
        "--flows",
        str(flows_dir(tmp_path)),
        "--consumer-name",
        f"http-{uuid.uuid4().hex[:8]}",
        "--read-block-ms",
        "100",
        env=env,
    )
    poll(
        lambda: process.poll() is not None or "worker.started" in plaita.log_of(process),
        timeout=30,
        what="the worker to start",
    )
    assert process.poll() is None, plaita.logs()
    return process


def test_a_503_is_retried_through_the_delay_queue_until_the_server_answers(
    plaita: Plaita, server: LoopbackServer, tmp_path: Path
) -> None:
    worker = start_worker(plaita, tmp_path)
    params = json.dumps({"base": server.url(""), "key": "o-1"})
    started = plaita.json("executions", "start", FLOW_ID, "--input", params)
    done = plaita.wait_for_status(started["execution_id"], {"completed", "error"}, timeout=40)
    assert done["status"] == "completed", plaita.logs()
    assert done["result"] == {"calls": 3}
    assert [(seen.method, seen.body) for seen in server.requests] == [
        ("POST", b'{"order":"o-1"}')
    ] * 3
    history = plaita.run("executions", "history", started["execution_id"], "--json").stdout
    kinds = [json.loads(line).get("kind") for line in history.splitlines()]
    assert kinds.count("retry_scheduled") == 2
    assert worker.poll() is None


def test_under_the_deployments_policy_a_loopback_target_is_refused_unsent(
    plaita: Plaita, server: LoopbackServer, tmp_path: Path
) -> None:
    start_worker(plaita, tmp_path, PLAITA_HTTP_BLOCK_PRIVATE="1")
    params = json.dumps({"base": server.url(""), "key": "o-2"})
    started = plaita.json("executions", "start", FLOW_ID, "--input", params)
    done = plaita.wait_for_status(started["execution_id"], {"completed", "error"}, timeout=30)
    assert done["status"] == "error"
    assert "127.0.0.1, a loopback address" in json.dumps(done["error"])
    assert server.requests == []
