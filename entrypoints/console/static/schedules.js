// The schedules page: the tenant's cron schedules with their next run, pausing, resuming,
// running one now and deleting, a schedule's next run times and what the schedulers
// recorded, and creating a schedule through POST /schedules.

import { h, renderIfChanged } from "./dom.js";
import { formatAge, formatTime } from "./format.js";
import { clearErrors, confirmAction, errorRegion, field, jsonTextarea, readJsonObject, setBusy, showError } from "./forms.js";

const OVERLAP = [
  ["allow", "allow — start anyway"],
  ["skip", "skip — skip the due"],
  ["buffer_one", "buffer_one — keep one due waiting"],
];
const CATCH_UP = [
  ["latest", "latest — start the most recent missed due"],
  ["none", "none — skip missed dues"],
  ["all", "all — start each missed due (at most 100)"],
];
const NEXT_RUNS = 10;

function schedulePath(scheduleId) {
  return `schedules/${encodeURIComponent(scheduleId)}`;
}

function stateBadge(schedule) {
  return schedule.paused
    ? h("span", { class: "badge paused", text: "paused" })
    : h("span", { class: "badge status-running", text: "active" });
}

function when(schedule) {
  return [h("code", { text: schedule.cron }), " ", h("span", { class: "muted", text: schedule.timezone })];
}

function nextRun(ms) {
  return ms ? [formatTime(ms), " ", h("span", { class: "muted", text: `(${formatAge(ms)})` })] : "never";
}

function nextRunCell(ms) {
  return ms ? [formatTime(ms), h("br"), h("span", { class: "muted", text: formatAge(ms) })] : "never";
}

function executionLink(executionId) {
  return executionId
    ? h("a", { class: "mono", href: `#/executions/${encodeURIComponent(executionId)}`, text: executionId.slice(0, 12) })
    : "—";
}

// The buttons of one schedule: run now (operator), pause or resume and delete (admin).
function actionButtons(ctx, schedule, { onDone, status }) {
  async function act(label, run) {
    status.textContent = `${label}…`;
    try {
      status.textContent = await run();
    } catch (error) {
      status.textContent = `${error.error}: ${error.message}`;
    }
    await onDone();
  }
  const id = schedule.schedule_id;
  const buttons = [];
  if (ctx.can("operator")) {
    buttons.push(
      h("button", {
        type: "button",
        class: "small",
        text: "Run now",
        "aria-label": `Run ${id} now`,
        dataset: { focusKey: `run-${id}` },
        onclick: () =>
          act("Starting", async () => {
            const run = await ctx.api.post(`${schedulePath(id)}/trigger`, {});
            return `Started ${run.execution_id} (${run.dedup_key}).`;
          }),
      }),
    );
  }
  if (ctx.can("admin")) {
    const verb = schedule.paused ? "resume" : "pause";
    buttons.push(
      h("button", {
        type: "button",
        class: "secondary small",
        text: schedule.paused ? "Resume" : "Pause",
        "aria-label": `${schedule.paused ? "Resume" : "Pause"} ${id}`,
        dataset: { focusKey: `pause-${id}` },
        onclick: () =>
          act(schedule.paused ? "Resuming" : "Pausing", async () => {
            const after = await ctx.api.post(`${schedulePath(id)}/${verb}`, {});
            return `${id} is ${after.paused ? "paused" : "active"}.`;
          }),
      }),
      h("button", {
        type: "button",
        class: "danger small",
        text: "Delete",
        "aria-label": `Delete ${id}`,
        dataset: { focusKey: `delete-${id}` },
        onclick: async () => {
          const answer = await confirmAction({
            title: `Delete schedule ${id}?`,
            message: "No due of it starts any more; the executions it started are kept.",
            confirmLabel: "Delete",
          });
          if (answer.confirmed) act("Deleting", async () => (await ctx.api.delete(schedulePath(id)), `Deleted ${id}.`));
        },
      }),
    );
  }
  return h("div", { class: "buttons row-actions" }, buttons);
}

export function schedulesView(ctx) {
  const loadError = h("div", { class: "form-error", role: "alert", hidden: true });
  const status = h("p", { class: "action-status", role: "status" });
  const tbody = h("tbody");
  let items = [];

  const root = h(
    "section",
    { class: "view", "aria-labelledby": "view-title" },
    h("div", { class: "view-head" }, h("h1", { id: "view-title", tabindex: -1, text: "Schedules" })),
    h("p", {
      class: "muted",
      text: "Cron schedules of this tenant: each due starts one execution of its flow, even when several schedulers run.",
    }),
    loadError,
    status,
    h(
      "div",
      { class: "table-wrap schedules-table" },
      h(
        "table",
        { class: "schedules" },
        h("caption", { class: "visually-hidden", text: "Schedules" }),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["Schedule", "Flow", "When", "Next run", "Last execution", "Dues", ""].map((name) =>
              h("th", { scope: "col", text: name }),
            ),
          ),
        ),
        tbody,
      ),
    ),
    ctx.can("admin") ? createForm(ctx, () => refresh()) : null,
  );

  async function refresh() {
    try {
      items = (await ctx.api.get("schedules")).items ?? [];
      loadError.hidden = true;
    } catch (error) {
      loadError.replaceChildren(h("strong", { text: `${error.error}: ` }), error.message);
      loadError.hidden = false;
      return;
    }
    renderIfChanged(tbody, [items, Math.floor(Date.now() / 10_000)], () =>
      items.length
        ? items.map((schedule) =>
            h(
              "tr",
              { dataset: { scheduleId: schedule.schedule_id } },
              h(
                "td",
                {},
                h("a", { class: "mono", href: `#/schedules/${encodeURIComponent(schedule.schedule_id)}`, text: schedule.schedule_id }),
                h("br"),
                stateBadge(schedule),
              ),
              h("td", {}, h("a", { href: `#/flows/${encodeURIComponent(schedule.flow_id)}`, text: schedule.flow_id })),
              h(
                "td",
                {},
                when(schedule),
                h("br"),
                h("span", { class: "muted small-text", text: `overlap ${schedule.overlap}, catch-up ${schedule.catch_up}` }),
              ),
              h("td", { class: "next-run" }, nextRunCell(schedule.next_run_ms)),
              h("td", {}, executionLink(schedule.last_execution_id)),
              h("td", { class: "dues", text: `${schedule.fired} started · ${schedule.skipped} skipped · ${schedule.failed} failed` }),
              h("td", {}, actionButtons(ctx, schedule, { onDone: refresh, status })),
            ),
          )
        : h("tr", {}, h("td", { colspan: 7, class: "empty", text: "No schedule yet." })),
    );
  }
  return { root, refresh };
}

export function scheduleView(ctx, scheduleId) {
  const loadError = h("div", { class: "form-error", role: "alert", hidden: true });
  const status = h("p", { class: "action-status", role: "status" });
  const summary = h("div");
  const runs = h("div");
  const actions = h("div", { class: "actions" });

  const root = h(
    "section",
    { class: "view schedule-view", "aria-labelledby": "view-title" },
    h("p", {}, h("a", { href: "#/schedules", text: "← All schedules" })),
    h("div", { class: "view-head" }, h("h1", { id: "view-title", tabindex: -1 }, "Schedule ", h("span", { class: "mono", text: scheduleId }))),
    loadError,
    h("section", { class: "card", "aria-label": "Actions" }, actions, status),
    h("section", { class: "card", "aria-labelledby": "summary-title" }, h("h2", { id: "summary-title", text: "Summary" }), summary),
    h("section", { class: "card", "aria-labelledby": "runs-title" }, h("h2", { id: "runs-title", text: "Next run times" }), runs),
  );

  async function refresh() {
    let schedule;
    try {
      schedule = await ctx.api.get(schedulePath(scheduleId), { count: NEXT_RUNS });
      loadError.hidden = true;
    } catch (error) {
      loadError.replaceChildren(h("strong", { text: `${error.error}: ` }), error.message);
      loadError.hidden = false;
      return;
    }
    renderIfChanged(actions, [schedule.paused, ctx.can("operator"), ctx.can("admin")], () =>
      actionButtons(ctx, schedule, {
        status,
        onDone: async () => {
          if (!(await ctx.api.get(schedulePath(scheduleId)).catch(() => null))) ctx.navigate("#/schedules");
          else await refresh();
        },
      }),
    );
    const rows = [
      ["State", stateBadge(schedule)],
      ["Flow", [h("a", { href: `#/flows/${encodeURIComponent(schedule.flow_id)}`, text: schedule.flow_id }), ` (version ${schedule.flow_version ?? "latest"})`]],
      ["When", when(schedule)],
      ["Overlap", schedule.overlap],
      ["Catch-up", schedule.catch_up],
      ["Input", h("code", { text: JSON.stringify(schedule.input) })],
      ["Created", formatTime(schedule.created_at_ms)],
      ["Last due started", schedule.last_due_ms ? formatTime(schedule.last_due_ms) : "—"],
      [
        "Last execution",
        schedule.last_execution_id
          ? [executionLink(schedule.last_execution_id), schedule.last_status ? h("span", { class: `badge status-${schedule.last_status}`, text: schedule.last_status }) : null]
          : "—",
      ],
      ["Waiting due", schedule.buffered_due_ms ? formatTime(schedule.buffered_due_ms) : "—"],
      ["Dues", `${schedule.fired} started · ${schedule.skipped} skipped · ${schedule.failed} failed`],
      ["Last error", schedule.last_error ?? "—"],
    ];
    renderIfChanged(summary, schedule, () =>
      h("dl", { class: "summary" }, rows.map(([label, value]) => h("div", {}, h("dt", { text: label }), h("dd", {}, value)))),
    );
    renderIfChanged(runs, [schedule.next_runs_ms, Math.floor(Date.now() / 10_000)], () =>
      schedule.next_runs_ms.length
        ? h(
            "ol",
            { class: "next-runs" },
            schedule.next_runs_ms.map((ms) => h("li", {}, h("time", { datetime: new Date(ms).toISOString() }, nextRun(ms)))),
          )
        : h("p", { class: "muted", text: "None: the expression names no later time." }),
    );
  }
  return { root, refresh };
}

function createForm(ctx, onCreated) {
  const zones = h(
    "datalist",
    { id: "timezones" },
    (Intl.supportedValuesOf?.("timeZone") ?? ["UTC"]).map((zone) => h("option", { value: zone })),
  );
  const scheduleId = h("input", { name: "schedule_id", required: true, autocomplete: "off", spellcheck: "false" });
  const flowId = h("input", { name: "flow_id", required: true, autocomplete: "off", list: "schedule-flows" });
  const flows = h("datalist", { id: "schedule-flows" });
  const cron = h("input", { name: "cron", required: true, autocomplete: "off", spellcheck: "false", class: "mono", placeholder: "0 3 * * *" });
  const timezone = h("input", { name: "timezone", autocomplete: "off", list: "timezones", value: "UTC" });
  const input = jsonTextarea("input", "{}");
  const overlap = h("select", { name: "overlap" }, OVERLAP.map(([value, text]) => h("option", { value, text })));
  const catchUp = h("select", { name: "catch_up" }, CATCH_UP.map(([value, text]) => h("option", { value, text })));
  const paused = h("input", { name: "paused", type: "checkbox" });
  const status = h("p", { class: "form-status", role: "status" });
  const form = h(
    "form",
    { class: "card register-form", novalidate: true, "aria-label": "Create a schedule" },
    h("h2", { text: "Create a schedule" }),
    h("p", {
      class: "muted",
      text: "Five cron fields (minute hour day month weekday), six with a trailing seconds field, or @hourly, @daily …",
    }),
    field("Schedule id", scheduleId),
    field("Flow", flowId),
    flows,
    field("Cron expression", cron, "e.g. 0 3 * * * (every day at 03:00), */15 * * * * (every 15 minutes)."),
    field("Time zone", timezone, "The IANA zone the expression is read in."),
    zones,
    field("Input (JSON)", input),
    field("Overlap", overlap, "What a due does while the last execution still runs."),
    field("Catch-up", catchUp, "What becomes of dues missed while no scheduler ran."),
    h("label", { class: "checkbox" }, paused, " Create it paused"),
    errorRegion(),
    h("div", { class: "buttons" }, h("button", { type: "submit", text: "Create" })),
    status,
  );
  ctx.api
    .get("flows")
    .then((answer) => flows.replaceChildren(...(answer.items ?? []).map((flow) => h("option", { value: flow.flow_id }))))
    .catch(() => {});
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    status.textContent = "";
    const parsed = readJsonObject(input);
    if (!parsed.ok) {
      input.focus();
      return;
    }
    setBusy(form, true);
    try {
      const created = await ctx.api.post("schedules", {
        schedule_id: scheduleId.value.trim(),
        flow_id: flowId.value.trim(),
        cron: cron.value.trim(),
        timezone: timezone.value.trim() || "UTC",
        input: parsed.value ?? {},
        overlap: overlap.value,
        catch_up: catchUp.value,
        paused: paused.checked,
      });
      status.textContent = `Created ${created.schedule_id}; next run ${created.next_run_ms ? formatTime(created.next_run_ms) : "never"}.`;
      onCreated();
    } catch (error) {
      showError(form, error);
    } finally {
      setBusy(form, false);
    }
  });
  return form;
}
