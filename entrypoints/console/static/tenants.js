// The tenants page: each tenant's status and quota as the deployment keeps them, its held
// work and what the workers do with its work now; for an admin of every tenant, suspending,
// resuming and setting a quota (/api/v1/tenants).

import { h, renderIfChanged } from "./dom.js";
import { formatAge, formatTime } from "./format.js";
import { clearErrors, confirmAction, errorRegion, field, setBusy, setFieldError, showError } from "./forms.js";

const MAX_QUOTA = 1_000_000;

/** What a worker of this deployment does with the tenant's work, by the API's `workers`. */
const WORKERS = {
  run: "Run its work",
  park: "Hold its work until it is resumed",
  hold: "Hold its work",
};

const OUTCOMES = {
  suspended: (id) => `Suspended ${id}: its work is held until you resume it.`,
  already_suspended: (id) => `${id} was already suspended.`,
  resumed: (id, answer) => `Resumed ${id}: ${backToWork(answer.requeued)}.`,
  already_active: (id, answer) => `${id} was already active${answer.requeued ? `; ${backToWork(answer.requeued)}` : ""}.`,
  quota_set: (id, answer) =>
    answer.max_running == null
      ? `Cleared the quota of ${id}: no limit.`
      : `${id} may now run at most ${answer.max_running.toLocaleString()} executions at once.`,
  quota_unchanged: (id, answer) => `${id} already had ${quota(answer.max_running)}.`,
};

function tenantPath(tenantId) {
  return `tenants/${encodeURIComponent(tenantId)}`;
}

function backToWork(count) {
  return count ? `its held work (${count.toLocaleString()}) is back in the queue` : "it had no held work";
}

function quota(maxRunning) {
  return maxRunning == null ? "no limit" : `a quota of ${maxRunning.toLocaleString()}`;
}

function statusBadge(tenant) {
  return tenant.status === "suspended"
    ? h("span", { class: "badge status-suspended", text: "suspended" })
    : h("span", { class: "badge status-running", text: "active" });
}

function workersCell(tenant) {
  return [
    WORKERS[tenant.workers] ?? tenant.workers,
    // "hold": a status of another deployment; the API says what to do about it.
    tenant.workers === "hold" ? [h("br"), h("span", { class: "muted small-text", text: tenant.workers_detail })] : null,
  ];
}

function updatedCell(tenant) {
  if (!tenant.updated_at_ms) return "—";
  return [
    h("span", { title: formatTime(tenant.updated_at_ms), text: formatAge(tenant.updated_at_ms) }),
    tenant.epoch == null ? null : [h("br"), h("span", { class: "muted small-text", text: `deployment epoch ${tenant.epoch}` })],
  ];
}

// Suspend or Resume, and "Change quota" (which fills the quota form).
function actionButtons(ctx, tenant, { act, editQuota }) {
  const id = tenant.tenant_id;
  const buttons = [];
  if (tenant.status === "suspended") {
    buttons.push(
      h("button", {
        type: "button",
        class: "small",
        text: "Resume",
        "aria-label": `Resume ${id}`,
        dataset: { focusKey: `resume-${id}` },
        onclick: () => act("Resuming", () => ctx.api.post(`${tenantPath(id)}/resume`, {}, { tenant: false })),
      }),
    );
  } else if (id !== "default") {
    buttons.push(
      h("button", {
        type: "button",
        class: "danger small",
        text: "Suspend",
        "aria-label": `Suspend ${id}`,
        dataset: { focusKey: `suspend-${id}` },
        onclick: async () => {
          const answer = await confirmAction({
            title: `Suspend tenant ${id}?`,
            message:
              "No step of its executions runs until you resume it. Its new starts are accepted and held, " +
              "and nothing is lost: resuming gives all of it back to the workers. Cancelling still works.",
            confirmLabel: "Suspend",
          });
          if (answer.confirmed) act("Suspending", () => ctx.api.post(`${tenantPath(id)}/suspend`, {}, { tenant: false }));
        },
      }),
    );
  }
  buttons.push(
    h("button", {
      type: "button",
      class: "secondary small",
      text: "Change quota",
      "aria-label": `Change the quota of ${id}`,
      dataset: { focusKey: `quota-${id}` },
      onclick: () => editQuota(tenant),
    }),
  );
  return h("div", { class: "buttons row-actions" }, buttons);
}

export function tenantsView(ctx) {
  const admin = ctx.canForEveryTenant();
  const loadError = h("div", { class: "form-error", role: "alert", hidden: true });
  const status = h("p", { class: "action-status", role: "status" });
  const tbody = h("tbody");
  const quotaForm = admin ? quotaFormFor(ctx, (message) => done(message)) : null;
  let items = [];

  async function act(label, run) {
    status.textContent = `${label}…`;
    try {
      const answer = await run();
      status.textContent = OUTCOMES[answer.outcome]?.(answer.tenant_id, answer) ?? `${answer.tenant_id}: ${answer.outcome}.`;
    } catch (error) {
      status.textContent = `${error.error}: ${error.message}`;
    }
    await refresh();
  }

  async function done(message) {
    status.textContent = message;
    await refresh();
  }

  const columns = ["Tenant", "Status", "Quota", "Held work", "Workers", "Changed", admin ? "" : null].filter((name) => name !== null);
  const root = h(
    "section",
    { class: "view", "aria-labelledby": "view-title" },
    h("div", { class: "view-head" }, h("h1", { id: "view-title", tabindex: -1, text: "Tenants" })),
    h("p", {
      class: "muted",
      text:
        "Each tenant's status and quota, as the deployment keeps them. A suspended tenant's starts are accepted and " +
        "held, and no step of its executions runs until it is resumed. A tenant not listed is active, with no limit.",
    }),
    admin
      ? null
      : h("p", { class: "muted", text: "Your token can read tenants, not change them: that needs an admin of every tenant." }),
    loadError,
    status,
    h(
      "div",
      { class: "table-wrap tenants-table" },
      h(
        "table",
        { class: "tenants" },
        h("caption", { class: "visually-hidden", text: "Tenants" }),
        h("thead", {}, h("tr", {}, columns.map((name) => h("th", { scope: "col", text: name })))),
        tbody,
      ),
    ),
    quotaForm?.form,
  );

  async function refresh() {
    try {
      items = (await ctx.api.get("tenants")).items ?? [];
      loadError.hidden = true;
    } catch (error) {
      loadError.replaceChildren(h("strong", { text: `${error.error}: ` }), error.message);
      loadError.hidden = false;
      return;
    }
    quotaForm?.known(items.map((tenant) => tenant.tenant_id));
    renderIfChanged(tbody, [items, admin, Math.floor(Date.now() / 10_000)], () =>
      items.length
        ? items.map((tenant) =>
            h(
              "tr",
              { dataset: { tenantId: tenant.tenant_id } },
              h("td", { class: "mono", text: tenant.tenant_id }),
              h("td", { class: "tenant-status" }, statusBadge(tenant)),
              h("td", { class: "quota", text: tenant.max_running == null ? "no limit" : `${tenant.max_running.toLocaleString()} running` }),
              h("td", { class: "held", text: tenant.parked ? `${tenant.parked.toLocaleString()} held` : "none" }),
              h("td", { class: "workers" }, workersCell(tenant)),
              h("td", {}, updatedCell(tenant)),
              admin ? h("td", {}, actionButtons(ctx, tenant, { act, editQuota: quotaForm.edit })) : null,
            ),
          )
        : h("tr", {}, h("td", { colspan: columns.length, class: "empty", text: "No tenant has a status or a quota yet." })),
    );
  }
  return { root, refresh };
}

// The quota form: a tenant (a listed one or any other) and its maximum of running
// executions, or "Clear quota". The API decides what is valid and names what is not.
function quotaFormFor(ctx, onDone) {
  const tenantId = h("input", { name: "tenant_id", required: true, autocomplete: "off", spellcheck: "false", list: "quota-tenants" });
  const tenants = h("datalist", { id: "quota-tenants" });
  const maxRunning = h("input", { name: "max_running", autocomplete: "off", inputmode: "numeric", size: 9 });
  const form = h(
    "form",
    { class: "card register-form quota-form", novalidate: true, "aria-label": "Set a quota" },
    h("h2", { text: "Set a quota" }),
    h("p", {
      class: "muted",
      text: "At most this many of the tenant's executions run at once; the others wait their turn, never dropped.",
    }),
    field("Tenant", tenantId),
    tenants,
    field("Maximum running executions", maxRunning, `A whole number from 1 to ${MAX_QUOTA.toLocaleString()}.`),
    errorRegion(),
    h(
      "div",
      { class: "buttons" },
      h("button", { type: "submit", text: "Set quota" }),
      h("button", { type: "button", class: "secondary", text: "Clear quota", onclick: () => send(null) }),
    ),
  );

  async function send(value) {
    clearErrors(form);
    const id = tenantId.value.trim();
    if (!id) {
      setFieldError(tenantId, "Name the tenant.");
      tenantId.focus();
      return;
    }
    setBusy(form, true);
    try {
      const answer = await ctx.api.put(`${tenantPath(id)}/quota`, { max_running: value }, { tenant: false });
      if (value === null) maxRunning.value = "";
      await onDone(OUTCOMES[answer.outcome]?.(answer.tenant_id, answer) ?? `${answer.tenant_id}: ${answer.outcome}.`);
    } catch (error) {
      showError(form, error);
    } finally {
      setBusy(form, false);
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = maxRunning.value.trim().replaceAll(",", "");
    if (!text) {
      clearErrors(form);
      setFieldError(maxRunning, `Enter a whole number from 1 to ${MAX_QUOTA.toLocaleString()}, or clear the quota.`);
      maxRunning.focus();
      return;
    }
    // A number goes as a number, anything else as it was typed: the API names what is wrong.
    send(/^-?\d+$/.test(text) ? Number(text) : text);
  });

  return {
    form,
    known(ids) {
      renderIfChanged(tenants, ids, () => ids.map((id) => h("option", { value: id })));
    },
    edit(tenant) {
      clearErrors(form);
      tenantId.value = tenant.tenant_id;
      maxRunning.value = tenant.max_running ?? "";
      maxRunning.focus();
    },
  };
}
