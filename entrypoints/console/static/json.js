// A JSON value as a tree that folds: objects and arrays are <details> (open to `openDepth`),
// leaves are typed spans. Keyboard and screen readers get the native disclosure widget.

import { h } from "./dom.js";

const LEAF_TYPES = new Set(["string", "number", "boolean"]);

function leaf(value) {
  if (value === null || value === undefined) return h("span", { class: "json-null", text: "null" });
  const type = typeof value;
  const text = type === "string" ? JSON.stringify(value) : String(value);
  return h("span", { class: `json-${LEAF_TYPES.has(type) ? type : "other"}`, text });
}

function summaryOf(value) {
  if (Array.isArray(value)) return `[${value.length} item${value.length === 1 ? "" : "s"}]`;
  const keys = Object.keys(value);
  return `{${keys.length} key${keys.length === 1 ? "" : "s"}}`;
}

function node(key, value, depth, openDepth) {
  const label = key === null ? null : h("span", { class: "json-key", text: `${key}: ` });
  if (value === null || typeof value !== "object" || Object.keys(value).length === 0) {
    const empty = value !== null && typeof value === "object";
    return h("li", {}, label, empty ? h("span", { class: "json-other", text: Array.isArray(value) ? "[]" : "{}" }) : leaf(value));
  }
  const entries = Array.isArray(value) ? value.map((item, index) => [index, item]) : Object.entries(value);
  return h(
    "li",
    {},
    h(
      "details",
      { open: depth < openDepth },
      h("summary", {}, label, h("span", { class: "json-summary", text: summaryOf(value) })),
      h(
        "ul",
        { class: "json-tree" },
        entries.map(([childKey, child]) => node(childKey, child, depth + 1, openDepth)),
      ),
    ),
  );
}

// label: the accessible name of the tree ("Input", "Result of node ship" …).
export function jsonView(value, { label = "JSON", openDepth = 2 } = {}) {
  return h(
    "div",
    { class: "json-view", role: "group", "aria-label": label },
    h("ul", { class: "json-tree root" }, node(null, value === undefined ? null : value, 0, openDepth)),
  );
}
