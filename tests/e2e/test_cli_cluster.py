"""The CLI on a Redis Cluster: ``--redis-cluster`` makes ``--redis-url`` a seed node, and every
way of getting the topology wrong is a named error, never a traceback.

Runs against the cluster at ``PLAITA_TEST_REDIS_CLUSTER_URL`` (``scripts/test`` starts one).
"""

from __future__ import annotations

import json
import os
import socket
import uuid

import pytest
from click.testing import CliRunner

from plaita.entrypoints.cli import main

CLUSTER_URL = os.environ.get("PLAITA_TEST_REDIS_CLUSTER_URL")
requires_cluster = pytest.mark.skipif(
    not CLUSTER_URL, reason="PLAITA_TEST_REDIS_CLUSTER_URL is unset; CI always sets it"
)
FLOW = {
    "flow_id": "greet",
    "version": "1",
    "start": "done",
    "nodes": [{"id": "done", "type": "end", "output": "'hello'"}],
}


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@requires_cluster
def test_start_and_show_an_execution_on_the_cluster(tmp_path: object) -> None:
    assert CLUSTER_URL is not None
    namespace = f"plaita-test-{uuid.uuid4().hex}"
    flow = os.path.join(str(tmp_path), "greet.json")
    with open(flow, "w") as handle:
        json.dump(FLOW, handle)
    env = {"PLAITA_NAMESPACE": namespace}
    runner = CliRunner()
    common = ["--redis-url", CLUSTER_URL, "--redis-cluster"]
    registered = runner.invoke(main, ["flows", "register", flow, *common], env=env)
    assert registered.exit_code == 0, registered.output
    started = runner.invoke(
        main, ["executions", "start", "greet", "--execution-id", "x-1", *common, "--json"], env=env
    )
    assert started.exit_code == 0, started.output
    listed = runner.invoke(main, ["flows", "list", *common, "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    assert "greet" in listed.output


@requires_cluster
def test_a_cluster_node_without_the_flag_is_named() -> None:
    assert CLUSTER_URL is not None
    code, out = invoke("executions", "list", "--redis-url", CLUSTER_URL)
    assert code == 1
    assert "is a node of a Redis Cluster" in out and "add --redis-cluster" in out
    assert "Traceback" not in out


def test_an_unreachable_cluster_seed_is_named() -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    code, out = invoke("executions", "list", "--redis-url", url, "--redis-cluster")
    assert code == 1
    assert f"cannot use the Redis Cluster whose seed is {url}" in out
    assert "Traceback" not in out


def test_a_database_number_on_a_cluster_url_is_refused() -> None:
    code, out = invoke(
        "executions", "list", "--redis-url", "redis://127.0.0.1:7000/3", "--redis-cluster"
    )
    assert code == 2
    assert "names database 3, but a Redis Cluster has only database 0" in out


def test_a_single_redis_given_as_a_cluster_is_named() -> None:
    url = os.environ.get("PLAITA_TEST_REDIS_URL")
    if not url:
        pytest.skip("PLAITA_TEST_REDIS_URL is unset; CI always sets it")
    single = url.rsplit("/", 1)[0] if url.count("/") > 2 else url
    code, out = invoke("executions", "list", "--redis-url", single, "--redis-cluster")
    assert code == 1
    assert "Cluster mode is not enabled" in out and "drop --redis-cluster" in out
