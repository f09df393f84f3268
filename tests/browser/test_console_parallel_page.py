"""A parallel node's execution page in a real headless Chromium (C2, E12): the graph draws
the fork, its two branches and their join; while one branch waits and the other has
arrived, the page says what it waits for. The screenshot goes to docs/images/."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED

from .conftest import ConsoleServer
from .test_console_pages import IMAGES, STATUS_TIMEOUT_MS, badge, sign_in, start

APPROVALS: dict[str, Any] = {
    "flow_id": "two_approvals",
    "start": "fan",
    "nodes": [
        {"id": "fan", "type": "parallel", "branches": ["legal", "finance"], "join": "both"},
        {"id": "legal", "type": "event", "event_type": "legal.ok", "next": "both"},
        {"id": "finance", "type": "sleep", "duration": 1, "next": "both"},
        {"id": "both", "type": "end"},
    ],
}


def test_a_parallel_nodes_branches_are_drawn_and_the_waiting_branch_named(
    console: ConsoleServer, page: Page
) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    async def register(container: Any) -> None:
        await container.flows().register(Flow.from_document(APPROVALS), owner=SHARED)

    console.call(register)
    execution = start(console, "two_approvals", {})
    sign_in(page, console, f"#/executions/{execution}")
    expect(badge(page)).to_have_text("suspended", timeout=STATUS_TIMEOUT_MS)
    expect(page.locator(".waiting .callout")).to_contain_text("legal")
    graph = page.locator(".execution-view svg.graph")
    for node in ("fan", "legal", "finance", "both"):
        expect(graph.locator(f"g.node[data-node='{node}']")).to_have_count(1)
    expect(graph.locator("g.node.type-parallel")).to_contain_text("2 branches")
    expect(graph.locator("g.edge.join")).to_have_count(1)  # where the branches meet
    graph.locator("xpath=ancestor::figure").screenshot(
        path=str(IMAGES / "console-parallel-graph.png")
    )
    assert errors == [], errors
