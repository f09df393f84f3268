// A parent execution's children — the executions its subflow and map nodes started — as a
// paged table, and the line on a child's page that names the execution that started it.

import { h, renderIfChanged } from "./dom.js";
import { statusBadge } from "./executions.js";
import { formatAge, formatTime } from "./format.js";
import { pageParams, shownText } from "./paging.js";

const PAGE_SIZE = 20;
const CHILD_NODE_TYPES = new Set(["subflow", "map"]);

export function startsChildren(flow) {
  return (flow?.document?.nodes ?? []).some((node) => CHILD_NODE_TYPES.has(node.type));
}

function executionLink(executionId) {
  return h("a", {
    href: `#/executions/${encodeURIComponent(executionId)}`,
    class: "mono",
    dataset: { focusKey: `exec-${executionId}` },
    text: executionId,
  });
}

// "Started by p-1 (node each, item 3)", linking to the parent's page; nothing for an
// execution started any other way.
export function parentLine(parent) {
  if (!parent) return null;
  const item = parent.index === null || parent.index === undefined ? "" : `, item ${parent.index}`;
  return h(
    "p",
    { class: "parent-line" },
    "Started by ",
    executionLink(parent.execution_id),
    " (node ",
    h("span", { class: "mono", text: parent.node_id }),
    `${item})`,
  );
}

// What a parent waiting at a subflow or map node waits for: its child, or how far its
// children are. (Its timer is only its own check on them, not a deadline: not shown.)
export function childrenWait(wait) {
  const lead = [h("strong", { text: "Waiting " }), "at node ", h("span", { class: "mono", text: wait.node_id })];
  if (wait.child_id) {
    return h("p", { class: "callout" }, ...lead, " for its child execution ", executionLink(wait.child_id), " to end.");
  }
  const { total, started, succeeded, failed } = wait.children;
  const ended = succeeded + failed;
  return h(
    "p",
    { class: "callout" },
    ...lead,
    ` for its children: ${ended} of ${total} ended`,
    failed ? ` (${failed} failed)` : "",
    `, ${started - ended} running, ${total - started} not started yet.`,
  );
}

export function childrenSection(ctx, executionId) {
  const path = `executions/${encodeURIComponent(executionId)}/children`;
  let items = [];
  let nextCursor = null;
  let sequence = 0;

  const tbody = h("tbody");
  const listError = h("div", { class: "form-error", role: "alert", hidden: true });
  const moreButton = h("button", { type: "button", class: "secondary", text: "More", hidden: true });
  const shown = h("p", { class: "muted", role: "status" });
  const root = h(
    "section",
    { class: "card children", "aria-labelledby": "children-title", hidden: true },
    h("h2", { id: "children-title", text: "Children" }),
    h("p", {
      class: "muted",
      text: "The executions its subflow and map nodes started, node by node in the flow's order and a map's in item order.",
    }),
    listError,
    h(
      "div",
      { class: "table-wrap", tabindex: 0, "aria-label": "Children table (scrolls sideways on narrow screens)" },
      h(
        "table",
        { class: "children-table stack-narrow" },
        h("caption", { class: "visually-hidden", text: "Child executions" }),
        h(
          "thead",
          {},
          h("tr", {}, ["Execution", "Status", "Flow", "Updated", "Error"].map((name) => h("th", { scope: "col", text: name }))),
        ),
        tbody,
      ),
    ),
    h("div", { class: "buttons" }, moreButton, shown),
  );

  function render() {
    const now = Date.now();
    renderIfChanged(tbody, { items, second: Math.floor(now / 1000) }, () =>
      items.length
        ? items.map((item) =>
            h(
              "tr",
              { dataset: { executionId: item.execution_id, status: item.status } },
              h("td", {}, executionLink(item.execution_id)),
              h(
                "td",
                { "data-label": "Status" },
                statusBadge(item.status),
                item.paused ? h("span", { class: "badge paused", text: "paused" }) : null,
              ),
              h(
                "td",
                { "data-label": "Flow" },
                `${item.flow_id} `,
                h("span", { class: "muted", text: `v${item.flow_version}` }),
              ),
              h("td", { "data-label": "Updated", title: formatTime(item.updated_at_ms), text: formatAge(item.updated_at_ms, now) }),
              h("td", {
                class: "error-cell",
                "data-label": "Error",
                text: item.error ? `${item.error.code}: ${item.error.message}` : "",
              }),
            ),
          )
        : h("tr", {}, h("td", { colspan: 5, class: "empty", text: "No child started yet." })),
    );
    moreButton.hidden = !nextCursor;
    const text = shownText(items.length, nextCursor);
    if (shown.textContent !== text) shown.textContent = text;
  }

  async function load({ more = false } = {}) {
    const mine = ++sequence;
    const params = pageParams({ more, pageSize: PAGE_SIZE, shown: items.length, cursor: nextCursor });
    try {
      const page = await ctx.api.get(path, params);
      if (mine !== sequence) return;
      items = more ? [...items, ...page.items] : page.items;
      nextCursor = page.next_cursor ?? null;
      listError.hidden = true;
      render();
    } catch (error) {
      if (mine !== sequence) return;
      listError.replaceChildren(h("strong", { text: `${error.error}: ` }), error.message);
      listError.hidden = false;
    }
  }
  moreButton.addEventListener("click", () => load({ more: true }));

  // Shown only for an execution whose flow has subflow or map nodes.
  async function refresh(flow) {
    root.hidden = !startsChildren(flow);
    if (!root.hidden) await load();
  }

  return { root, refresh };
}
