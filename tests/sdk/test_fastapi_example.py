"""examples/fastapi_app.py, run with FastAPI's test client on the memory twin and on a real
Redis (node and cluster): an expense is started by POST /expenses, waits for its decision,
and POST /expenses/{id}/decision resumes it and answers with the result."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from .conftest import store_url

pytestmark = pytest.mark.timeout(60)


def wait_until_waiting(http: TestClient, expense_id: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        shown = http.get(f"/expenses/{expense_id}")
        if shown.status_code == 200 and shown.json()["status"] == "suspended":
            return
        time.sleep(0.02)
    raise AssertionError(f"expense {expense_id} never waited for its decision")


@pytest.mark.parametrize("store", ["memory", "redis", "cluster"])
def test_an_expense_waits_for_its_decision_and_answers_the_outcome(
    store: str, namespace: str
) -> None:
    from examples.fastapi_app import create_app

    with TestClient(create_app(store_url(store))) as http:
        created = http.post("/expenses", json={"employee": "ada", "amount": 250})
        assert created.status_code == 201
        expense_id = created.json()["expense_id"]
        wait_until_waiting(http, expense_id)
        decided = http.post(
            f"/expenses/{expense_id}/decision", json={"approved": True, "by": "grace"}
        )
        assert decided.status_code == 200, decided.text
        assert decided.json() == {
            "expense_id": expense_id,
            "approved": True,
            "by": "grace",
            "amount": 250,
        }
        assert http.get(f"/expenses/{expense_id}").json()["status"] == "completed"


def test_a_small_expense_is_approved_by_policy_and_bad_input_is_refused(namespace: str) -> None:
    from examples.fastapi_app import create_app

    with TestClient(create_app("memory://")) as http:
        created = http.post("/expenses", json={"employee": "ada", "amount": 40})
        expense_id = created.json()["expense_id"]
        decided = http.post(
            f"/expenses/{expense_id}/decision", json={"approved": False, "by": "grace"}
        )
        # The policy approved it before any decision: the event waits unused in its inbox.
        assert decided.json()["approved"] is True
        assert decided.json()["by"] == "policy"
        assert http.post("/expenses", json={"employee": "", "amount": 1}).status_code == 422
        refused = http.post("/expenses/not%20an%20id/decision", json={"approved": True, "by": "x"})
        assert refused.status_code == 422
        assert "InvalidExecutionIdError" in refused.json()["detail"]
