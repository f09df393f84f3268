// The execution's history as its timeline: every attempt of every node, failures with their
// traceback (folded), retries with their due time, waits, events, timers, operator actions
// and the end — read from GET /executions/{id}/history, page after page (next_cursor).

import { h, renderIfChanged } from "./dom.js";
import { formatAge, formatDuration, formatTime } from "./format.js";

const PAGE = 500;
//: A refresh reads at most this many pages (the store keeps at most 1,000 entries).
const MAX_PAGES = 10;

const AFFINITY_WORDS = {
  target_absent: "it is not registered",
  target_not_running: "it is not running",
  target_heartbeat_lapsed: "its heartbeat lapsed",
  handovers_exhausted: "passed on too often",
};

const FAILURE_WORDS = {
  transient: "a temporary error: retried while attempts remain",
  deterministic: "not retried: the same input would fail again",
  terminal: "stopped it (a timeout or a cancel)",
};

export function historyLoader(ctx, executionId) {
  const path = `executions/${encodeURIComponent(executionId)}/history`;
  let entries = [];
  let dropped = 0;
  return {
    get entries() {
      return entries;
    },
    get dropped() {
      return dropped;
    },
    // Reads what was appended since the last call; the store numbers entries from 1.
    async refresh() {
      let after = entries.length ? entries[entries.length - 1].seq : undefined;
      for (let page = 0; page < MAX_PAGES; page += 1) {
        const answer = await ctx.api.get(path, { after, limit: PAGE });
        entries = [...entries, ...answer.entries];
        dropped = answer.dropped;
        if (answer.next_cursor === null || answer.next_cursor === undefined) break;
        after = answer.next_cursor;
      }
      return entries;
    },
  };
}

function nodeButton(nodeId, onNode) {
  if (!nodeId) return null;
  return h("button", {
    type: "button",
    class: "link mono",
    dataset: { node: nodeId, focusKey: `history-node-${nodeId}` },
    "aria-label": `Show node ${nodeId}`,
    text: nodeId,
    onclick: () => onNode(nodeId),
  });
}

function when(ms, nowMs) {
  return h("span", { title: formatTime(ms) }, `${formatTime(ms)} (${formatAge(ms, nowMs)})`);
}

// How a start reached plaita, in an operator's words (an embedding program says nothing).
const ENTRY_POINTS = { api: "API", cli: "command line", sdk: "Python client" };

function describe(entry, onNode, nowMs) {
  const node = nodeButton(entry.node_id, onNode);
  const attempt = entry.attempt ? h("span", { class: "badge attempt", text: `attempt ${entry.attempt}` }) : null;
  const d = entry.detail ?? {};
  switch (entry.kind) {
    case "accepted":
      return [
        "Accepted",
        d.by && d.by !== "unknown" ? ` from ${d.by}` : "",
        ENTRY_POINTS[d.via] ? ` through the ${ENTRY_POINTS[d.via]}` : "",
        d.dedup_key ? `, dedup key ${d.dedup_key}` : "",
        d.priority ? `, priority ${d.priority}` : "",
        "; waiting for a worker",
      ];
    case "started":
      return [
        "Picked up by a worker",
        d.via && d.via !== "start" ? ` (given back by ${d.via})` : "",
        d.input_bytes !== undefined ? `, input ${d.input_bytes} bytes` : "",
      ];
    case "node_started":
      return ["Node ", node, " started ", attempt];
    case "node_finished":
      return [
        "Node ",
        node,
        " finished ",
        attempt,
        ` in ${formatDuration(d.duration_ms)}`,
        d.result_bytes !== undefined ? `, result ${d.result_bytes} bytes` : "",
      ];
    case "node_failed":
      return [
        "Node ",
        node,
        " failed ",
        attempt,
        ": ",
        h("strong", { class: "mono", text: d.error_class ?? "error" }),
        d.message ? [" ", h("span", { class: "message", text: d.message })] : null,
        d.failure ? h("span", { class: "muted", text: ` — ${FAILURE_WORDS[d.failure] ?? d.failure}` }) : null,
        d.traceback
          ? h(
              "details",
              { class: "traceback" },
              h("summary", { text: "Traceback" }),
              h("pre", { class: "code", tabindex: 0, text: d.traceback }),
            )
          : null,
      ];
    case "retry_scheduled":
      return [
        "Retry of node ",
        node,
        " scheduled: ",
        h("span", { class: "badge attempt", text: `attempt ${d.next_attempt ?? (entry.attempt ?? 0) + 1}` }),
        " at ",
        d.due_ms ? when(d.due_ms, nowMs) : "—",
      ];
    case "rate_limited":
      return [
        "Node ",
        node,
        " held back by its rate limit ",
        h("code", { text: d.key ?? "?" }),
        "; runs at ",
        d.due_ms ? when(d.due_ms, nowMs) : "—",
        h("span", { class: "muted", text: " (not an attempt)" }),
      ];
    case "suspended":
      return [
        "Waiting at node ",
        node,
        d.event_type ? [" for an event ", h("code", { text: d.event_type })] : null,
        d.event_type && d.timer_due_ms ? " or" : null,
        d.timer_due_ms ? [" for a timer due at ", when(d.timer_due_ms, nowMs)] : null,
      ];
    case "event_received":
      return [
        "Event ",
        h("code", { text: d.event_type ?? "?" }),
        " received",
        entry.node_id ? [" at node ", node] : null,
        d.event_id ? h("span", { class: "muted mono", text: ` (${d.event_id})` }) : null,
      ];
    case "timer_fired":
      return ["Timer fired", entry.node_id ? [" at node ", node] : null];
    case "lease_lost":
      return [
        "The worker lost its hold on the execution",
        entry.node_id ? [" at node ", node] : null,
        "; another worker carries on from the last saved step",
      ];
    case "attempt_crashed":
      return [
        "An earlier attempt",
        entry.node_id ? [" at node ", node] : null,
        " never finished: its worker stopped in the middle of the step, so nothing of it was saved",
        d.crashes ? ` (${d.crashes} so far; at the limit the execution is stopped)` : "",
      ];
    case "fenced":
      return [
        "A worker's save was refused because another worker had taken the execution over",
        entry.node_id ? [" (node ", node, ")"] : null,
        "; the step runs again from the last saved one",
      ];
    case "handed_over":
      return [
        "Passed on towards worker ",
        h("code", { text: d.target ?? "?" }),
        h("span", { class: "muted", text: ` (hand-over ${d.handovers ?? "?"})` }),
      ];
    case "target_stripped":
      return [
        "Worker ",
        h("code", { text: d.target ?? "?" }),
        " dropped as its target; any worker runs it",
        h("span", { class: "muted", text: ` (${AFFINITY_WORDS[d.reason] ?? d.reason ?? "?"})` }),
      ];
    case "operator_action": {
      const extra = Object.entries(d).filter(([key]) => key !== "who" && key !== "action");
      return [
        "Operator ",
        h("strong", { text: d.who ?? "?" }),
        ": ",
        h("span", { class: "mono", text: d.action ?? "?" }),
        extra.length ? h("span", { class: "muted", text: ` (${extra.map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ")})` }) : null,
      ];
    }
    case "ended":
      return [
        "Ended: ",
        h("span", { class: `badge status-${d.status}`, text: d.status ?? "?" }),
        entry.node_id ? [" at node ", node] : null,
        d.message ? [" — ", h("span", { class: "message", text: d.message })] : null,
      ];
    default:
      return [entry.kind, node ? [" ", node] : null];
  }
}

export function historyList(entries, { dropped = 0, onNode, nowMs = Date.now(), node = null }) {
  const shown = node ? entries.filter((entry) => entry.node_id === node) : entries;
  if (!shown.length) return h("p", { class: "muted", text: "Nothing recorded yet." });
  const t0 = entries[0]?.at_ms;
  return [
    dropped
      ? h("p", { class: "muted", text: `The ${dropped} oldest entries were dropped (the history keeps the last 1,000).` })
      : null,
    h(
      "ol",
      { class: "history", "aria-label": node ? `History of node ${node}` : "History" },
      shown.map((entry) =>
        h(
          "li",
          { class: `entry kind-${entry.kind}`, dataset: { kind: entry.kind, node: entry.node_id ?? "", seq: entry.seq } },
          h("span", {
            class: "when",
            title: formatTime(entry.at_ms),
            text: t0 !== undefined ? `+${formatDuration(entry.at_ms - t0)}` : formatTime(entry.at_ms),
          }),
          h("span", { class: "what" }, describe(entry, onNode, nowMs)),
          entry.worker ? h("span", { class: "worker muted", title: "Worker instance", text: entry.worker }) : null,
        ),
      ),
    ),
  ];
}

export function renderHistory(container, loader, options) {
  const key = [loader.entries.length, loader.dropped, options.node, Math.floor(Date.now() / 5000)];
  renderIfChanged(container, key, () => historyList(loader.entries, { ...options, dropped: loader.dropped }));
}
