"""``plaita tenants list|show|suspend|resume|quota`` on real Redis (W24, C4).

Output for people and ``--json``; a tenant id or quota the rules refuse is a usage error
naming its value (exit 2, before anything connects); suspending the default tenant is a
refusal naming the error (exit 1); every write carries ``PLAITA_DEPLOYMENT_EPOCH``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from plaita.entrypoints.cli import main

REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")
pytestmark = pytest.mark.skipif(
    not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"
)


class Cli:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def invoke(
        self, *args: str, url: str | None = None, epoch: str | None = None
    ) -> tuple[int, str, str]:
        env = {"PLAITA_NAMESPACE": self.namespace, "PLAITA_DEPLOYMENT_EPOCH": epoch}
        result = CliRunner().invoke(
            main,
            [*args, "--redis-url", url or str(REDIS_URL)],
            env=env,  # type: ignore[arg-type]  # None unsets a variable
            catch_exceptions=False,
        )
        return result.exit_code, result.stdout, result.stderr

    def json(self, *args: str, epoch: str | None = None) -> Any:
        code, out, err = self.invoke(*args, "--json", epoch=epoch)
        assert code == 0, out + err
        return json.loads(out)


@pytest.fixture
def cli() -> Iterator[Cli]:
    namespace = f"plaita-e2e-tenants-{uuid.uuid4().hex[:12]}"
    yield Cli(namespace)
    client = redis.Redis.from_url(str(REDIS_URL))
    try:
        keys = list(client.scan_iter(match=f"{namespace}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def test_suspend_show_list_and_resume_for_people(cli: Cli) -> None:
    code, out, err = cli.invoke("tenants", "suspend", "acme")
    assert code == 0, out + err
    assert out == "suspended: tenant acme is suspended (max running: no limit, epoch: none)\n"

    code, out, _ = cli.invoke("tenants", "show", "acme")
    assert code == 0
    # Labels padded to the longest ("max running"), two spaces, then the value.
    rows = {line[:11].strip(): line[13:] for line in out.splitlines()}
    assert rows["max running"] == "no limit"
    assert rows["status"] == "suspended"
    assert rows["parked"] == "0 carriers"
    assert rows["workers"].startswith("park: tenant 'acme' is suspended")

    code, out, _ = cli.invoke("tenants", "list")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["TENANT", "STATUS", "MAX", "RUNNING", "EPOCH", "PARKED", "WORKERS"]
    assert row.split() == ["acme", "suspended", "no", "limit", "-", "0", "park"]

    code, out, _ = cli.invoke("tenants", "resume", "acme")
    assert (code, out) == (
        0,
        "resumed: tenant acme is active (max running: no limit, epoch: none)\n",
    )


def test_the_json_of_each_command(cli: Cli) -> None:
    assert cli.json("tenants", "list") == {"items": []}
    suspended = cli.json("tenants", "suspend", "acme", epoch="3")
    assert suspended == {
        "tenant_id": "acme",
        "action": "suspend",
        "outcome": "suspended",
        "status": "suspended",
        "max_running": None,
        "epoch": 3,
        "version": 1,
        "requeued": 0,
        "parked": 0,
    }
    quota = cli.json("tenants", "quota", "acme", "--max-running", "40", epoch="3")
    assert (quota["outcome"], quota["max_running"], quota["version"]) == ("quota_set", 40, 2)
    shown = cli.json("tenants", "show", "acme", epoch="3")
    assert {"status": "suspended", "max_running": 40, "epoch": 3, "workers": "park"}.items() <= (
        shown.items()
    )
    [listed] = cli.json("tenants", "list")["items"]
    assert listed["tenant_id"] == "acme"
    cleared = cli.json("tenants", "quota", "acme", "--no-limit", epoch="3")
    assert cleared["max_running"] is None


def test_a_status_of_another_epoch_is_shown_as_held_and_resume_rewrites_it(cli: Cli) -> None:
    cli.json("tenants", "resume", "acme", epoch="2")

    shown = cli.json("tenants", "show", "acme", epoch="3")
    assert shown["workers"] == "hold"
    assert "plaita tenants resume acme" in shown["workers_detail"]

    rewritten = cli.json("tenants", "resume", "acme", epoch="3")
    assert (rewritten["outcome"], rewritten["epoch"]) == ("resumed", 3)
    assert cli.json("tenants", "show", "acme", epoch="3")["workers"] == "run"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("tenants", "show", "a b"), "InvalidTenantIdError"),
        (("tenants", "suspend", "{tag}"), "InvalidTenantIdError"),
        (("tenants", "quota", "acme", "--max-running", "0"), "InvalidTenantQuotaError"),
        (("tenants", "quota", "acme", "--max-running", "ten"), "InvalidTenantQuotaError"),
        (("tenants", "quota", "acme", "--max-running", "1000001"), "from 1 to 1000000"),
        (("tenants", "quota", "acme"), "exactly one of --max-running N and --no-limit"),
        (
            ("tenants", "quota", "acme", "--max-running", "3", "--no-limit"),
            "exactly one of --max-running N and --no-limit",
        ),
    ],
)
def test_bad_input_is_a_usage_error_naming_it(cli: Cli, args: tuple[str, ...], says: str) -> None:
    code, out, err = cli.invoke(*args)
    assert code == 2, out + err
    assert says in err


def test_a_bad_deployment_epoch_is_a_usage_error(cli: Cli) -> None:
    code, _, err = cli.invoke("tenants", "resume", "acme", epoch="0")
    assert code == 2
    assert "deployment_epoch" in err


def test_suspending_the_default_tenant_is_refused_by_name(cli: Cli) -> None:
    code, out, err = cli.invoke("tenants", "suspend", "default")
    assert code == 1, out + err
    assert "TenantActionRefusedError" in err and "cannot be suspended" in err
    assert cli.json("tenants", "list") == {"items": []}


CLUSTER_URL = os.environ.get("PLAITA_TEST_REDIS_CLUSTER_URL")


@pytest.mark.skipif(not CLUSTER_URL, reason="PLAITA_TEST_REDIS_CLUSTER_URL is unset; CI sets it")
def test_the_tenant_commands_on_a_redis_cluster() -> None:
    namespace = f"plaita-e2e-tenants-{uuid.uuid4().hex[:12]}"
    common = ["--redis-url", str(CLUSTER_URL), "--redis-cluster", "--json"]
    env = {"PLAITA_NAMESPACE": namespace, "PLAITA_DEPLOYMENT_EPOCH": "2"}
    outputs = []
    for args in (
        ("tenants", "suspend", "acme"),
        ("tenants", "quota", "acme", "--max-running", "3"),
        ("tenants", "show", "acme"),
        ("tenants", "list"),
        ("tenants", "resume", "acme"),
    ):
        result = CliRunner().invoke(main, [*args, *common], env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        outputs.append(json.loads(result.stdout))
    assert outputs[2]["status"] == "suspended" and outputs[2]["max_running"] == 3
    assert [item["tenant_id"] for item in outputs[3]["items"]] == ["acme"]
    assert (outputs[4]["outcome"], outputs[4]["epoch"]) == ("resumed", 2)
    cluster = redis.RedisCluster.from_url(str(CLUSTER_URL))
    try:
        for key in (f"{namespace}:tenant:{{acme}}", f"{namespace}:tenants"):
            cluster.delete(key)
    finally:
        cluster.close()
