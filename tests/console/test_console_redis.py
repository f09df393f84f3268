"""The console on a real Redis (C1): the API in-process with the production worker, and
``plaita console`` as a real process that serves, authenticates and stops cleanly on SIGTERM.

Skipped when ``PLAITA_TEST_REDIS_URL`` is unset (CI always sets it).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis
from fastapi import FastAPI

from plaita.entrypoints.cli_support import import_handler_modules
from plaita.entrypoints.console import create_app
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

from .conftest import (
    HANDLERS,
    REPO_ROOT,
    TERMINAL,
    TOKENS,
    auth,
    register_approval,
    running_services,
    start,
    wait_for,
)

REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")
pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"),
]


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"plaita-console-{uuid.uuid4().hex[:12]}"
    yield name
    assert REDIS_URL is not None
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{name}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
async def redis_container(namespace: str) -> AsyncIterator[Container]:
    import_handler_modules((HANDLERS,))
    container = build_container(
        Settings(
            backend="redis",
            redis_url=REDIS_URL,
            namespace=namespace,
            handler_modules=(HANDLERS,),
            read_block_ms=20,
            consumer_name=f"console-redis-{uuid.uuid4().hex[:6]}",
        )
    )
    yield container
    await container.redis_client().aclose()


@pytest.fixture
async def redis_client(redis_container: Container) -> AsyncIterator[httpx.AsyncClient]:
    app: FastAPI = create_app(redis_container, tokens=list(TOKENS.values()))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as http:
        yield http


async def test_start_suspend_publish_complete_on_redis(
    redis_client: httpx.AsyncClient, redis_container: Container
) -> None:
    await register_approval(redis_client)
    async with running_services(redis_container):
        execution_id = await start(redis_client, 5000)
        waiting = await wait_for(redis_client, execution_id, {"suspended"})
        assert waiting["timeline"][-1] == {
            **waiting["timeline"][-1],
            "node_id": "wait_decision",
            "status": "waiting",
        }
        listed = await redis_client.get(
            "/api/v1/executions", params={"status": "suspended"}, headers=auth("viewer")
        )
        assert [i["execution_id"] for i in listed.json()["items"]] == [execution_id]

        published = await redis_client.post(
            "/api/v1/events",
            json={
                "event_type": "approval_decision",
                "correlation_id": execution_id,
                "data": {"approved": False},
            },
            headers=auth("operator"),
        )
        assert published.status_code == 201
        done = await wait_for(redis_client, execution_id, TERMINAL)
    assert done["status"] == "completed"
    assert done["result"]["outcome"] == "rejected"
    event = await redis_client.get(
        f"/api/v1/events/{published.json()['event_id']}", headers=auth("viewer")
    )
    assert event.json()["correlation_id"] == execution_id


async def test_operator_actions_and_delete_on_redis(
    redis_client: httpx.AsyncClient, redis_container: Container
) -> None:
    await register_approval(redis_client)
    async with running_services(redis_container):
        execution_id = await start(redis_client, 5000)
        await wait_for(redis_client, execution_id, {"suspended"})
        paused = await redis_client.post(
            f"/api/v1/executions/{execution_id}/pause", headers=auth("operator")
        )
        assert paused.json()["paused"] is True
        cancelled = await redis_client.post(
            f"/api/v1/executions/{execution_id}/cancel", headers=auth("operator")
        )
        assert cancelled.status_code == 202
        assert (await wait_for(redis_client, execution_id, TERMINAL))["status"] == "cancelled"
    deleted = await redis_client.delete(f"/api/v1/executions/{execution_id}", headers=auth("admin"))
    assert deleted.status_code == 200
    assert deleted.json()["deleted_now"] is True
    gone = await redis_client.get(f"/api/v1/executions/{execution_id}", headers=auth("viewer"))
    assert gone.status_code == 404


async def test_queue_workers_flows_and_readiness_on_redis(
    redis_client: httpx.AsyncClient,
) -> None:
    await register_approval(redis_client)
    await redis_client.post(
        "/api/v1/executions", json={"flow_id": "approval"}, headers=auth("operator")
    )
    queue = await redis_client.get("/api/v1/queue", headers=auth("viewer"))
    assert queue.json()["stream_length"] == 1
    assert queue.json()["dlq_length"] == 0
    assert (await redis_client.get("/readyz")).json() == {"status": "ready"}
    flows = await redis_client.get("/api/v1/flows", headers=auth("viewer"))
    assert [f["flow_id"] for f in flows.json()["items"]] == ["approval"]
    dlq = await redis_client.get("/api/v1/dlq", headers=auth("admin"))
    assert dlq.json() == {"items": []}


async def test_an_unreachable_redis_is_503_and_not_ready() -> None:
    container = build_container(
        Settings(backend="redis", redis_url="redis://127.0.0.1:1/0", namespace="nowhere")
    )
    app = create_app(container, tokens=list(TOKENS.values()))
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://console"
        ) as http:
            ready = await http.get("/readyz")
            queue = await http.get("/api/v1/queue", headers=auth("viewer"))
    finally:
        await container.redis_client().aclose()
    assert ready.status_code == 503
    assert ready.json()["status"] == "unavailable"
    assert queue.status_code == 503
    assert queue.json()["error"] == "StoreUnavailableError"


# --- `plaita console` as a process ----------------------------------------------------------


def _plaita() -> list[str]:
    script = Path(sys.executable).with_name("plaita")
    return [str(script)] if script.exists() else [sys.executable, "-m", "plaita.entrypoints.cli"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.process
def test_plaita_console_serves_authenticates_and_stops_on_sigterm(
    namespace: str, tmp_path: Path
) -> None:
    assert REDIS_URL is not None
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([TOKENS["viewer"]]))
    port = _free_port()
    log = tmp_path / "console.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                *_plaita(),
                "console",
                "--redis-url",
                REDIS_URL,
                "--port",
                str(port),
                "--tokens-file",
                str(tokens),
            ],
            cwd=REPO_ROOT,
            env={**os.environ, "PLAITA_NAMESPACE": namespace},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        health = _wait_healthy(base, process, log)
        assert health.json() == {"status": "ok"}
        with httpx.Client(base_url=base, timeout=5) as http:
            listed = http.get("/api/v1/executions", headers=auth("viewer"))
            refused = http.get("/api/v1/executions")
            metrics = http.get("/metrics", headers=auth("viewer"))
        assert listed.status_code == 200, listed.text
        assert listed.json() == {"items": [], "next_cursor": None}
        assert refused.status_code == 401
        assert "plaita_stream_length" in metrics.text
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
            raise AssertionError(f"console ignored SIGTERM\n{log.read_text()}") from None
    output = log.read_text()
    assert code == 0, output
    assert f"plaita console listening on http://127.0.0.1:{port}" in output


@pytest.mark.process
def test_plaita_console_without_tokens_refuses_to_start(namespace: str) -> None:
    assert REDIS_URL is not None
    env = {k: v for k, v in os.environ.items() if k != "PLAITA_CONSOLE_TOKENS"}
    done = subprocess.run(
        [*_plaita(), "console", "--redis-url", REDIS_URL, "--port", str(_free_port())],
        cwd=REPO_ROOT,
        env={**env, "PLAITA_NAMESPACE": namespace},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert "ConsoleTokensError" in done.stderr
    assert "--tokens-file" in done.stderr


def _wait_healthy(base: str, process: subprocess.Popen[bytes], log: Path) -> httpx.Response:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"console exited ({process.returncode})\n{log.read_text()}")
        try:
            answer = httpx.get(f"{base}/healthz", timeout=1)
        except httpx.TransportError:
            time.sleep(0.1)
            continue
        if answer.status_code == 200:
            return answer
    raise AssertionError(f"console never became healthy\n{log.read_text()}")


@pytest.mark.process
def test_plaita_console_on_a_taken_port_says_so(namespace: str, tmp_path: Path) -> None:
    assert REDIS_URL is not None
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([TOKENS["viewer"]]))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                *_plaita(),
                "console",
                "--redis-url",
                REDIS_URL,
                "--port",
                str(port),
                "--tokens-file",
                str(tokens),
            ],
            cwd=REPO_ROOT,
            env={**os.environ, "PLAITA_NAMESPACE": namespace},
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
