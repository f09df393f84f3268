"""S4 from the command line: `plaita db upgrade|current` and `plaita dev --db` across a
restart of the dev process (real processes, SQLite file and real PostgreSQL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .test_dev import free_port, publish_decision, wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAITA = [sys.executable, "-m", "plaita.entrypoints.cli"]
DATABASE_URL_VARIABLE = "PLAITA_TEST_DATABASE_URL"


def plaita(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PLAITA, *args],
        cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("PLAITA_")},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh database on the test PostgreSQL, dropped afterwards."""
    base = os.environ.get(DATABASE_URL_VARIABLE)
    if not base:
        pytest.skip(f"{DATABASE_URL_VARIABLE} is unset; CI always sets it")
    name = f"plaita_e2e_{uuid.uuid4().hex[:10]}"
    admin = base.rsplit("/", 1)[0] + "/postgres"
    psql = ["psql", admin.replace("postgresql+asyncpg", "postgresql"), "-qc"]
    subprocess.run([*psql, f"create database {name}"], check=True, capture_output=True)
    try:
        yield base.rsplit("/", 1)[0] + f"/{name}"
    finally:
        subprocess.run([*psql, f"drop database {name} with (force)"], capture_output=True)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_db_upgrade_creates_the_schema_once(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'plaita.db'}"
        if backend == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    before = plaita("db", "current", "--database-url", url)
    assert before.returncode == 0, before.stderr
    assert "none" in before.stdout

    first = plaita("db", "upgrade", "--database-url", url, "--json")
    assert first.returncode == 0, first.stderr
    assert '"from": null' in first.stdout

    again = plaita("db", "upgrade", "--database-url", url)
    assert again.returncode == 0 and "already at" in again.stdout


def test_db_commands_name_a_bad_url_and_an_unreachable_database(tmp_path: Path) -> None:
    bad = plaita("db", "upgrade", "--database-url", "mysql://root@localhost/x")
    assert bad.returncode == 1 and "mysql://root@localhost/x" in bad.stderr

    down = plaita("db", "current", "--database-url", "postgresql://u:secret@127.0.0.1:9/nowhere")
    assert down.returncode == 1
    assert "cannot reach the database" in down.stderr and "secret" not in down.stderr


def test_dev_with_a_database_keeps_executions_across_restarts(tmp_path: Path) -> None:
    """S4: state and definitions survive; the restarted process re-creates every way forward."""
    url = f"sqlite:///{tmp_path / 'dev.db'}"

    def run_dev(log: Path) -> tuple[subprocess.Popen[bytes], httpx.Client]:
        port = free_port()
        flows = str(REPO_ROOT / "examples" / "flows")
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [*PLAITA, "dev", "--db", url, "--flows", flows, "--port", str(port)],
                cwd=tmp_path,
                env={
                    **{k: v for k, v in os.environ.items() if not k.startswith("PLAITA_")},
                    "PYTHONPATH": str(REPO_ROOT),
                },
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        wait_for(lambda: "stop:" in log.read_text(), "the banner")
        # Loopback: no token needed.
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)
        return process, client

    def stop(process: subprocess.Popen[bytes], log: Path) -> None:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0, log.read_text()

    first_log = tmp_path / "first.log"
    process, api = run_dev(first_log)
    try:
        started = api.post(
            "/api/v1/executions", json={"flow_id": "approval", "input": {"amount": 5000}}
        )
        assert started.status_code == 201, started.text
        execution_id = started.json()["execution_id"]
        wait_for(
            lambda: (
                api.get(f"/api/v1/executions/{execution_id}").json().get("status") == "suspended"
            ),
            "the wait for the decision",
        )
    finally:
        stop(process, first_log)

    second_log = tmp_path / "second.log"
    process, api = run_dev(second_log)
    try:
        kept = api.get(f"/api/v1/executions/{execution_id}")
        assert kept.status_code == 200 and kept.json()["status"] == "suspended"
        assert "1 event waits restored" in second_log.read_text()
        publish_decision(api, execution_id)
        done = wait_for(
            lambda: (
                (body := api.get(f"/api/v1/executions/{execution_id}").json())["status"]
                == "completed"
                and body
            ),
            "completion after the restart",
        )
        assert done["result"]["outcome"] == "shipped"
    finally:
        stop(process, second_log)
