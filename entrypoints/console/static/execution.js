// One execution: status, what it waits for, actions per status, the node timeline, the
// flow graph, its data, and a publish-event form prefilled with its id; for a child the
// execution that started it, for a parent its children.

import { childrenSection, childrenWait, parentLine } from "./children.js";
import { h, renderIfChanged } from "./dom.js";
import { statusBadge } from "./executions.js";
import { TERMINAL, formatAge, formatTime } from "./format.js";
import { confirmAction, field } from "./forms.js";
import { flowGraph } from "./graph.js";
import { historyLoader, renderHistory } from "./history.js";
import { jsonView } from "./json.js";
import { publishForm } from "./publish.js";
import { timelineChart } from "./timeline.js";

/** What keeps an execution waiting for room to run, by the worker's reason. */
const HELD_BACK = {
  concurrency: "Waiting for a concurrency slot",
  rate_limit: "Rate limited",
  tenant_quota: "Waiting for its tenant's quota",
  tenant_suspended: "Tenant suspended",
  tenant_status_stale: "Tenant status out of date",
};

// The buttons, in this order; which ones show comes from the API's `actions` (one rule,
// shared with the endpoints that perform them). "retry_from" is retry_from_node.
const ACTION_ORDER = ["resume", "retry", "retry_from_node", "pause", "unpause", "cancel", "publish_event", "delete"];
const ACTION_NAMES = {
  resume: "Continue",
  retry: "Retry",
  retry_from_node: "Retry from node",
  pause: "Pause",
  unpause: "Unpause",
  cancel: "Cancel execution",
  publish_event: "Publish an event",
  delete: "Delete",
};

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
  const parentBox = h("div", { class: "parent-box" });
  const summary = h("dl", { class: "summary" });
  const children = childrenSection(ctx, executionId);
  const waiting = h("div", { class: "waiting" });
  const actionBar = h("div", { class: "buttons actions" });
  const unavailable = h("div", { class: "unavailable" });
  const retryBox = h("div", { class: "retry-box", "aria-live": "polite" });
  const heldBox = h("div", { class: "held-box", "aria-live": "polite" });
  const historyBox = h("div", { class: "history-box" });
  const inspector = h("section", { class: "card inspector", "aria-labelledby": "node-title", hidden: true });
  const history = historyLoader(ctx, executionId);
  let selectedNode = null;
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
      parentBox,
      summary,
      retryBox,
      heldBox,
      waiting,
      h("h2", { class: "visually-hidden", text: "Actions" }),
      actionBar,
      actionError,
      actionStatus,
      unavailable,
    ),
    children.root,
    h(
      "section",
      { class: "card", "aria-labelledby": "history-title" },
      h("h2", { id: "history-title", text: "Timeline" }),
      h("p", {
        class: "muted",
        text: "Everything that happened to this execution, oldest first: every attempt of every node. Select a node to see its parameters and result.",
      }),
      historyBox,
    ),
    inspector,
    h(
      "figure",
      { class: "card", "aria-labelledby": "timeline-title" },
      h("figcaption", {}, h("h2", { id: "timeline-title", text: "Node durations (latest run of each node)" })),
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
    const labels = { ...ACTION_NAMES, retry_from: `Retry from ${fromNode}`, cancel: "Cancel" };
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

  function actionsOf() {
    // An API without `actions` (an older console) offers nothing rather than a wrong button.
    return detail.actions ?? {};
  }

  function renderActions() {
    const nodes = flow?.graph?.nodes?.map((node) => node.id) ?? [];
    const actions = actionsOf();
    const key = { actions, nodes, operator: ctx.can("operator"), admin: ctx.can("admin") };
    renderIfChanged(actionBar, key, () => {
      if (!ctx.can("operator")) return h("p", { class: "muted", text: "Your role can read, not act." });
      const buttons = [];
      for (const action of ACTION_ORDER) {
        if (!actions[action]?.available || action === "publish_event") continue;
        if (action === "delete" && !ctx.can("admin")) continue;
        if (action === "retry_from_node") {
          if (!nodes.length) continue;
          const select = h(
            "select",
            { name: "from_node", dataset: { focusKey: "from-node" } },
            nodes.map((id) => h("option", { value: id, text: id })),
          );
          select.value = detail.error?.node_id ?? detail.waiting_for?.node_id ?? detail.last_node_id ?? nodes[0];
          buttons.push(
            h(
              "div",
              { class: "inline-field" },
              field("Retry from node", select),
              h("button", {
                type: "button",
                class: "secondary",
                dataset: { focusKey: "retry_from", action: "retry_from_node" },
                text: "Retry from node",
                onclick: () => runAction("retry_from", select.value),
              }),
            ),
          );
          continue;
        }
        buttons.push(
          h("button", {
            type: "button",
            class: action === "cancel" || action === "delete" ? "danger" : action === "resume" || action === "retry" ? "" : "secondary",
            dataset: { focusKey: action, action },
            title: action === "resume" ? "Queue its next step again, from the last saved one (for an execution that seems stuck)" : undefined,
            text: ACTION_NAMES[action],
            onclick: () => runAction(action),
          }),
        );
      }
      return buttons.length ? buttons : h("p", { class: "muted", text: "No action applies in this state." });
    });
    renderIfChanged(unavailable, actions, () => {
      const absent = ACTION_ORDER.filter((action) => actions[action] && !actions[action].available);
      if (!absent.length) return null;
      return h(
        "details",
        { class: "absent-actions" },
        h("summary", { text: `Not available now (${absent.length})` }),
        h(
          "ul",
          {},
          absent.map((action) =>
            h(
              "li",
              { dataset: { action } },
              h("strong", { text: ACTION_NAMES[action] }),
              ": ",
              actions[action].reason,
            ),
          ),
        ),
      );
    });
  }

  function renderRetry() {
    const failure = detail.last_failure; // the state's summary: one rule, the server's
    const key = [failure, detail.status, Math.floor(Date.now() / 1000)];
    renderIfChanged(retryBox, key, () => {
      if (!failure || detail.status === "completed") return null;
      const retrying = failure.retry_at_ms && !TERMINAL.has(detail.status);
      return h(
        "p",
        { class: `callout ${retrying ? "retrying" : "failed"}` },
        h("strong", { text: retrying ? "Retrying. " : "Last failure. " }),
        "Attempt ",
        h("strong", { class: "attempt-number", text: String(failure.attempt ?? "?") }),
        " of node ",
        h("span", { class: "mono", text: failure.node_id ?? "—" }),
        " failed ",
        h("span", { title: formatTime(failure.at_ms), text: formatAge(failure.at_ms) }),
        ": ",
        h("strong", { class: "mono", text: failure.error_class ?? "error" }),
        failure.message ? ` ${failure.message}` : "",
        failure.transient === false ? " (not retried: the same input would fail again)" : "",
        retrying
          ? [
              ". Next attempt ",
              h("strong", { class: "next-retry", text: formatAge(failure.retry_at_ms) }),
              ` (${formatTime(failure.retry_at_ms)})`,
            ]
          : null,
        ".",
      );
    });
  }

  function renderHeldBack() {
    const held = detail.held_back; // written by the worker that kept its carrier waiting
    renderIfChanged(heldBox, [held, Math.floor(Date.now() / 1000)], () => {
      if (!held) return null;
      const holders = held.holders ?? [];
      return h(
        "p",
        { class: "callout held-back", dataset: { reason: held.reason } },
        h("strong", { text: `${HELD_BACK[held.reason] ?? "Held back"}. ` }),
        /[.!?]$/.test(held.detail) ? held.detail : `${held.detail}.`,
        " Since ",
        h("span", { title: formatTime(held.since_ms), text: formatAge(held.since_ms) }),
        held.due_ms
          ? [". Runs again ", h("strong", { title: formatTime(held.due_ms), text: formatAge(held.due_ms) })]
          : null,
        holders.length
          ? [
              `. Held by `,
              ...holders.flatMap((id, index) => [
                index ? ", " : "",
                h("a", { class: "mono", href: `#/executions/${encodeURIComponent(id)}`, text: id }),
              ]),
            ]
          : null,
        ".",
      );
    });
  }

  function showNode(nodeId) {
    selectedNode = selectedNode === nodeId ? null : nodeId;
    renderInspector();
    renderTimelineHistory();
    if (selectedNode) inspector.scrollIntoView({ block: "nearest" });
  }

  function renderInspector() {
    const node = flow?.document?.nodes?.find((candidate) => candidate.id === selectedNode);
    const result = detail?.node_results?.[selectedNode];
    const hasResult = Boolean(detail?.node_results && selectedNode in detail.node_results);
    // What its handler was given at its latest attempt, as the worker recorded it.
    const started = [...(history?.entries ?? [])]
      .reverse()
      .find((entry) => entry.kind === "node_started" && entry.node_id === selectedNode && entry.detail);
    const rendered = started?.detail?.params;
    const renderedBytes = started?.detail?.params_bytes;
    renderIfChanged(inspector, [selectedNode, node, result, hasResult, rendered, renderedBytes], () => {
      inspector.hidden = !selectedNode;
      if (!selectedNode) return null;
      const { id, type, params, ...options } = node ?? {};
      return [
        h(
          "div",
          { class: "view-head" },
          h("h2", { id: "node-title" }, "Node ", h("span", { class: "mono", text: selectedNode })),
          h("button", { type: "button", class: "secondary small", text: "Close", onclick: () => showNode(selectedNode) }),
        ),
        node ? h("p", { class: "muted", text: `A ${type} node.` }) : h("p", { class: "muted", text: "This node is not in the flow's definition." }),
        h("div", { class: "data-grid" },
          h("section", {},
            h("h3", { text: "Parameters" }),
            rendered !== undefined
              ? [
                  h("p", { class: "muted", text: `As its handler got them at attempt ${started.attempt ?? 1}.` }),
                  jsonView(rendered, { label: `Parameters of node ${selectedNode}` }),
                ]
              : [
                  h("p", {
                    class: "muted",
                    text:
                      renderedBytes !== undefined
                        ? `Its handler got ${renderedBytes} bytes of parameters (too large to keep in the history); as the definition writes them:`
                        : "As the definition writes them; expressions are filled in from the input and earlier results when the node runs.",
                  }),
                  params === undefined ? h("p", { class: "muted", text: "None." }) : jsonView(params, { label: `Parameters of node ${selectedNode}` }),
                ],
            Object.keys(options).length ? [h("h3", { text: "Options" }), jsonView(options, { label: `Options of node ${selectedNode}`, openDepth: 1 })] : null,
          ),
          h("section", {},
            h("h3", { text: "Result" }),
            hasResult ? jsonView(result, { label: `Result of node ${selectedNode}` }) : h("p", { class: "muted", text: "No result yet." }),
          ),
        ),
      ];
    });
  }

  function renderTimelineHistory() {
    renderHistory(historyBox, history, { onNode: showNode, node: null });
    for (const item of historyBox.querySelectorAll("li.entry")) {
      item.classList.toggle("selected", Boolean(selectedNode) && item.dataset.node === selectedNode);
    }
  }

  function renderSummary() {
    renderIfChanged(badges, [detail.status, detail.paused, detail.cancel_requested], () => [
      statusBadge(detail.status, "large"),
      detail.paused ? h("span", { class: "badge paused", text: "paused" }) : null,
      detail.cancel_requested
        ? h("span", { class: "badge status-cancelled", text: "cancel requested" })
        : null,
    ]);
    renderIfChanged(parentBox, detail.parent ?? null, () => parentLine(detail.parent));
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
      if (wait.child_id || wait.children) return childrenWait(wait);
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
    renderIfChanged(data, [detail.input, detail.variables, detail.result, detail.error, detail.node_results], () => [
      h("section", { class: "card" }, h("h2", { text: "Input" }), jsonView(detail.input ?? {}, { label: "Input" })),
      h(
        "section",
        { class: "card result" },
        h("h2", { text: "Result" }),
        detail.result === null || detail.result === undefined
          ? h("p", { class: "muted", text: TERMINAL.has(detail.status) ? "No result." : "Not finished yet." })
          : jsonView(detail.result, { label: "Result" }),
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
              detail.error.node_id ? [" at node ", h("span", { class: "mono", text: detail.error.node_id })] : null,
            ),
            jsonView(detail.error, { label: "Error", openDepth: 1 }),
          )
        : null,
      h("section", { class: "card" }, h("h2", { text: "Variables" }), jsonView(detail.variables ?? {}, { label: "Variables", openDepth: 1 })),
      h(
        "section",
        { class: "card wide" },
        h("h2", { text: `Node results (${Object.keys(detail.node_results ?? {}).length})` }),
        jsonView(detail.node_results ?? {}, { label: "Node results", openDepth: 1 }),
      ),
    ]);
  }

  function renderPublish() {
    if (!ctx.can("operator")) return;
    const publishable = actionsOf().publish_event?.available !== false;
    publishSlot.hidden = !publishable;
    if (!publishable) return;
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
      // Said on the page, not only in the form: the event may end the wait at once, and the
      // form goes away with the action (publishing is not offered to an ended execution).
      onPublished: (published) => {
        actionStatus.textContent = `Published ${published.event_type} as ${published.event_id}.`;
        refresh();
      },
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
    try {
      await history.refresh();
    } catch (error) {
      if (error.status !== 404) historyBox.replaceChildren(h("p", { class: "form-error", text: `${error.error}: ${error.message}` }));
    }
    renderSummary();
    renderRetry();
    renderHeldBack();
    renderActions();
    renderTimelineHistory();
    renderTimeline();
    renderData();
    await loadFlow();
    renderSummary();
    renderActions();
    renderGraph();
    renderInspector();
    renderPublish();
    await children.refresh(flow);
  }

  // A node clicked in the graph or the durations chart opens in the inspector.
  for (const box of [graphBox, timeline]) {
    box.addEventListener("click", (event) => {
      const target = event.target.closest("[data-node]");
      if (target) showNode(target.dataset.node);
    });
    box.addEventListener("keydown", (event) => {
      const target = event.target.closest?.("[data-node]");
      if (target && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        showNode(target.dataset.node);
      }
    });
  }

  return { root, refresh };
}
