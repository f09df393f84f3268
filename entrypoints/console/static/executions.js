// The executions page: live table, filters, cursor pagination and the start form.

import { h, renderIfChanged, swap } from "./dom.js";
import { formatAge, formatTime } from "./format.js";
import {
  clearErrors,
  confirmAction,
  errorRegion,
  field,
  jsonTextarea,
  readJsonObject,
  setBusy,
  setFieldError,
  showError,
} from "./forms.js";
import { pageParams, shownText } from "./paging.js";

const PAGE_SIZE = 50;
export const STATUSES = ["pending", "running", "suspended", "completed", "error", "cancelled"];
const SEARCH_KEYS = ["flow_id", "status", "created_from_ms", "created_to_ms", "input"];

// The statuses the API takes, from its OpenAPI document (a status added later shows up).
let statusesPromise = null;
function knownStatuses() {
  statusesPromise ??= fetch(new URL("openapi.json", document.baseURI))
    .then((response) => response.json())
    .then((spec) => spec?.components?.schemas?.ExecutionStatus?.enum ?? STATUSES)
    .catch(() => STATUSES);
  return statusesPromise;
}

// <input type="datetime-local"> reads local time without a zone: its value ⇄ epoch ms.
function localInput(ms) {
  if (!ms) return "";
  const date = new Date(Number(ms));
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}
function fromLocalInput(value, { end = false } = {}) {
  if (!value) return "";
  const ms = new Date(value).getTime();
  if (Number.isNaN(ms)) return "";
  // "to 10:05" keeps the whole minute 10:05.
  return String(end ? ms + 59_999 : ms);
}

export function statusBadge(status, extra = "") {
  return h("span", { class: `badge status-${status} ${extra}`.trim(), text: status });
}

// An option's value names the flow and its version: ["approval","1"].
function flowKey(flow) {
  return JSON.stringify([flow.flow_id, flow.version]);
}

// Whose the definition is: the tenant's own copy, or the deployment-wide one.
function flowLabel(flow) {
  const whose = flow.shared ? "shared" : `${flow.tenant_id}'s own`;
  return `${flow.flow_id} · v${flow.version} · ${whose}`;
}

export function executionsView(ctx, query) {
  const filters = Object.fromEntries(SEARCH_KEYS.map((key) => [key, query.get(key) ?? ""]));
  let items = [];
  let nextCursor = null;
  let sequence = 0;

  const idInput = h("input", { name: "execution_id", type: "search", autocomplete: "off", placeholder: "execution id" });
  const flowSelect = h("select", { name: "flow_id" }, h("option", { value: "", text: "Any flow" }));
  const statusSelect = h(
    "select",
    { name: "status" },
    h("option", { value: "", text: "Any status" }),
    STATUSES.map((status) => h("option", { value: status, text: status })),
  );
  statusSelect.value = filters.status;
  knownStatuses().then((statuses) => {
    swap(
      statusSelect,
      h("option", { value: "", text: "Any status" }),
      statuses.map((status) => h("option", { value: status, text: status })),
    );
    statusSelect.value = filters.status;
  });
  const fromInput = h("input", { name: "created_from_ms", type: "datetime-local" });
  const toInput = h("input", { name: "created_to_ms", type: "datetime-local" });
  fromInput.value = localInput(filters.created_from_ms);
  toInput.value = localInput(filters.created_to_ms);
  const inputCondition = h("input", {
    name: "input",
    type: "search",
    autocomplete: "off",
    placeholder: "customer.id = 42",
    size: 18,
  });
  inputCondition.value = filters.input;
  const searchError = errorRegion();
  const filterForm = h(
    "form",
    { class: "filters search", role: "search", "aria-label": "Search executions", novalidate: true },
    field("Execution id", idInput, "Opens it."),
    field("Flow", flowSelect),
    field("Status", statusSelect),
    field("Created from", fromInput),
    field("Created to", toInput),
    field("Input field", inputCondition, "field = value, e.g. customer.id = 42"),
    h("div", { class: "buttons" }, h("button", { type: "submit", text: "Search" }), h("button", { type: "button", class: "secondary", text: "Clear", onclick: () => clearSearch() })),
    searchError,
  );
  const applyFilters = (event) => {
    event?.preventDefault();
    const id = idInput.value.trim();
    if (id) {
      ctx.navigate(`#/executions/${encodeURIComponent(id)}`);
      return;
    }
    filters.flow_id = flowSelect.value;
    filters.status = statusSelect.value;
    filters.created_from_ms = fromLocalInput(fromInput.value);
    filters.created_to_ms = fromLocalInput(toInput.value, { end: true });
    filters.input = inputCondition.value.trim();
    const params = new URLSearchParams();
    for (const key of SEARCH_KEYS) if (filters[key]) params.set(key, filters[key]);
    history.replaceState(null, "", `#/executions${params.size ? `?${params}` : ""}`);
    items = [];
    nextCursor = null;
    load();
  };
  function clearSearch() {
    for (const control of [idInput, fromInput, toInput, inputCondition]) control.value = "";
    flowSelect.value = "";
    statusSelect.value = "";
    applyFilters();
  }
  filterForm.addEventListener("submit", applyFilters);
  // Selects apply in place (the URL follows without a navigation), so the focus stays on
  // the select a keyboard user is stepping through; typed fields apply on Search.
  flowSelect.addEventListener("change", applyFilters);
  statusSelect.addEventListener("change", applyFilters);

  const bulkBar = ctx.can("operator")
    ? h(
        "div",
        { class: "buttons bulk", role: "group", "aria-label": "Bulk actions" },
        h("span", { class: "muted", text: "For every execution this search finds:" }),
        h("button", { type: "button", class: "secondary", dataset: { bulk: "cancel" }, text: "Cancel all…", onclick: () => bulk("cancel") }),
        h("button", { type: "button", class: "secondary", dataset: { bulk: "retry" }, text: "Retry all…", onclick: () => bulk("retry") }),
      )
    : null;
  const bulkStatus = h("p", { class: "form-status", role: "status" });

  function searchParams() {
    return Object.fromEntries(SEARCH_KEYS.filter((key) => filters[key]).map((key) => [key, key.endsWith("_ms") ? Number(filters[key]) : filters[key]]));
  }

  async function bulk(action) {
    bulkStatus.textContent = "";
    const request = { action, ...searchParams(), limit: 1000 };
    let counted;
    try {
      counted = await ctx.api.post("executions/bulk", { ...request, dry_run: true });
    } catch (error) {
      bulkStatus.textContent = `${error.error}: ${error.message}`;
      return;
    }
    if (!counted.matched) {
      bulkStatus.textContent = `No execution matches this search: nothing to ${action}.`;
      return;
    }
    const verb = action === "cancel" ? "Cancel" : "Retry";
    const answer = await confirmAction({
      title: `${verb} ${counted.matched} execution${counted.matched === 1 ? "" : "s"}?`,
      message:
        `${counted.matched} execution${counted.matched === 1 ? " matches" : "s match"} this search` +
        `${counted.matched >= 1000 ? " (at least; one action covers 1,000)" : ""}. ` +
        (action === "cancel"
          ? "Each one stops at its next step; those that cannot be cancelled (already ended) are listed as refused."
          : "Each failed or cancelled one runs again from where it stopped; the others are listed as refused."),
      confirmLabel: `${verb} ${counted.matched}`,
    });
    if (!answer.confirmed) return;
    try {
      const done = await ctx.api.post("executions/bulk", request);
      const refused = done.failed.length;
      bulkStatus.textContent = `${verb}: ${done.done} done${refused ? `, ${refused} refused (${done.failed[0].error}${refused > 1 ? " …" : ""})` : ""}.`;
      load();
    } catch (error) {
      bulkStatus.textContent = `${error.error}: ${error.message}`;
    }
  }

  const listError = h("div", { class: "form-error", role: "alert", hidden: true });
  const tbody = h("tbody");
  const table = h(
    "div",
    {
      class: "table-wrap",
      tabindex: 0,
      "aria-label": "Executions table (scrolls sideways on narrow screens)",
    },
    h(
      "table",
      { class: "executions stack-narrow" },
      h("caption", { class: "visually-hidden", text: "Executions, newest activity first" }),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["Execution", "Flow", "Status", "Node", "Updated", "Error"].map((name) =>
            h("th", { scope: "col", text: name }),
          ),
        ),
      ),
      tbody,
    ),
  );
  const moreButton = h("button", { type: "button", class: "secondary", text: "More", hidden: true });
  const summary = h("p", { class: "muted", role: "status" });

  const startButton = h("button", { type: "button", text: "Start execution" });
  const { dialog: startDialog, open: openStart, loadFlows } = startExecutionDialog(ctx, startButton);
  startButton.addEventListener("click", openStart);

  const root = h(
    "section",
    { class: "view", "aria-labelledby": "view-title" },
    h(
      "div",
      { class: "view-head" },
      h("h1", { id: "view-title", tabindex: -1, text: "Executions" }),
      ctx.can("operator") ? startButton : null,
    ),
    filterForm,
    bulkBar,
    bulkStatus,
    listError,
    table,
    h("div", { class: "buttons" }, moreButton, summary),
    startDialog,
  );

  function render() {
    const now = Date.now();
    renderIfChanged(tbody, { items, second: Math.floor(now / 1000) }, () =>
      items.length
        ? items.map((item) =>
            h(
              "tr",
              { dataset: { executionId: item.execution_id, status: item.status } },
              h(
                "td",
                {},
                h("a", {
                  href: `#/executions/${encodeURIComponent(item.execution_id)}`,
                  class: "mono",
                  dataset: { focusKey: `exec-${item.execution_id}` },
                  text: item.execution_id,
                }),
              ),
              h(
                "td",
                { "data-label": "Flow" },
                `${item.flow_id} `,
                h("span", { class: "muted", text: `v${item.flow_version}` }),
              ),
              h(
                "td",
                { "data-label": "Status" },
                statusBadge(item.status),
                item.paused ? h("span", { class: "badge paused", text: "paused" }) : null,
              ),
              h("td", {
                class: "mono",
                "data-label": "Node",
                text: item.next_node_id ?? item.last_node_id ?? "—",
              }),
              h("td", {
                "data-label": "Updated",
                title: formatTime(item.updated_at_ms),
                text: formatAge(item.updated_at_ms, now),
              }),
              h("td", {
                class: "error-cell",
                "data-label": "Error",
                text: item.error ? `${item.error.code}: ${item.error.message}` : "",
              }),
            ),
          )
        : h(
            "tr",
            {},
            h("td", {
              colspan: 6,
              class: "empty",
              text: Object.values(filters).some(Boolean)
                ? "No execution matches this search (follow “More” if it shows: the search looks at up to 2,000 executions at a time)."
                : "No executions yet. Start one with “Start execution”.",
            }),
          ),
    );
    moreButton.hidden = !nextCursor;
    const shown = shownText(items.length, nextCursor);
    if (summary.textContent !== shown) summary.textContent = shown;
  }

  async function load({ more = false } = {}) {
    const mine = ++sequence;
    const params = {
      ...searchParams(),
      ...pageParams({ more, pageSize: PAGE_SIZE, shown: items.length, cursor: nextCursor }),
    };
    try {
      const page = await ctx.api.get("executions", params);
      if (mine !== sequence) return;
      items = more ? [...items, ...page.items] : page.items;
      nextCursor = page.next_cursor ?? null;
      listError.hidden = true;
      clearErrors(filterForm);
      render();
    } catch (error) {
      if (mine !== sequence) return;
      if (error.error === "InvalidExecutionQueryError" || error.status === 422) {
        // A filter that cannot be read: said beside its field.
        showError(filterForm, error);
        return;
      }
      listError.replaceChildren(h("strong", { text: `${error.error}: ` }), error.message);
      listError.hidden = false;
    }
  }
  moreButton.addEventListener("click", () => load({ more: true }));

  async function fillFlowFilter() {
    const flows = await loadFlows();
    const ids = [...new Set(flows.map((flow) => flow.flow_id))].sort();
    if (filters.flow_id && !ids.includes(filters.flow_id)) ids.push(filters.flow_id);
    swap(
      flowSelect,
      h("option", { value: "", text: "Any flow" }),
      ids.map((id) => h("option", { value: id, text: id })),
    );
    flowSelect.value = filters.flow_id;
  }

  fillFlowFilter();
  return { root, refresh: () => load() };
}

function startExecutionDialog(ctx, opener) {
  let flows = [];
  const flowSelect = h("select", { name: "flow_id", required: true });
  const input = jsonTextarea("input", "{}");
  const dedup = h("input", { name: "dedup_key", type: "text", autocomplete: "off" });
  const executionId = h("input", { name: "execution_id", type: "text", autocomplete: "off" });
  const tenantNote = h("p", { class: "muted" });
  const form = h(
    "form",
    { novalidate: true },
    h("h2", { id: "start-title", text: "Start an execution" }),
    tenantNote,
    field("Flow", flowSelect),
    field("Input (JSON object)", input, 'The flow\'s parameters, for example {"amount": 5000}.'),
    h(
      "div",
      { class: "grid-2" },
      field("Dedup key (optional)", dedup, "A second start with the same key returns the first execution."),
      field("Execution id (optional)", executionId, "Leave empty for a generated id."),
    ),
    errorRegion(),
    h(
      "div",
      { class: "buttons" },
      h("button", { type: "button", class: "secondary", text: "Cancel", onclick: () => dialog.close() }),
      h("button", { type: "submit", text: "Start" }),
    ),
  );
  const dialog = h("dialog", { class: "dialog wide", "aria-labelledby": "start-title" }, form);
  dialog.addEventListener("close", () => opener.focus());

  async function loadFlows() {
    try {
      flows = (await ctx.api.get("flows")).items ?? [];
    } catch (error) {
      flows = [];
      showError(form, error);
    }
    const current = flowSelect.value;
    swap(
      flowSelect,
      flows.length ? null : h("option", { value: "", text: "No flow is registered" }),
      flows.map((flow) =>
        h("option", { value: flowKey(flow), text: `${flowLabel(flow)} (${flow.node_count} nodes)` }),
      ),
    );
    if (flows.some((flow) => flowKey(flow) === current)) flowSelect.value = current;
    return flows;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    const flow = flows.find((candidate) => flowKey(candidate) === flowSelect.value);
    if (!flow) setFieldError(flowSelect, "Choose a flow.");
    const parsed = readJsonObject(input);
    if (!flow || !parsed.ok) {
      form.querySelector("[aria-invalid]")?.focus();
      return;
    }
    setBusy(form, true);
    try {
      const started = await ctx.api.post("executions", {
        flow_id: flow.flow_id,
        version: flow.version,
        input: parsed.value ?? {},
        dedup_key: dedup.value.trim() || undefined,
        execution_id: executionId.value.trim() || undefined,
      });
      dialog.close();
      ctx.flash(
        started.deduplicated
          ? `The dedup key matched execution ${started.execution_id}; no new execution was started.`
          : `Started execution ${started.execution_id} of ${started.flow_id} v${started.version}.`,
      );
      ctx.navigate(`#/executions/${encodeURIComponent(started.execution_id)}`);
    } catch (error) {
      showError(form, error);
    } finally {
      setBusy(form, false);
    }
  });

  async function open() {
    clearErrors(form);
    tenantNote.textContent = `Tenant: ${ctx.session.tenant}`;
    dialog.showModal();
    flowSelect.focus();
    await loadFlows();
  }
  return { dialog, open, loadFlows };
}
