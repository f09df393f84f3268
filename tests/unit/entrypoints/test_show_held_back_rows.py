"""``plaita executions show`` says why a limit holds an execution back (flow control): the
reason, the worker's sentence, since when, and who holds the slots or when it runs again."""

from __future__ import annotations

from typing import Any

from plaita.entrypoints.cli_executions import execution_rows

NOW_MS = 1_800_000_000_000


def rows(status: str, held_back: dict[str, Any] | None) -> dict[str, str]:
    view = {
        "execution_id": "x-3",
        "flow_id": "invoice_run",
        "flow_version": "1",
        "tenant_id": "default",
        "status": status,
        "created_at_ms": NOW_MS,
        "updated_at_ms": NOW_MS,
        "held_back": held_back,
    }
    return dict(execution_rows(view, now_ms=NOW_MS))


def test_a_concurrency_wait_names_the_holders_instead_of_waiting_for_a_worker() -> None:
    shown = rows(
        "pending",
        {
            "reason": "concurrency",
            "detail": "flow 'invoice_run' concurrency key 'acme' has 2 running.",
            "since_ms": NOW_MS - 4_000,
            "holders": ["x-1", "x-2"],
            "due_ms": None,
        },
    )

    assert "waiting" not in shown
    line = shown["held back"]
    assert line.startswith("concurrency: flow 'invoice_run' concurrency key 'acme' has 2 running;")
    assert line.endswith("; held by x-1, x-2")
    assert "since " in line and ".;" not in line


def test_a_rate_limit_says_when_it_runs_again() -> None:
    shown = rows(
        "running",
        {
            "reason": "rate_limit",
            "detail": "no token for key 'stripe'",
            "since_ms": NOW_MS,
            "holders": [],
            "due_ms": NOW_MS + 2_000,
        },
    )

    assert "; runs again " in shown["held back"]
    assert "held by" not in shown["held back"]


def test_nothing_held_back_shows_no_row_and_a_pending_one_waits_for_a_worker() -> None:
    shown = rows("pending", None)

    assert "held back" not in shown
    assert shown["waiting"].startswith("for a worker to pick it up")
