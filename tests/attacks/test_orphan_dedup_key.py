"""An orphan dedup key no longer swallows starts for seven days (W6).

The campaign crashed a start between claiming its ``dedup_key`` and enqueueing its carrier:
the claim named an execution that would never exist, and every later start with that key
answered ``deduplicated`` and enqueued nothing. Now a claim is confirmed once its carrier is
enqueued; an unconfirmed claim without a row, older than the grace, is released and claimed
again — and a young one, or a confirmed one, is still never started twice.
"""

from __future__ import annotations

import uuid

import pytest

from plaita.adapters.redis.keys import RedisKeys
from plaita.domain.dedup import DEDUP_ORPHAN_GRACE_MS, DEDUP_TTL_MS

from ..integration.conftest import FLOW_FILE, FLOW_ID, HANDLER_MODULE, Plaita, poll, worker_args

pytestmark = [pytest.mark.process]


def leave_a_claim(plaita: Plaita, key: str, execution_id: str, *, age_ms: int) -> None:
    """What a start killed after SET NX and before XADD leaves: a bare claim, ``age_ms`` old."""
    claim = RedisKeys(plaita.namespace).dedup("default", key)
    plaita.redis().set(claim, execution_id, px=DEDUP_TTL_MS - age_ms)


def start(plaita: Plaita, key: str) -> dict[str, object]:
    return dict(
        plaita.json(
            "executions", "start", FLOW_ID, "--input", '{"n": 1, "plan": {}}', "--dedup-key", key
        )
    )


def test_a_start_after_an_orphan_claim_runs_a_new_execution(plaita: Plaita) -> None:
    plaita.run("flows", "register", FLOW_FILE, "--handler-modules", HANDLER_MODULE)
    leave_a_claim(plaita, "order-7", "never-enqueued", age_ms=DEDUP_ORPHAN_GRACE_MS + 60_000)
    worker = plaita.spawn("worker", *worker_args(f"w-{uuid.uuid4().hex[:6]}", concurrency=2))
    poll(lambda: "worker.started" in plaita.log_of(worker), timeout=15, what="the worker")

    started = start(plaita, "order-7")

    assert started["deduplicated"] is False
    assert started["execution_id"] != "never-enqueued"
    view = plaita.wait_for_status(str(started["execution_id"]), {"completed", "error"})
    assert view["status"] == "completed"
    again = start(plaita, "order-7")
    assert (again["execution_id"], again["deduplicated"]) == (started["execution_id"], True)


def test_a_young_unconfirmed_claim_is_still_deduplicated(plaita: Plaita) -> None:
    plaita.run("flows", "register", FLOW_FILE, "--handler-modules", HANDLER_MODULE)
    leave_a_claim(plaita, "order-8", "being-enqueued", age_ms=1_000)

    started = start(plaita, "order-8")

    assert (started["execution_id"], started["deduplicated"]) == ("being-enqueued", True)
