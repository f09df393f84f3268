"""The flow-registration attack, replayed on real processes (issue 12, item 6; C3, S2, W24).

What an outside attack found: an admin token scoped to tenant ``acme`` POSTed another
document as ``version 1`` of a deployment-wide flow, got 201, and replaced it — the
``default`` tenant's next execution ran acme's definition.

Here a real ``plaita worker`` (which registers the deployment-wide flow from ``--flows``)
and a real ``plaita console`` run on real Redis; the attacker talks HTTP only. The attacker
gets its own tenant's copy (201, ``tenant_id: acme``) or 403, never an overwrite: the
default tenant (and any tenant without a copy) keeps running the original definition, acme's
executions run acme's, and even an admin of every tenant cannot replace a registered version
(409). Skipped when ``PLAITA_TEST_REDIS_URL`` is unset (CI always sets it).
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

REPO_ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")
pytestmark = [
    pytest.mark.redis,
    pytest.mark.process,
    pytest.mark.skipif(not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"),
]

ROOT = {"token": "root-secret-0123456789abcdef", "name": "root", "role": "admin", "tenants": ["*"]}
ACME = {
    "token": "acme-secret-0123456789abcdef",
    "name": "acme-admin",
    "role": "admin",
    "tenants": ["acme"],
}
#: How long any one wait of this test may take: process start-up, an execution's end.
WAIT_SECONDS = 30


def pay(says: str) -> dict[str, Any]:
    """A flow whose execution's result tells which definition ran."""
    return {
        "flow_id": "pay",
        "version": "1",
        "start": "done",
        "nodes": [{"id": "done", "type": "end", "output": repr(says)}],
    }


def headers(token: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {token['token']}"}


class Processes:
    """The plaita processes this test starts; each is stopped by its pid at the end."""

    def __init__(self, namespace: str, logs: Path) -> None:
        self.env = {**os.environ, "PLAITA_REDIS_URL": str(REDIS_URL), "PLAITA_NAMESPACE": namespace}
        self.logs = logs
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        script = Path(sys.executable).with_name("plaita")
        command = (
            [str(script)] if script.exists() else [sys.executable, "-m", "plaita.entrypoints.cli"]
        )
        log = self.logs / f"{name}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [*command, *args],
                cwd=REPO_ROOT,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.started.append((process, log))
        return process

    def output(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')}" for _, log in self.started
        )

    def stop_all(self) -> None:
        for process, _ in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    namespace = f"plaita-attack-{uuid.uuid4().hex[:12]}"
    started = Processes(namespace, tmp_path)
    try:
        yield started
    finally:
        started.stop_all()
        client = redis.Redis.from_url(str(REDIS_URL))
        try:
            for key in client.scan_iter(match=f"{namespace}:*", count=1000):
                client.delete(key)
        finally:
            client.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(what: str, check: Any, processes: Processes) -> Any:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for process, _ in processes.started:
            if process.poll() is not None:
                raise AssertionError(
                    f"a process exited while waiting for {what}\n{processes.output()}"
                )
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{processes.output()}")


def result_of(http: httpx.Client, token: dict[str, Any], tenant: str, processes: Processes) -> Any:
    """Start ``pay`` for ``tenant`` through the console and wait for its result."""
    started = http.post(
        "/api/v1/executions", json={"flow_id": "pay", "tenant": tenant}, headers=headers(token)
    )
    assert started.status_code == 201, started.text
    execution_id = started.json()["execution_id"]

    def finished() -> Any:
        answer = http.get(
            f"/api/v1/executions/{execution_id}", params={"tenant": tenant}, headers=headers(token)
        )
        body = answer.json() if answer.status_code == 200 else {}
        return body if body.get("status") in {"completed", "error", "cancelled"} else None

    done = wait_until(f"execution {execution_id} of {tenant}", finished, processes)
    assert done["status"] == "completed", done
    return done["result"]


def test_a_tenant_admin_cannot_overwrite_a_deployment_wide_flow(
    processes: Processes, tmp_path: Path
) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "pay.json").write_text(json.dumps(pay("original")))
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([ROOT, ACME]))
    port = free_port()
    processes.spawn(
        "worker",
        "worker",
        "--flows",
        str(flows),
        "--read-block-ms",
        "100",
        "--consumer-name",
        f"attack-worker-{port}",
    )
    processes.spawn("console", "console", "--port", str(port), "--tokens-file", str(tokens))

    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:

        def original_registered() -> bool:
            try:
                answer = http.get("/api/v1/flows/pay", headers=headers(ROOT))
            except httpx.TransportError:
                return False
            return answer.status_code == 200

        wait_until(
            "the console and the worker's deployment-wide flow", original_registered, processes
        )

        # The attack: acme's admin registers its own document as version 1 of the flow.
        as_acme = http.post(
            "/api/v1/flows", json={**pay("acme"), "tenant": "acme"}, headers=headers(ACME)
        )
        # ... and tries the deployment-wide catalogue and the default tenant outright.
        as_shared = http.post(
            "/api/v1/flows", json={**pay("acme"), "shared": True}, headers=headers(ACME)
        )
        as_default = http.post("/api/v1/flows", json=pay("acme"), headers=headers(ACME))

        # Default, and a tenant without a copy, still run the original; acme runs its own.
        assert result_of(http, ROOT, "default", processes) == "original"
        assert result_of(http, ROOT, "globex", processes) == "original"
        assert result_of(http, ACME, "acme", processes) == "acme"

        assert as_acme.status_code == 201, as_acme.text
        assert (as_acme.json()["tenant_id"], as_acme.json()["shared"]) == ("acme", False)
        assert as_shared.status_code == 403, as_shared.text
        assert as_shared.json()["error"] == "SharedFlowNotAllowedError"
        assert as_default.status_code == 403, as_default.text
        assert as_default.json()["error"] == "TenantNotAllowedError"

        # Not even an admin of every tenant replaces a registered version.
        overwrite = http.post(
            "/api/v1/flows", json={**pay("root"), "shared": True}, headers=headers(ROOT)
        )
        assert overwrite.status_code == 409, overwrite.text
        assert overwrite.json()["error"] == "FlowVersionConflictError"
        shared = http.get(
            "/api/v1/flows/pay", params={"shared": "true"}, headers=headers(ROOT)
        ).json()
        assert shared["document"]["nodes"][0]["output"] == "'original'"
        assert result_of(http, ROOT, "default", processes) == "original"
