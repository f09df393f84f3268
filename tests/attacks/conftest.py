"""The attack suite: the outside campaign's scenarios, on real processes, in bounded form.

Scenarios that disturb Redis itself for every client (``CLIENT KILL``, ``CLIENT PAUSE``, a
restart) run against a private ``redis-server`` this suite starts on a free loopback port
and stops by its pid, so they never touch the shared test Redis other suites use.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ..integration.conftest import REDIS_URL, Plaita


@contextlib.contextmanager
def _private_redis_server(workdir: Path) -> Iterator[str]:
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed; .ci/run installs it"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise AssertionError(
                        f"the private redis-server on {port} did not start"
                    ) from None
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@pytest.fixture
def private_redis_url(tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test alone, started on a free port and stopped by its pid."""
    with _private_redis_server(tmp_path) as url:
        yield url


@pytest.fixture
def private_plaita(private_redis_url: str, tmp_path: Path) -> Iterator[Plaita]:
    """``plaita`` processes on the private Redis; every process stopped at teardown."""
    runner = Plaita(private_redis_url, f"plaita-attack-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        yield runner
    finally:
        runner.stop_all()
        runner.redis().close()


@pytest.fixture
def shared_plaita(tmp_path: Path) -> Iterator[Plaita]:
    """``plaita`` processes on the shared test Redis, in a namespace of their own."""
    assert REDIS_URL is not None
    runner = Plaita(REDIS_URL, f"plaita-attack-{uuid.uuid4().hex[:12]}", tmp_path)
    try:
        yield runner
    finally:
        runner.stop_all()
        client = runner.redis()
        try:
            for key in client.scan_iter(match=f"{runner.namespace}:*", count=1000):
                client.delete(key)
        finally:
            client.close()
