"""A parent's and a child's execution pages in a real headless Chromium (C2, E13, E14): the
parent lists its children, paged, and draws its subflow and map nodes by their child flows;
a child's page links back to the execution that started it. Screenshots go to docs/images/
(docs/console.md embeds them)."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect

from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED

from .conftest import ConsoleServer
from .test_console_pages import IMAGES, STATUS_TIMEOUT_MS, badge, sign_in, start

LINES = 25
PER_LINE: dict[str, Any] = {
    "flow_id": "per_line",
    "start": "price",
    "nodes": [{"id": "price", "type": "end", "output": "item * 2"}],
}
KYC_CHECK: dict[str, Any] = {
    "flow_id": "kyc_check",
    "start": "review",
    "nodes": [
        {"id": "review", "type": "event", "event_type": "kyc.decided", "next": "done"},
        {"id": "done", "type": "end", "output": "$NODE['review']['data']"},
    ],
}
ONBOARDING: dict[str, Any] = {
    "flow_id": "onboarding",
    "start": "lines",
    "nodes": [
        {
            "id": "lines",
            "type": "map",
            "items": "$input.lines",
            "flow_id": "per_line",
            "concurrency": 10,
            "next": "kyc",
        },
        {
            "id": "kyc",
            "type": "subflow",
            "flow_id": "kyc_check",
            "input": {"customer": "${input.customer}"},
            "next": "done",
        },
        {"id": "done", "type": "end", "output": "$NODE['kyc']"},
    ],
}


def top_of_page(page: Page, name: str, *, height: int) -> None:
    """The page's first ``height`` pixels: the part the docs show (a parent's history of 25
    children is long)."""
    page.mouse.move(0, 0)
    page.set_viewport_size({"width": 1280, "height": height})
    page.evaluate("window.scrollTo(0, 0)")
    shot = IMAGES / name
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000


def open_waiting_parent(console: ConsoleServer, page: Page) -> tuple[str, list[str]]:
    """An onboarding over 25 lines, its page open once it waits for its KYC child; and the
    errors the page will raise."""

    async def register(container: Any) -> None:
        for document in (PER_LINE, KYC_CHECK, ONBOARDING):
            await container.flows().register(Flow.from_document(document), owner=SHARED)

    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    console.call(register)
    parent = start(console, "onboarding", {"lines": list(range(LINES)), "customer": "c-42"})
    sign_in(page, console, f"#/executions/{parent}")
    expect(badge(page)).to_have_text("suspended", timeout=STATUS_TIMEOUT_MS)
    return parent, errors


def test_a_parents_page_lists_its_children_and_draws_its_child_nodes(
    console: ConsoleServer, page: Page
) -> None:
    parent, errors = open_waiting_parent(console, page)

    waiting = page.locator(".waiting .callout")
    expect(waiting).to_have_text(
        f"Waiting at node kyc for its child execution {parent}.kyc to end."
    )
    expect(waiting.get_by_role("link", name=f"{parent}.kyc")).to_be_visible()
    section = page.locator("section.children")
    rows = section.locator("tbody tr[data-execution-id]")
    expect(rows).to_have_count(20)  # one page; the map's items in order
    expect(rows.first).to_have_attribute("data-execution-id", f"{parent}.lines.0")
    expect(section.get_by_role("status")).to_have_text("20 shown, more available")
    expect(rows.first).to_contain_text("completed")
    graph = page.locator(".execution-view svg.graph")
    expect(graph.locator("g.node.type-map")).to_contain_text("map \N{MULTIPLICATION SIGN} per_line")
    expect(graph.locator("g.node.type-map")).to_contain_text("10 at a time")
    expect(graph.locator("g.node.type-map .node-stack")).to_have_count(2)
    expect(graph.locator("g.node.type-subflow")).to_contain_text("subflow → kyc_check")
    expect(graph.locator("g.node.type-subflow .node-bar")).to_have_count(2)
    top_of_page(page, "console-children.png", height=1600)
    graph.locator("xpath=ancestor::figure").screenshot(
        path=str(IMAGES / "console-children-graph.png")
    )

    section.get_by_role("button", name="More").click()
    expect(rows).to_have_count(LINES + 1)
    expect(section.get_by_role("button", name="More")).to_be_hidden()
    expect(rows.nth(LINES - 1)).to_have_attribute("data-execution-id", f"{parent}.lines.24")
    last = rows.last  # the subflow's child, after the map's: the flow's order
    expect(last).to_have_attribute("data-execution-id", f"{parent}.kyc")
    expect(last).to_contain_text("suspended")
    expect(last).to_contain_text("kyc_check")
    expect(page.locator(".parent-line")).to_have_count(0)  # no one started the parent
    assert errors == [], errors


def test_a_childs_page_links_to_the_execution_that_started_it(
    console: ConsoleServer, page: Page
) -> None:
    parent, errors = open_waiting_parent(console, page)

    page.locator("section.children").get_by_role("link", name=f"{parent}.lines.3").click()
    expect(page.locator("#view-title")).to_contain_text(f"{parent}.lines.3")
    started_by = page.locator(".parent-line")
    expect(started_by).to_have_text(f"Started by {parent} (node lines, item 3)")
    expect(badge(page)).to_have_text("completed", timeout=STATUS_TIMEOUT_MS)
    expect(page.locator("section.children")).to_be_hidden()  # per_line starts no children
    top_of_page(page, "console-child.png", height=640)

    started_by.get_by_role("link", name=parent).click()
    expect(page).to_have_url(re.compile(f"#/executions/{re.escape(parent)}$"))
    expect(page.locator("#view-title")).to_contain_text(parent)
    expect(page.locator("section.children")).to_be_visible()

    page.goto(f"{console.url}#/executions/{parent}.kyc")
    expect(page.locator(".parent-line")).to_have_text(f"Started by {parent} (node kyc)")
    text = page.locator("main").inner_text()
    for jargon in ("E13", "E14", "C2", "resume_type"):
        assert jargon not in text, jargon
    assert errors == [], errors
