"""The Tenants page in a real headless Chromium (W24, C2): a quota the API refuses is named
in the form, a valid one creates the tenant's record, suspending it (after a confirmation)
holds a start of the tenant, resuming gives it back and the execution completes. The
screenshot goes to docs/images/console-tenants.png, which docs/console.md embeds."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED

from .conftest import ACME_ADMIN_TOKEN, ConsoleServer
from .test_console_pages import STATUS_TIMEOUT_MS, badge, screenshot, sign_in

#: A flow that ends at its first step: an execution that completes as soon as a worker runs it.
HELLO_FLOW: dict[str, Any] = {
    "flow_id": "hello",
    "version": "1",
    "start": "done",
    "nodes": [{"id": "done", "type": "end"}],
}


def start_for_acme(console: ConsoleServer) -> str:
    """Register the hello flow and start one execution of it as tenant acme."""

    async def work(container: Any) -> str:
        from plaita.application.tenancy import tenant_scope

        await container.flows().register(Flow.from_document(HELLO_FLOW), owner=SHARED)
        with tenant_scope("acme"):
            started = await container.start_execution()("hello", params={}, tenant_id="acme")
        return str(started.execution_id)

    return console.call(work)


def test_the_tenants_page_sets_a_quota_suspends_holds_a_start_and_resumes(
    console: ConsoleServer, page: Page
) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, console, "#/tenants")
    page.get_by_role("link", name="Tenants").click()
    expect(page.get_by_role("heading", name="Tenants", level=1)).to_be_visible()
    expect(page.locator("tbody")).to_contain_text("No tenant has a status or a quota yet.")

    form = page.get_by_role("form", name="Set a quota")
    form.get_by_label("Tenant").fill("acme")
    form.get_by_label("Maximum running executions").fill("0")
    form.get_by_role("button", name="Set quota").click()
    expect(form.locator(".form-error")).to_contain_text("RequestValidationError")
    expect(form.locator(".field-error:not([hidden])")).to_contain_text("greater than or equal to 1")
    form.get_by_label("Maximum running executions").fill("ten")
    form.get_by_role("button", name="Set quota").click()
    expect(form.locator(".field-error:not([hidden])")).to_contain_text("valid integer")

    form.get_by_label("Maximum running executions").fill("25")
    form.get_by_role("button", name="Set quota").click()
    expect(page.locator("p.action-status")).to_contain_text(
        "acme may now run at most 25 executions at once"
    )
    expect(form.locator(".form-error")).to_be_hidden()
    row = page.locator('tr[data-tenant-id="acme"]')
    expect(row.locator("td.tenant-status")).to_have_text("active")
    expect(row.locator("td.quota")).to_have_text("25 running")
    expect(row.locator("td.held")).to_have_text("none")

    form.get_by_label("Tenant").fill("globex")
    form.get_by_role("button", name="Clear quota").click()
    expect(page.locator("p.action-status")).to_contain_text("Cleared the quota of globex")
    expect(page.locator('tr[data-tenant-id="globex"] td.quota')).to_have_text("no limit")

    row.get_by_role("button", name="Suspend acme").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("starts are accepted and held")
    expect(dialog).to_contain_text("nothing is lost")
    dialog.get_by_role("button", name="Suspend").click()
    expect(row.locator("td.tenant-status")).to_have_text("suspended")
    expect(page.locator("p.action-status")).to_contain_text("Suspended acme")

    execution_id = start_for_acme(console)
    expect(row.locator("td.held")).to_have_text("1 held", timeout=STATUS_TIMEOUT_MS)
    expect(row.locator("td.workers")).to_contain_text("Hold its work until it is resumed")
    screenshot(page, "console-tenants.png")

    row.get_by_role("button", name="Resume acme").click()
    expect(row.locator("td.tenant-status")).to_have_text("active")
    expect(page.locator("p.action-status")).to_contain_text(
        "its held work (1) is back in the queue"
    )
    expect(row.locator("td.held")).to_have_text("none")

    page.locator("#tenant").fill("acme")
    page.locator("#tenant").press("Enter")
    page.goto(console.url + f"#/executions/{execution_id}")
    expect(badge(page)).to_have_text("completed", timeout=STATUS_TIMEOUT_MS)
    assert errors == [], errors


def test_a_tenants_own_admin_reads_its_tenant_and_is_told_why_it_cannot_change_it(
    console: ConsoleServer, page: Page
) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, console, "#/tenants")
    form = page.get_by_role("form", name="Set a quota")
    form.get_by_label("Tenant").fill("acme")
    form.get_by_label("Maximum running executions").fill("3")
    form.get_by_role("button", name="Set quota").click()
    expect(page.locator('tr[data-tenant-id="acme"] td.quota')).to_have_text("3 running")
    page.get_by_role("button", name="Sign out").click()

    page.evaluate("sessionStorage.setItem('plaita.console.tenant', 'acme')")  # its own tenant
    page.get_by_label("API token").fill(ACME_ADMIN_TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Tenants", level=1)).to_be_visible()
    row = page.locator('tr[data-tenant-id="acme"]')
    expect(row.locator("td.quota")).to_have_text("3 running")
    expect(page.locator(".view")).to_contain_text(
        "Your token can read tenants, not change them: that needs an admin of every tenant."
    )
    expect(row.get_by_role("button")).to_have_count(0)
    expect(page.get_by_role("form", name="Set a quota")).to_have_count(0)
    assert errors == [], errors
