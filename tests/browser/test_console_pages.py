"""The console pages an operator reaches for first, in a real headless Chromium (C2, issue 16).

Each test drives one page as an operator would and saves its screenshot into docs/images/,
which docs/console.md embeds: a failing-then-retrying execution with its attempts and
traceback, the flows page drawing a graph, the search finding an execution by an input
field, the API docs rendering with the network blocked, and a completed execution whose
absent actions say why.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import Page, Route, expect

from .conftest import ADMIN_TOKEN, FLAKY_FAILURES, HOLD_RELEASED, REPO_ROOT, ConsoleServer

IMAGES = REPO_ROOT / "docs" / "images"
#: Retries back off 1 s then 2 s, the worker polls every 20 ms and the page every 2 s.
STATUS_TIMEOUT_MS = 25_000


def sign_in(page: Page, console: ConsoleServer, hash_: str = "") -> None:
    page.goto(console.url + hash_)
    page.get_by_label("API token").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#whoami")).not_to_be_empty()


def start(console: ConsoleServer, flow_id: str, params: dict[str, Any]) -> str:
    async def work(container: Any) -> str:
        from plaita.application.tenancy import tenant_scope

        with tenant_scope("default"):
            started = await container.start_execution()(flow_id, params=params)
        return str(started.execution_id)

    return console.call(work)


def screenshot(page: Page, name: str) -> Path:
    page.mouse.move(0, 0)  # no hover highlight in the picture
    shot = IMAGES / name
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    return shot


def badge(page: Page):
    return page.locator(".execution-view .badges .badge").first


def test_a_failing_then_retrying_execution_shows_its_attempts_and_traceback(
    console: ConsoleServer, page: Page
) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    execution_id = start(console, "lookup", {"customer": {"id": 42}})
    sign_in(page, console, f"#/executions/{execution_id}")

    retry = page.locator(".retry-box .callout.retrying")
    expect(retry).to_contain_text("ConnectionError", timeout=STATUS_TIMEOUT_MS)
    expect(retry.locator(".next-retry")).to_be_visible()

    expect(badge(page)).to_have_text("completed", timeout=STATUS_TIMEOUT_MS)
    history = page.locator("ol.history")
    failed = history.locator('li[data-kind="node_failed"]')
    expect(failed).to_have_count(FLAKY_FAILURES)
    expect(history.locator('li[data-kind="retry_scheduled"]')).to_have_count(FLAKY_FAILURES)
    expect(history.locator('li[data-kind="node_started"][data-node="fetch"]')).to_have_count(
        FLAKY_FAILURES + 1
    )
    expect(failed.first).to_contain_text("attempt 1")
    expect(failed.nth(1)).to_contain_text("attempt 2")
    expect(history.locator('li[data-kind="node_finished"]').first).to_contain_text("attempt 3")
    failed.first.locator("summary", has_text="Traceback").click()
    expect(failed.first.locator("details.traceback pre")).to_contain_text("ConnectionError")
    expect(history.locator('li[data-kind="ended"]')).to_contain_text("completed")

    history.locator('li[data-kind="node_finished"] button[data-node="fetch"]').click()
    inspector = page.locator(".inspector")
    expect(inspector).to_contain_text("Parameters")
    # The params its handler got (the template filled in), from the history.
    expect(inspector).to_contain_text("As its handler got them at attempt 3")
    expect(inspector.locator(".json-view").first).to_contain_text("42")
    expect(inspector.locator(".json-view").last).to_contain_text("gold")
    screenshot(page, "console-execution-retries.png")
    assert errors == [], errors


def test_the_flows_page_lists_versions_registers_a_definition_and_draws_a_graph(
    console: ConsoleServer, page: Page
) -> None:
    sign_in(page, console, "#/flows")
    expect(page.get_by_role("heading", name="Flows", level=1)).to_be_visible()
    expect(page.locator('tr[data-flow-id="approval"]')).to_contain_text("v1")

    form = page.get_by_role("form", name="Register a flow")
    form.get_by_label("Definition (JSON)").fill("{not json")
    form.get_by_role("button", name="Register").click()
    expect(form.locator(".field-error:not([hidden])")).to_contain_text("Not valid JSON")
    document = (
        '{"flow_id": "hello", "version": "2", "start": "greet", "nodes": ['
        '{"id": "greet", "type": "if", "condition": "1 == 1", "then": "done", "else": "done"},'
        '{"id": "done", "type": "end"}]}'
    )
    form.get_by_label("Definition (JSON)").fill(document)
    form.get_by_role("button", name="Register").click()
    expect(form.get_by_role("status")).to_contain_text("Registered hello v2")
    expect(page.locator('tr[data-flow-id="hello"]')).to_be_visible()

    page.locator('tr[data-flow-id="approval"]').get_by_role("link", name="approval").click()
    expect(page.locator(".version-list li")).to_have_count(1)
    expect(page.locator('.version-list li[data-version="1"] .badge.latest')).to_be_visible()
    graph = page.locator(".flow-view svg.graph")
    expect(graph.locator("g.node")).to_have_count(9)
    expect(page.get_by_role("link", name="Its executions →")).to_have_attribute(
        "href", "#/executions?flow_id=approval"
    )
    screenshot(page, "console-flows.png")


def test_search_finds_an_execution_by_an_input_field(console: ConsoleServer, page: Page) -> None:
    wanted = start(console, "approval", {"amount": 250, "customer": {"id": 42}})
    for amount in (260, 270):
        start(console, "approval", {"amount": amount, "customer": {"id": 7}})
    sign_in(page, console)
    expect(page.locator("tbody tr[data-execution-id]")).to_have_count(3)

    search = page.get_by_role("search", name="Search executions")
    search.get_by_label("Input field").fill("customer.id")
    search.get_by_role("button", name="Search").click()
    expect(search.locator(".field-error:not([hidden])")).to_contain_text("is not a condition")

    search.get_by_label("Input field").fill("customer.id = 42")
    search.get_by_role("button", name="Search").click()
    rows = page.locator("tbody tr[data-execution-id]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-execution-id", wanted)
    expect(page).to_have_url(re.compile(r"input=customer\.id"))

    page.get_by_role("button", name="Cancel all…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("1 execution matches this search")
    screenshot(page, "console-search.png")
    dialog.get_by_role("button", name="Cancel", exact=True).click()

    search.get_by_label("Execution id").fill(wanted)
    search.get_by_role("button", name="Search").click()
    expect(page).to_have_url(re.compile(rf"#/executions/{re.escape(wanted)}$"))


def test_the_api_docs_render_with_the_network_blocked(console: ConsoleServer, page: Page) -> None:
    blocked: list[str] = []

    def only_loopback(route: Route) -> None:
        host = urlsplit(route.request.url).hostname
        if host in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", only_loopback)
    page.goto(console.url + "docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("plaita console")
    expect(page.locator(".swagger-ui .opblock-tag-section").first).to_be_visible()
    assert blocked == [], f"/docs asked the network for {blocked}"
    screenshot(page, "console-docs.png")


def test_a_completed_execution_offers_only_what_works_and_says_why(
    console: ConsoleServer, page: Page
) -> None:
    execution_id = start(console, "approval", {"amount": 10})
    sign_in(page, console, f"#/executions/{execution_id}")
    expect(badge(page)).to_have_text("completed", timeout=STATUS_TIMEOUT_MS)

    actions = page.locator(".execution-view .actions")
    expect(actions.locator('[data-action="delete"]')).to_be_visible()
    for absent in ("resume", "retry", "retry_from_node", "cancel", "pause"):
        expect(actions.locator(f'[data-action="{absent}"]')).to_have_count(0)
    expect(page.get_by_role("form", name="Publish an event")).to_be_hidden()
    page.locator(".absent-actions summary").click()
    reasons = page.locator(".absent-actions")
    expect(reasons.locator('li[data-action="retry_from_node"]')).to_contain_text("It completed")
    expect(reasons.locator('li[data-action="publish_event"]')).to_contain_text("It has ended")
    text = page.locator("main").inner_text()
    for jargon in ("carrier", "fence", "generation", "W7", "W23", "V8", "I0"):
        assert jargon not in text, jargon
    screenshot(page, "console-actions.png")


def test_an_urgent_starts_history_says_its_priority(console: ConsoleServer, page: Page) -> None:
    async def work(container: Any) -> str:
        from plaita.application.tenancy import tenant_scope

        with tenant_scope("default"):
            started = await container.start_execution()(
                "lookup", params={"customer": {"id": 7}}, priority="high"
            )
        return str(started.execution_id)

    execution_id = console.call(work)
    sign_in(page, console, f"#/executions/{execution_id}")

    accepted = page.locator('ol.history li[data-kind="accepted"]')
    expect(accepted).to_contain_text("priority high", timeout=STATUS_TIMEOUT_MS)


def test_an_execution_held_back_by_a_concurrency_key_says_why_and_by_whom(
    console: ConsoleServer, page: Page
) -> None:
    """Two invoice runs for one customer with a limit of one: the second waits for the
    first's slot, and its page names the key, the holder and what frees it."""
    HOLD_RELEASED.clear()
    try:
        first = start(console, "invoice_run", {"customer": "acme"})
        second = start(console, "invoice_run", {"customer": "acme"})
        sign_in(page, console, f"#/executions/{second}")
        held = page.locator(".execution-view .callout.held-back")
        expect(held).to_be_visible(timeout=STATUS_TIMEOUT_MS)
        expect(held).to_contain_text("Waiting for a concurrency slot")
        expect(held.get_by_role("link", name=first)).to_be_visible()
        text = page.locator("main").inner_text()
        for jargon in ("carrier", "fence", "generation", "E1a", "W2", "I0"):
            assert jargon not in text, jargon
        screenshot(page, "console-held-back.png")
    finally:
        HOLD_RELEASED.set()
    expect(badge(page)).to_have_text("completed", timeout=STATUS_TIMEOUT_MS)
    expect(page.locator(".execution-view .callout.held-back")).to_have_count(0)
