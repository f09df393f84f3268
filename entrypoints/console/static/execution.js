// One execution: status, what it waits for, actions per status, the node timeline, the
// flow graph, its data, and a publish-event form prefilled with its id.

import { h, renderIfChanged } from "./dom.js";
import { statusBadge } from "./executions.js";
import { TERMINAL, formatJson, formatTime } from "./format.js";
import { confirmAction, field } from "./forms.js";
import { flowGraph } from "./graph.js";
import { publishForm } from "./publish.js";
import { timelineChart } from "./timeline.js";

function actionsFor(detail) {
  const actions = [];
  const live = !TERMINAL.has(detail.status);
  if (detail.status === "suspended") actions.push("resume");
  if (detail.status === "error") actions.push("retry");
  if (detail.status !== "running") actions.push("retry_from");
  if (live) actions.push(detail.paused ? "unpause" : "pause");
  if (live && !detail.cancel_requested) actions.push("cancel");
  return actions;
}

export function executionView(ctx, executionId) {
  let detail = null;
  let flow = null;
  const path = `executions/${encodeURIComponent(executionId)}`;

  const title = h(
    "h1",
    { id: "view-title", tabindex: -1 },
    "Execution ",
    h("span", { class: "mono", text: executionId }),
  );
  const badges = h("div", { class: "badges", "aria-live": "polite" });
  const loadError = h("div", { class: "form-error", role: "alert", hidden: true });
  const summary = h("dl", { class: "summary" });
  const waiting = h("div", { class: "waiting" });
  const actionBar = h("div", { class: "buttons actions" });
  const actionStatus = h("div", { class: "action-status", role: "status" });
  const actionError = h("div", { class: "form-error", role: "alert", hidden: true });
  const timelineDetail = h("p", {
    class: "chart-detail muted",
    "aria-live": "polite",
    text: "Hover or focus a bar to read its durations.",
  });
  const timeline = h("div", { class: "chart-scroll", tabindex: -1 });
  const graphBox = h("div", { class: "chart-scroll" });
  const data = h("div", { class: "data-grid" });
  let publishSlot = h("div");

  const root = h(
    "section",
    { class: "view execution-view", "aria-labelledby": "view-title" },
    h("p", {}, h("a", { href: "#/executions", text: "← All executions" })),
    h("div", { class: "view-head" }, title, badges),
    loadError,
    h(
      "div",
      { class: "card" },
      summary,
      waiting,
      h("h2", { class: "visually-hidden", text: "Actions" }),
      actionBar,
      actionError,
      actionStatus,
    ),
    h(
      "figure",
      { class: "card", "aria-labelledby": "timeline-title" },
      h("figcaption", {}, h("h2", { id: "timeline-title", text: "Node timeline" })),
      timeline,
      timelineDetail,
    ),
    h(
      "figure",
      { class: "card", "aria-labelledby": "graph-title" },
      h("figcaption", {}, h("h2", { id: "graph-title", text: "Flow graph" })),
      graphBox,
      h(
        "ul",
        { class: "legend", "aria-label": "Legend" },
        h("li", {}, h("span", { class: "swatch current" }), "current node"),
        h("li", {}, h("span", { class: "swatch visited" }), "visited"),
        h("li", {}, h("span", { class: "swatch failed" }), "failed"),
        h("li", {}, h("span", { class: "swatch" }), "not reached"),
      ),
    ),
    data,
    publishSlot,
  );

  async function runAction(action, fromNode) {
    actionError.hidden = true;
    const labels = {
      resume: "Resume",
      retry: "Retry",
      retry_from: `Retry from ${fromNode}`,
      pause: "Pause",
      unpause: "Unpause",
      cancel: "Cancel",
      delete: "Delete",
    };
    let reason = "";
    if (action === "cancel" || action === "delete" || action === "retry_from") {
      const answer = await confirmAction({
        title: `${labels[action]}?`,
        message:
          action === "delete"
            ? `Delete execution ${executionId} and its history? This cannot be undone.`
            : action === "cancel"
              ? `Cancel execution ${executionId}? It stops at its next step and cannot be resumed.`
              : `Run execution ${executionId} again from node ${fromNode}, keeping its id?`,
        confirmLabel: labels[action],
        askReason: action === "delete",
      });
      if (!answer.confirmed) return;
      reason = answer.reason;
    }
    actionStatus.textContent = `${labels[action]}…`;
    try {
      if (action === "delete") {
        await ctx.api.delete(path, { reason: reason || undefined });
        ctx.flash(`Deleted execution ${executionId}.`);
        ctx.navigate("#/executions");
        return;
      }
      const endpoint = action === "retry_from" ? "retry" : action;
      const body = action === "retry_from" ? { from_node: fromNode } : {};
      const answer = await ctx.api.post(`${path}/${endpoint}`, body);
      actionStatus.textContent = `${labels[action]}: ${answer?.outcome ?? "accepted"}.`;
      await refresh();
      // Pause becomes Unpause and so on: keep the keyboard focus in the action bar.
      if (!root.contains(document.activeElement)) actionBar.querySelector("button, select")?.focus();
    } catch (error) {
      actionStatus.textContent = "";
      actionError.replaceChildren(h("strong", { text: `${error.error}: ` }), error.message);
      actionError.hidden = false;
    }
  }

  function renderActions() {
    const nodes = flow?.graph?.nodes?.map((node) => node.id) ?? [];
    const key = { status: detail.status, paused: detail.paused, cancel: detail.cancel_requested, nodes };
    renderIfChanged(actionBar, key, () => {
      if (!ctx.can("operator")) return h("p", { class: "muted", text: "Your role can read, not act." });
      const buttons = [];
      for (const action of actionsFor(detail)) {
        if (action === "retry_from") {
          if (!nodes.length) continue;
          const select = h(
            "select",
            { name: "from_node", dataset: { focusKey: "from-node" } },
            nodes.map((id) => h("option", { value: id, text: id })),
          );
          select.value = detail.error?.node_id ?? detail.last_node_id ?? nodes[0];
          buttons.push(
            h(
              "div",
              { class: "inline-field" },
              field("Retry from node", select),
              h("button", {
                type: "button",
                class: "secondary",
                dataset: { focusKey: "retry_from" },
                text: "Retry from node",
                onclick: () => runAction("retry_from", select.value),
              }),
            ),
          );
          continue;
        }
        const text = {
          resume: "Resume",
          retry: "Retry",
          pause: "Pause",
          unpause: "Unpause",
          cancel: "Cancel execution",
        }[action];
        buttons.push(
          h("button", {
            type: "button",
            class:
              action === "cancel" ? "danger" : action === "resume" || action === "retry" ? "" : "secondary",
            dataset: { focusKey: action, action },
            text,
            onclick: () => runAction(action),
          }),
        );
      }
      if (ctx.can("admin")) {
        buttons.push(
          h("button", {
            type: "button",
            class: "danger",
            dataset: { focusKey: "delete", action: "delete" },
            text: "Delete",
            onclick: () => runAction("delete"),
          }),
        );
      }
      return buttons.length ? buttons : h("p", { class: "muted", text: "No action applies in this state." });
    });
  }

  function renderSummary() {
    renderIfChanged(badges, [detail.status, detail.paused, detail.cancel_requested], () => [
      statusBadge(detail.status, "large"),
      detail.paused ? h("span", { class: "badge paused", text: "paused" }) : null,
      detail.cancel_requested
        ? h("span", { class: "badge status-cancelled", text: "cancel requested" })
        : null,
    ]);
    const row = (term, ...value) => [h("dt", { text: term }), h("dd", {}, ...value)];
    renderIfChanged(
      summary,
      [detail.updated_at_ms, detail.steps, detail.next_node_id, detail.last_node_id],
      () => [
        row("Flow", `${detail.flow_id} `, h("span", { class: "muted", text: `v${detail.flow_version}` })),
        row("Tenant", detail.tenant_id),
        row("Created", formatTime(detail.created_at_ms)),
        row("Updated", formatTime(detail.updated_at_ms)),
        row("Next node", h("span", { class: "mono", text: detail.next_node_id ?? "—" })),
        row("Last node", h("span", { class: "mono", text: detail.last_node_id ?? "—" })),
        row("Steps", String(detail.steps ?? (detail.timeline ?? []).length)),
      ],
    );
    renderIfChanged(waiting, [detail.waiting_for, detail.status, Boolean(flow)], () => {
      const wait = detail.waiting_for;
      if (!wait) return null;
      const node = flow?.document?.nodes?.find((candidate) => candidate.id === wait.node_id);
      return h(
        "p",
        { class: "callout" },
        h("strong", { text: "Waiting " }),
        "at node ",
        h("span", { class: "mono", text: wait.node_id }),
        node?.event_type
          ? [" for an event ", h("code", { text: node.event_type }), " correlated to this execution"]
          : null,
        wait.wake_at_ms ? [`; wakes at ${formatTime(wait.wake_at_ms)}`] : null,
        wait.subscription_id
          ? h("span", { class: "muted", text: ` (subscription ${wait.subscription_id})` })
          : null,
        ".",
      );
    });
  }

  function renderTimeline() {
    const entries = detail.timeline ?? [];
    const running = entries.some((entry) => entry.ended_at_ms === null || entry.ended_at_ms === undefined);
    const key = running ? [entries, Date.now()] : entries;
    renderIfChanged(timeline, key, () =>
      entries.length
        ? timelineChart(entries, Date.now(), (text) => {
            timelineDetail.textContent = text;
          })
        : h("p", { class: "muted", text: "No node has run yet." }),
    );
  }

  function renderGraph() {
    const visited = new Set([
      ...(detail.timeline ?? []).map((entry) => entry.node_id),
      ...Object.keys(detail.node_results ?? {}),
    ]);
    const failed = new Set(
      (detail.timeline ?? []).filter((e) => e.status === "failed").map((e) => e.node_id),
    );
    if (detail.status === "error" && detail.error?.node_id) failed.add(detail.error.node_id);
    const current = TERMINAL.has(detail.status)
      ? null
      : (detail.waiting_for?.node_id ?? detail.next_node_id ?? null);
    renderIfChanged(
      graphBox,
      [Boolean(flow?.graph), flow?.loadError, [...visited], [...failed], current],
      () => {
        if (flow?.loadError) return h("p", { class: "form-error", role: "alert", text: flow.loadError });
        if (!flow?.graph) return h("p", { class: "muted", text: "Loading the flow…" });
        return flowGraph(flow.graph, flow.document?.start, { current, visited, failed });
      },
    );
  }

  function renderData() {
    renderIfChanged(data, [detail.input, detail.result, detail.error, detail.node_results], () => [
      h(
        "section",
        { class: "card" },
        h("h2", { text: "Input" }),
        h("pre", { class: "code", tabindex: 0, text: formatJson(detail.input ?? {}) }),
      ),
      h(
        "section",
        { class: "card" },
        h("h2", { text: "Result" }),
        detail.result === null || detail.result === undefined
          ? h("p", { class: "muted", text: TERMINAL.has(detail.status) ? "No result." : "Not finished yet." })
          : h("pre", { class: "code result", tabindex: 0, text: formatJson(detail.result) }),
      ),
      detail.error
        ? h(
            "section",
            { class: "card error-card" },
            h("h2", { text: "Error" }),
            h(
              "p",
              {},
              h("strong", { text: detail.error.kind ?? "error" }),
              ` (code ${detail.error.code})`,
              detail.error.node_id
                ? [" at node ", h("span", { class: "mono", text: detail.error.node_id })]
                : null,
            ),
            h("pre", { class: "code", tabindex: 0, text: detail.error.message }),
          )
        : null,
      h(
        "details",
        { class: "card wide" },
        h("summary", { text: `Node results (${Object.keys(detail.node_results ?? {}).length})` }),
        h("pre", { class: "code", tabindex: 0, text: formatJson(detail.node_results ?? {}) }),
      ),
    ]);
  }

  function renderPublish() {
    if (!ctx.can("operator")) return;
    const node = flow?.document?.nodes?.find((candidate) => candidate.id === detail.waiting_for?.node_id);
    if (publishSlot.dataset.ready) {
      // The node's event type becomes known once the execution waits; suggest it unless typed.
      const type = publishSlot.elements.namedItem("event_type");
      if (node?.event_type && !type.value && document.activeElement !== type) type.value = node.event_type;
      return;
    }
    const form = publishForm(ctx, {
      correlationId: executionId,
      eventType: node?.event_type ?? "",
      onPublished: () => refresh(),
    });
    form.dataset.ready = "true";
    publishSlot.replaceWith(form);
    publishSlot = form;
  }

  async function loadFlow() {
    if (flow && flow.flow_id === detail.flow_id && flow.version === detail.flow_version) return;
    try {
      flow = await ctx.flows(detail.flow_id, detail.flow_version);
    } catch (error) {
      flow = {
        flow_id: detail.flow_id,
        version: detail.flow_version,
        loadError: `${error.error}: ${error.message}`,
      };
    }
  }

  async function refresh() {
    try {
      detail = await ctx.api.get(path);
      loadError.hidden = true;
    } catch (error) {
      loadError.replaceChildren(h("strong", { text: `${error.error}: ` }), error.message);
      loadError.hidden = false;
      return;
    }
    root.dataset.status = detail.status;
    renderSummary();
    renderActions();
    renderTimeline();
    renderData();
    await loadFlow();
    renderSummary();
    renderActions();
    renderGraph();
    renderPublish();
  }

  return { root, refresh };
}
