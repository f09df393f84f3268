"""One retry policy per node (E15), on a real worker and in ``plaita run``.

Before the fix a node without ``retryTimes`` was retried 5 more times by the worker (the
docs said it failed), a node with ``retryTimes: 8`` made 9 in-process attempts per delivery
x 6 deliveries, and ``ctx.attempt`` restarted at 1 on each delivery. Now ``retryTimes``
(absent: ``--default-retries``) is the only count, every worker retry is a delayed carrier,
and ``ctx.attempt`` counts across deliveries.
"""

from __future__ import annotations

import json
import uuid

import pytest

from ..integration import fault_handlers
from ..integration.conftest import HANDLER_MODULE, Plaita, poll, worker_args

pytestmark = [pytest.mark.process]

FLOW_FILE = "tests/attacks/flows/flaky_default_retries.json"


def attempts_of(plaita: Plaita, execution_id: str) -> list[int]:
    key = fault_handlers.attempts_key(plaita.namespace, execution_id, "call")
    return [int(n) for n in plaita.redis().lrange(key, 0, -1)]


def test_a_node_without_retry_times_gets_the_deployments_default_retries_each_a_delivery(
    plaita: Plaita,
) -> None:
    plaita.run("flows", "register", FLOW_FILE, "--handler-modules", HANDLER_MODULE)
    worker = plaita.spawn(
        "worker",
        *worker_args(f"w-{uuid.uuid4().hex[:6]}", concurrency=2),
        "--default-retries",
        "2",
    )
    poll(lambda: "worker.started" in plaita.log_of(worker), timeout=15, what="the worker")
    always = {"call": {"fail": "transient", "times": 100}}
    started = plaita.json(
        "executions", "start", "flaky_default_retries", "--input", json.dumps({"plan": always})
    )
    execution_id = str(started["execution_id"])

    view = plaita.wait_for_status(execution_id, {"completed", "error"}, timeout=30)

    assert view["status"] == "error", view
    assert attempts_of(plaita, execution_id) == [1, 2, 3], "1 + retryTimes attempts, numbered"
    log = plaita.log_of(worker)
    assert log.count("event=node.retry_scheduled") == 2, "each retry a delayed carrier"


def test_plaita_run_follows_the_same_policy_in_process(plaita: Plaita) -> None:
    twice = {"call": {"fail": "transient", "times": 2}}
    done = plaita.run(
        "run",
        FLOW_FILE,
        "--handler-modules",
        HANDLER_MODULE,
        "--input",
        json.dumps({"plan": twice}),
        timeout=60,
    )

    assert '"node": "call"' in done.stdout, done.stdout + done.stderr
    # The run's own execution id is not printed: find its attempts by their key.
    keys = list(plaita.redis().scan_iter(match=f"{plaita.namespace}:test:attempts:*:call"))
    [key] = keys
    assert [int(n) for n in plaita.redis().lrange(key, 0, -1)] == [1, 2, 3]


def test_plaita_run_gives_up_after_retry_times_without_a_second_layer(
    plaita: Plaita,
) -> None:
    always = {"call": {"fail": "transient", "times": 100}}
    done = plaita.run(
        "run",
        FLOW_FILE,
        "--handler-modules",
        HANDLER_MODULE,
        "--input",
        json.dumps({"plan": always}),
        "--default-retries",
        "1",
        check=False,
        timeout=60,
    )

    assert done.returncode != 0
    [key] = list(plaita.redis().scan_iter(match=f"{plaita.namespace}:test:attempts:*:call"))
    assert [int(n) for n in plaita.redis().lrange(key, 0, -1)] == [1, 2]
