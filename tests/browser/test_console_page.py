"""The console page in a real headless Chromium, against a real console (C2).

Drives the approval example end to end the way an operator would: sign in with a token,
start an execution from the form, watch it suspend, publish its decision from the form,
and read the completed execution with its node timeline and flow graph.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from playwright.sync_api import Page, expect

from .conftest import ADMIN_TOKEN, REPO_ROOT, ConsoleServer

README_SCREENSHOT = REPO_ROOT / "docs" / "images" / "console.png"
#: The worker and event filter poll every 20 ms and the page every 2 s: seconds at most.
STATUS_TIMEOUT_MS = 20_000


def _status_badge(page: Page):
    return page.locator(".execution-view .badges .badge").first


def test_operator_starts_an_approval_and_completes_it_with_a_published_decision(
    console: ConsoleServer, page: Page, tmp_path: Path
) -> None:
    page_errors: list[str] = []
    page.on("pageerror", lambda error: page_errors.append(str(error)))

    page.goto(console.url)
    page.get_by_label("API token").fill("not-a-token-of-this-console")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("form.sign-in .form-error")).to_contain_text("does not know that token")

    page.get_by_label("API token").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Executions", level=1)).to_be_visible()
    expect(page.locator("#whoami")).not_to_be_empty()

    page.get_by_role("button", name="Start execution").click()
    dialog = page.get_by_role("dialog", name="Start an execution")
    flow = dialog.get_by_label("Flow")
    expect(flow.locator("option")).to_contain_text(["approval · v1"])
    flow.select_option(value='["approval","1"]')
    dialog.get_by_label("Input (JSON object)").fill("{not json")
    dialog.get_by_role("button", name="Start").click()
    expect(dialog.locator(".field-error:not([hidden])")).to_contain_text("Not valid JSON")
    dialog.get_by_label("Input (JSON object)").fill('{"amount": 5000}')
    dialog.get_by_role("button", name="Start").click()

    expect(page).to_have_url(re.compile(r"#/executions/[^/?]+$"))
    execution_id = page.url.rsplit("/", 1)[1]
    expect(_status_badge(page)).to_have_text("suspended", timeout=STATUS_TIMEOUT_MS)
    expect(page.locator(".waiting")).to_contain_text("approval_decision")

    page.get_by_role("link", name="All executions").click()
    row = page.locator(f'tr[data-execution-id="{execution_id}"]')
    expect(row).to_contain_text("suspended", timeout=STATUS_TIMEOUT_MS)
    row.get_by_role("link", name=execution_id).click()

    form = page.get_by_role("form", name="Publish an event")
    expect(form.get_by_label("Correlation id")).to_have_value(execution_id)
    form.get_by_label("Event type").fill("approval_decision")
    form.get_by_label("Data (JSON object)").fill('{"approved": true}')
    form.get_by_role("button", name="Publish event").click()
    # The page says it, wherever the form is: the event can end the wait (and the offer to
    # publish) before the answer is read.
    expect(page.locator(".action-status")).to_contain_text("Published approval_decision")

    expect(_status_badge(page)).to_have_text("completed", timeout=STATUS_TIMEOUT_MS)
    expect(page.locator(".result")).to_contain_text('outcome: "shipped"')
    timeline = page.locator("svg.timeline")
    expect(timeline).to_be_visible()
    for node in ("request", "check", "wait_decision", "record_decision", "ship", "done"):
        expect(timeline.locator(f'g.bar[data-node="{node}"]')).to_have_count(1)
    graph = page.locator("svg.graph")
    expect(graph).to_be_visible()
    expect(graph.locator("g.node")).to_have_count(9)
    expect(graph.locator('g.node.visited[data-node="ship"]')).to_have_count(1)
    expect(graph.locator('g.node.visited[data-node="reject"]')).to_have_count(0)

    page.mouse.move(0, 0)  # no hover highlight in the picture
    shot = tmp_path / "console.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("PLAITA_UPDATE_SCREENSHOT") == "1":
        README_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, README_SCREENSHOT)

    assert page_errors == [], f"the page raised: {page_errors}"


def test_admin_replays_a_dead_letter_once_from_the_dlq_page(
    console: ConsoleServer, page: Page
) -> None:
    """W10 from the page: the first Replay puts the carrier back, the second is refused."""
    dlq_id = console.dead_letter_start("replayed-from-the-page", {"amount": 250})

    page.goto(console.url)
    page.get_by_label("API token").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("link", name="Dead letters").click()
    expect(page.locator("#queue-stats .stat-dlq_length dd")).to_have_text("1")

    row = page.locator(f'tr[data-dlq-id="{dlq_id}"]')
    expect(row).to_contain_text("poison: seeded by the browser test")
    row.get_by_role("button", name=f"Replay dead letter {dlq_id}").click()
    expect(row.locator(".outcome")).to_contain_text("replayed")

    row.get_by_role("button", name=f"Replay dead letter {dlq_id}").click()
    expect(row.locator(".outcome")).to_contain_text("already_replayed")

    row.get_by_role("link", name="replayed-from-the-page").click()
    expect(_status_badge(page)).to_have_text("completed", timeout=STATUS_TIMEOUT_MS)
