// Operator pages: dead letters with replay, the worker registry, recent events, and the
// queue stats strip shown on every page.

import { h, renderIfChanged } from "./dom.js";
import { formatAge, formatDuration, formatJson, formatTime } from "./format.js";
import { field } from "./forms.js";
import { publishForm } from "./publish.js";

function failure(region, error) {
  region.replaceChildren(h("strong", { text: `${error.error}: ` }), error.message);
  region.hidden = false;
}

function table(caption, headers, body) {
  return h(
    "div",
    { class: "table-wrap", tabindex: 0, "aria-label": `${caption} (scrolls sideways on narrow screens)` },
    h(
      "table",
      {},
      h("caption", { class: "visually-hidden", text: caption }),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          headers.map((name) => h("th", { scope: "col", text: name })),
        ),
      ),
      body,
    ),
  );
}

export function queueStrip(ctx, container) {
  const stats = [
    ["stream_length", "Stream"],
    ["pending", "Pending"],
    ["dlq_length", "DLQ"],
    ["delayed", "Delayed"],
    ["lag_ms", "Lag"],
  ];
  return async function refresh() {
    try {
      const queue = await ctx.api.get("queue");
      renderIfChanged(container, queue, () =>
        h(
          "dl",
          { class: "stats" },
          stats.map(([key, label]) =>
            h(
              "div",
              { class: `stat stat-${key}${key === "dlq_length" && queue[key] > 0 ? " warn" : ""}` },
              h("dt", { text: label }),
              h("dd", { text: key === "lag_ms" ? formatDuration(queue[key]) : String(queue[key] ?? "—") }),
            ),
          ),
        ),
      );
    } catch (error) {
      renderIfChanged(container, error.message, () =>
        h("p", { class: "muted", text: `Queue stats unavailable: ${error.message}` }),
      );
    }
  };
}

export function dlqView(ctx) {
  const outcomes = new Map();
  let items = [];
  const count = h(
    "select",
    { name: "count" },
    [20, 50, 100, 500].map((n) => h("option", { value: n, text: `${n} newest` })),
  );
  const loadError = h("div", { class: "form-error", role: "alert", hidden: true });
  const tbody = h("tbody");

  async function replay(entry, button) {
    button.disabled = true;
    outcomes.set(entry.dlq_id, { pending: true, text: "Replaying…" });
    render();
    try {
      const result = await ctx.api.post(`dlq/${encodeURIComponent(entry.dlq_id)}/replay`, {
        tenant: entry.tenant_id ?? ctx.session.tenant,
      });
      outcomes.set(entry.dlq_id, {
        ok: true,
        text: [
          result.outcome,
          result.message_id && `as ${result.message_id}`,
          result.detail && `— ${result.detail}`,
        ]
          .filter(Boolean)
          .join(" "),
      });
    } catch (error) {
      const outcome = error.body?.outcome ?? error.body?.detail?.outcome;
      outcomes.set(entry.dlq_id, {
        ok: false,
        text: `${outcome ? `${outcome}: ` : `${error.error}: `}${error.message}`,
      });
    }
    await refresh();
  }

  function render() {
    renderIfChanged(tbody, { items, outcomes: [...outcomes] }, () =>
      items.length
        ? items.map((entry) => {
            const outcome = outcomes.get(entry.dlq_id);
            return h(
              "tr",
              { dataset: { dlqId: entry.dlq_id } },
              h("td", { class: "mono", text: entry.dlq_id }),
              h(
                "td",
                {},
                entry.reason,
                entry.kind ? h("span", { class: "muted", text: ` (${entry.kind})` }) : null,
              ),
              h(
                "td",
                {},
                entry.execution_id
                  ? h("a", {
                      class: "mono",
                      href: `#/executions/${encodeURIComponent(entry.execution_id)}`,
                      text: entry.execution_id,
                    })
                  : "—",
              ),
              h("td", { text: entry.flow_id ?? "—" }),
              h("td", { text: entry.tenant_id ?? "—" }),
              h("td", { text: entry.replayed ? `replayed ${entry.replayed.message_id ?? ""}`.trim() : "no" }),
              h(
                "td",
                {},
                h("button", {
                  type: "button",
                  class: "secondary",
                  dataset: { focusKey: `replay-${entry.dlq_id}` },
                  "aria-label": `Replay dead letter ${entry.dlq_id}`,
                  text: "Replay",
                  disabled: Boolean(outcome?.pending),
                  onclick: (event) => replay(entry, event.currentTarget),
                }),
                outcome
                  ? h("p", {
                      class: `outcome ${outcome.ok ? "ok" : "bad"}`,
                      role: "status",
                      text: outcome.text,
                    })
                  : null,
                h(
                  "details",
                  {},
                  h("summary", { text: "Task message" }),
                  h("pre", { class: "code", text: formatJson(entry.raw) }),
                  entry.raw_base64
                    ? h("pre", {
                        class: "code",
                        "aria-label": "The task message's exact bytes, base64",
                        text: formatJson({ raw_base64: entry.raw_base64 }),
                      })
                    : null,
                ),
              ),
            );
          })
        : h("tr", {}, h("td", { colspan: 7, class: "empty", text: "The dead-letter queue is empty." })),
    );
  }

  async function refresh() {
    try {
      items = (await ctx.api.get("dlq", { count: count.value })).items ?? [];
      loadError.hidden = true;
      render();
    } catch (error) {
      failure(loadError, error);
    }
  }
  count.addEventListener("change", refresh);

  const root = h(
    "section",
    { class: "view", "aria-labelledby": "view-title" },
    h("div", { class: "view-head" }, h("h1", { id: "view-title", tabindex: -1, text: "Dead letters" })),
    h("p", {
      class: "muted",
      text: "Task messages the workers gave up on. Replay puts one back on the task queue, once; an execution that has already ended is not run again.",
    }),
    h("div", { class: "filters" }, field("Show", count)),
    loadError,
    table("Dead letters", ["DLQ id", "Reason", "Execution", "Flow", "Tenant", "Replayed", "Actions"], tbody),
  );
  return { root, refresh };
}

export function workersView(ctx) {
  const loadError = h("div", { class: "form-error", role: "alert", hidden: true });
  const tbody = h("tbody");
  async function refresh() {
    try {
      const { items } = await ctx.api.get("workers");
      loadError.hidden = true;
      renderIfChanged(tbody, items, () =>
        items.length
          ? items.map((worker) =>
              h(
                "tr",
                {},
                h("td", { class: "mono", text: worker.instance_id }),
                h("td", {}, h("span", { class: `badge worker-${worker.status}`, text: worker.status })),
                h("td", {
                  class: worker.heartbeat_age_ms > 30_000 ? "stale" : "",
                  text: formatDuration(worker.heartbeat_age_ms),
                }),
                h("td", { title: formatTime(worker.started_ms), text: formatAge(worker.started_ms) }),
                h("td", { text: worker.config_family ?? "—" }),
                h("td", { text: String(worker.config_generation ?? "—") }),
                h("td", { text: String(worker.budget_generation ?? "—") }),
              ),
            )
          : h("tr", {}, h("td", { colspan: 7, class: "empty", text: "No worker is registered." })),
      );
    } catch (error) {
      failure(loadError, error);
    }
  }
  const root = h(
    "section",
    { class: "view", "aria-labelledby": "view-title" },
    h("div", { class: "view-head" }, h("h1", { id: "view-title", tabindex: -1, text: "Workers" })),
    loadError,
    table(
      "Registered workers",
      [
        "Instance",
        "Status",
        "Heartbeat age",
        "Started",
        "Settings",
        "Settings version",
        "Retry limits version",
      ],
      tbody,
    ),
  );
  return { root, refresh };
}

export function eventsView(ctx, query) {
  const loadError = h("div", { class: "form-error", role: "alert", hidden: true });
  const tbody = h("tbody");
  async function refresh() {
    try {
      const { items } = await ctx.api.get("events", { limit: 50 });
      loadError.hidden = true;
      renderIfChanged(tbody, items, () =>
        items.length
          ? items.map((event) =>
              h(
                "tr",
                {},
                h("td", { title: formatTime(event.timestamp_ms), text: formatAge(event.timestamp_ms) }),
                h("td", { class: "mono", text: event.event_type }),
                h(
                  "td",
                  {},
                  event.correlation_id
                    ? h("a", {
                        class: "mono",
                        href: `#/executions/${encodeURIComponent(event.correlation_id)}`,
                        text: event.correlation_id,
                      })
                    : "—",
                ),
                h("td", {}, h("code", { text: JSON.stringify(event.data) })),
                h("td", { text: event.source ?? "—" }),
                h("td", { class: "mono", text: event.event_id }),
              ),
            )
          : h("tr", {}, h("td", { colspan: 6, class: "empty", text: "No event yet." })),
      );
    } catch (error) {
      failure(loadError, error);
    }
  }
  const root = h(
    "section",
    { class: "view", "aria-labelledby": "view-title" },
    h("div", { class: "view-head" }, h("h1", { id: "view-title", tabindex: -1, text: "Events" })),
    ctx.can("operator")
      ? publishForm(ctx, {
          correlationId: query.get("correlation_id") ?? "",
          eventType: query.get("type") ?? "",
          onPublished: refresh,
        })
      : null,
    h("h2", { text: "Recent events" }),
    loadError,
    table("Recent events", ["When", "Type", "Correlation", "Data", "Source", "Event id"], tbody),
  );
  return { root, refresh };
}
