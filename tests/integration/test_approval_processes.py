"""The approval flow end to end: real worker and event-filter processes on real Redis."""

from __future__ import annotations

from .conftest import Plaita, requires_redis

pytestmark = [requires_redis, __import__("pytest").mark.process]


def test_approval_executions_complete_through_worker_and_event_filter_processes(
    plaita: Plaita,
) -> None:
    worker = plaita.spawn(
        "worker",
        "worker",
        "--flows",
        "examples/flows",
        "--handler-modules",
        "examples.handlers",
        "--read-block-ms",
        "100",
        "--concurrency",
        "4",
    )
    event_filter = plaita.spawn("event-filter", "event-filter", "--read-block-ms", "100")
    # The worker registers --flows at start-up too; registering here does not race it.
    registered = plaita.json(
        "flows",
        "register",
        "examples/flows/approval.json",
        "--handler-modules",
        "examples.handlers",
    )
    assert [item["flow_id"] for item in registered["items"]] == ["approval"]

    # V6: a decision published before its execution even exists is kept in the inbox.
    plaita.run(
        "events",
        "publish",
        "approval_decision",
        "--correlation-id",
        "early-bird",
        "--data",
        '{"approved": true}',
    )
    early = plaita.json(
        "executions",
        "start",
        "approval",
        "--input",
        '{"amount": 8000}',
        "--execution-id",
        "early-bird",
    )
    small = plaita.json("executions", "start", "approval", "--input", '{"amount": 250}')
    approved = plaita.json("executions", "start", "approval", "--input", '{"amount": 5000}')
    refused = plaita.json("executions", "start", "approval", "--input", '{"amount": 9000}')
    # W24: acme's execution reuses the id of the default tenant's `approved` one.
    acme = plaita.json(
        "executions",
        "start",
        "approval",
        "--input",
        '{"amount": 7000}',
        "--execution-id",
        approved["execution_id"],
        "--tenant",
        "acme",
    )

    done_small = plaita.wait_for_status(small["execution_id"], {"completed", "error"})
    assert done_small["status"] == "completed", plaita.logs()
    assert "auto_approve" in done_small["node_results"]
    assert done_small["result"]["outcome"] == "shipped"

    for execution in (approved, refused):
        waiting = plaita.wait_for_status(execution["execution_id"], {"suspended"})
        assert waiting["waiting_for"]["node_id"] == "wait_decision"
    acme_waiting = plaita.wait_for_status(acme["execution_id"], {"suspended"}, tenant="acme")
    assert (acme_waiting["tenant_id"], acme_waiting["input"]) == ("acme", {"amount": 7000})

    plaita.run(
        "events",
        "publish",
        "approval_decision",
        "--correlation-id",
        approved["execution_id"],
        "--data",
        '{"approved": true}',
    )
    plaita.run(
        "events",
        "publish",
        "approval_decision",
        "--correlation-id",
        refused["execution_id"],
        "--data",
        '{"approved": false}',
    )

    shipped = plaita.wait_for_status(approved["execution_id"], {"completed", "error"})
    rejected = plaita.wait_for_status(refused["execution_id"], {"completed", "error"})
    assert (shipped["status"], shipped["result"]["outcome"]) == ("completed", "shipped")
    assert (rejected["status"], rejected["result"]["outcome"]) == ("completed", "rejected")
    assert "ship" not in rejected["node_results"] and "reject" in rejected["node_results"]

    early_done = plaita.wait_for_status(early["execution_id"], {"completed", "error"})
    assert (early_done["status"], early_done["result"]["outcome"]) == ("completed", "shipped")

    # The default tenant's decision for that id resumed only the default tenant's execution.
    still = plaita.wait_for_status(acme["execution_id"], {"suspended"}, tenant="acme")
    assert still["status"] == "suspended"
    plaita.run(
        "events",
        "publish",
        "approval_decision",
        "--correlation-id",
        acme["execution_id"],
        "--data",
        '{"approved": false}',
        "--tenant",
        "acme",
    )
    acme_done = plaita.wait_for_status(acme["execution_id"], {"completed", "error"}, tenant="acme")
    assert (acme_done["status"], acme_done["result"]["outcome"]) == ("completed", "rejected")

    # Graceful drain on SIGTERM (W17): both services exit cleanly.
    assert plaita.stop(worker) == 0, plaita.logs()
    assert plaita.stop(event_filter) == 0, plaita.logs()
