"""The Schedules page in a real headless Chromium (W22, C2): create a schedule through its
form (a bad cron expression is named beside its field), see its next run, run it now, see
the dues a scheduler fired, pause it, and read its next run times on its own page. The
screenshot goes to docs/images/console-schedules.png, which docs/schedules.md embeds."""

from __future__ import annotations

import time
from typing import Any

from playwright.sync_api import Page, expect

from .conftest import ConsoleServer
from .test_console_pages import screenshot, sign_in


def tick(console: ConsoleServer) -> Any:
    """One scheduler tick on the console's container (the page's schedules are its own)."""

    async def work(container: Any) -> Any:
        return await container.scheduler_tick()()

    return console.call(work)


def test_the_schedules_page_creates_runs_pauses_and_shows_a_schedule(
    console: ConsoleServer, page: Page
) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, console, "#/schedules")
    expect(page.get_by_role("heading", name="Schedules", level=1)).to_be_visible()
    expect(page.locator("tbody")).to_contain_text("No schedule yet.")

    form = page.get_by_role("form", name="Create a schedule")
    form.get_by_label("Schedule id").fill("every-second")
    form.get_by_label("Flow").fill("approval")
    form.get_by_label("Cron expression").fill("0 3 * *")
    form.get_by_role("button", name="Create").click()
    expect(form.locator(".field-error:not([hidden])")).to_contain_text("is not a cron expression")

    form.get_by_label("Cron expression").fill("* * * * * *")
    form.get_by_label("Input (JSON)").fill('{"amount": 50}')
    form.get_by_role("button", name="Create").click()
    expect(form.get_by_role("status")).to_contain_text("Created every-second")
    form.get_by_label("Schedule id").fill("nightly")
    form.get_by_label("Cron expression").fill("30 2 * * *")
    form.get_by_label("Time zone").fill("Europe/Berlin")
    form.get_by_label("Overlap").select_option("skip")
    form.get_by_role("button", name="Create").click()
    expect(form.get_by_role("status")).to_contain_text("Created nightly")

    row = page.locator('tr[data-schedule-id="every-second"]')
    expect(row).to_contain_text("active")
    expect(row.locator("td.next-run")).not_to_have_text("never")
    row.get_by_role("button", name="Run every-second now").click()
    expect(page.locator("p.action-status")).to_contain_text("sched:every-second:manual:")

    for _ in range(3):  # a scheduler's ticks, a second apart
        tick(console)
        time.sleep(1.05)
    tick(console)
    expect(row.locator("td.dues")).to_contain_text("started", timeout=10_000)
    expect(row.locator("td.dues")).not_to_contain_text("0 started")
    nightly = page.locator('tr[data-schedule-id="nightly"]')
    nightly.get_by_role("button", name="Pause nightly").click()
    expect(nightly).to_contain_text("paused")
    screenshot(page, "console-schedules.png")

    nightly.get_by_role("link", name="nightly").click()
    expect(page.get_by_role("heading", name="Schedule nightly", level=1)).to_be_visible()
    expect(page.locator("ol.next-runs li")).to_have_count(10)
    expect(page.locator(".schedule-view .summary")).to_contain_text("Europe/Berlin")
    page.get_by_role("button", name="Resume nightly").click()
    expect(page.locator(".schedule-view .summary")).to_contain_text("active")

    page.goto(console.url + "#/schedules/every-second")
    expect(page.locator(".schedule-view .summary")).to_contain_text("Last execution")
    expect(page.locator(".schedule-view .summary .badge.status-completed")).to_be_visible(
        timeout=15_000
    )
    assert errors == [], errors
