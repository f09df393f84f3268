"""``plaita executions show`` names what an execution waits for: an event node's event, or a
sleep node's timer. Both keep an id and may have a wake-up time; only the node tells them
apart, so ``show`` reads it from the flow (``kind`` in the JSON view)."""

from __future__ import annotations

from typing import Any

from plaita.application.use_cases.flows import CatalogEntry
from plaita.domain.errors import UnknownFlowError
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.cli_executions import _name_the_waits, execution_rows

NOW_MS = 1_800_000_000_000
IN_AN_HOUR = NOW_MS + 3_600_000


def waiting_row(**waiting: Any) -> str:
    view = {
        "execution_id": "x-1",
        "flow_id": "f",
        "flow_version": "1",
        "tenant_id": "default",
        "status": "suspended",
        "created_at_ms": NOW_MS,
        "updated_at_ms": NOW_MS,
        "waiting_for": {"node_id": "wait", **waiting},
    }
    return dict(execution_rows(view, now_ms=NOW_MS))["waiting"]


def test_a_sleep_nodes_timer_is_not_called_an_event() -> None:
    row = waiting_row(subscription_id="t-1", wake_at_ms=IN_AN_HOUR, kind="timer")

    assert row.startswith("at node wait (a timer) until ")
    assert "event" not in row


def test_an_event_wait_names_its_event_and_its_timeout() -> None:
    row = waiting_row(
        subscription_id="s-1", wake_at_ms=IN_AN_HOUR, kind="event", event_type="approved"
    )

    assert row.startswith("at node wait for an event approved, at most until ")


def test_an_event_wait_without_a_timeout_has_no_until() -> None:
    assert waiting_row(subscription_id="s-1", kind="event", event_type="paid") == (
        "at node wait for an event paid"
    )


def test_a_wait_whose_flow_could_not_be_read_keeps_the_old_wording() -> None:
    assert waiting_row(subscription_id="s-1") == "at node wait for an event"
    assert waiting_row(wake_at_ms=IN_AN_HOUR).startswith("at node wait until ")


class _Catalog:
    def __init__(self, flow: Flow | None) -> None:
        self._flow = flow

    async def lookup(self, flow_id: str, version: str | None = None) -> CatalogEntry:
        if self._flow is None:
            raise UnknownFlowError(f"flow {flow_id!r} version {version!r} is not registered")
        return CatalogEntry(self._flow, SHARED)


class _Container:
    def __init__(self, flow: Flow | None) -> None:
        self._catalog = _Catalog(flow)

    def flows(self) -> _Catalog:
        return self._catalog


FLOW = Flow.from_document(
    {
        "flow_id": "f",
        "version": "1",
        "start": "nap",
        "nodes": [
            {"id": "nap", "type": "sleep", "duration": 60_000, "next": "ask"},
            {"id": "ask", "type": "event", "event_type": "approved", "next": "done"},
            {"id": "done", "type": "end"},
        ],
    }
)


async def test_show_reads_the_flow_to_name_a_timer_and_an_event() -> None:
    view: dict[str, Any] = {
        "flow_id": "f",
        "flow_version": "1",
        "waiting_for": {"node_id": "nap", "subscription_id": "t-1", "wake_at_ms": IN_AN_HOUR},
        "branch_waits": [{"node_id": "ask", "subscription_id": "s-1", "wake_at_ms": None}],
    }

    await _name_the_waits(_Container(FLOW), view)  # type: ignore[arg-type]

    assert view["waiting_for"]["kind"] == "timer"
    assert view["branch_waits"][0] == {
        "node_id": "ask",
        "subscription_id": "s-1",
        "wake_at_ms": None,
        "kind": "event",
        "event_type": "approved",
    }


async def test_a_flow_that_cannot_be_read_leaves_the_waits_as_they_are() -> None:
    wait = {"node_id": "nap", "subscription_id": "t-1", "wake_at_ms": IN_AN_HOUR}
    view: dict[str, Any] = {"flow_id": "f", "flow_version": "9", "waiting_for": dict(wait)}

    await _name_the_waits(_Container(None), view)  # type: ignore[arg-type]

    assert view["waiting_for"] == wait
