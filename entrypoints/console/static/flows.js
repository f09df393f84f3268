// The flows page: the flows the tenant's executions can run, a flow's versions (which one
// is the latest), a version drawn as a graph, links to its executions, and registering a
// definition (pasted JSON or a file) through POST /flows.

import { h, renderIfChanged } from "./dom.js";
import { clearErrors, errorRegion, field, setBusy, setFieldError, showError } from "./forms.js";
import { flowGraph } from "./graph.js";
import { jsonView } from "./json.js";

const NO_MARKS = { current: null, visited: new Set(), failed: new Set() };

function whose(flow) {
  return flow.shared ? "shared by every tenant" : `tenant ${flow.tenant_id}'s own`;
}

function executionsLink(flowId, text = "Executions") {
  return h("a", { href: `#/executions?flow_id=${encodeURIComponent(flowId)}`, text });
}

export function flowsView(ctx) {
  const loadError = h("div", { class: "form-error", role: "alert", hidden: true });
  const tbody = h("tbody");
  let items = [];

  const root = h(
    "section",
    { class: "view", "aria-labelledby": "view-title" },
    h("div", { class: "view-head" }, h("h1", { id: "view-title", tabindex: -1, text: "Flows" })),
    h("p", { class: "muted", text: "The flows this tenant's executions can run, at their latest version." }),
    loadError,
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "flows" },
        h("caption", { class: "visually-hidden", text: "Flows" }),
        h("thead", {}, h("tr", {}, ["Flow", "Latest version", "Nodes", "Whose", ""].map((name) => h("th", { scope: "col", text: name })))),
        tbody,
      ),
    ),
    ctx.can("admin") ? registerForm(ctx, () => refresh()) : null,
  );

  async function refresh() {
    try {
      items = (await ctx.api.get("flows")).items ?? [];
      loadError.hidden = true;
    } catch (error) {
      loadError.replaceChildren(h("strong", { text: `${error.error}: ` }), error.message);
      loadError.hidden = false;
      return;
    }
    renderIfChanged(tbody, items, () =>
      items.length
        ? items.map((flow) =>
            h(
              "tr",
              { dataset: { flowId: flow.flow_id } },
              h("td", {}, h("a", { class: "mono", href: `#/flows/${encodeURIComponent(flow.flow_id)}`, text: flow.flow_id })),
              h("td", { text: `v${flow.version}` }),
              h("td", { text: String(flow.node_count) }),
              h("td", { text: whose(flow) }),
              h("td", {}, executionsLink(flow.flow_id)),
            ),
          )
        : h("tr", {}, h("td", { colspan: 5, class: "empty", text: "No flow is registered yet." })),
    );
  }
  return { root, refresh };
}

export function flowView(ctx, flowId, query) {
  let chosen = query.get("version") ?? "";
  const loadError = h("div", { class: "form-error", role: "alert", hidden: true });
  const versionsBox = h("div", { class: "versions" });
  const graphBox = h("div", { class: "chart-scroll" });
  const documentBox = h("div");
  const meta = h("p", { class: "muted" });

  const root = h(
    "section",
    { class: "view flow-view", "aria-labelledby": "view-title" },
    h("p", {}, h("a", { href: "#/flows", text: "← All flows" })),
    h(
      "div",
      { class: "view-head" },
      h("h1", { id: "view-title", tabindex: -1 }, "Flow ", h("span", { class: "mono", text: flowId })),
      executionsLink(flowId, "Its executions →"),
    ),
    loadError,
    h("section", { class: "card", "aria-labelledby": "versions-title" }, h("h2", { id: "versions-title", text: "Versions" }), versionsBox),
    h(
      "figure",
      { class: "card", "aria-labelledby": "flow-graph-title" },
      h("figcaption", {}, h("h2", { id: "flow-graph-title", text: "Graph" })),
      meta,
      graphBox,
    ),
    h("section", { class: "card" }, h("h2", { text: "Definition" }), documentBox),
  );

  async function refresh() {
    let versions;
    let flow;
    try {
      versions = await ctx.api.get(`flows/${encodeURIComponent(flowId)}/versions`);
      flow = await ctx.flows(flowId, chosen || versions.latest_version);
      loadError.hidden = true;
    } catch (error) {
      loadError.replaceChildren(h("strong", { text: `${error.error}: ` }), error.message);
      loadError.hidden = false;
      return;
    }
    const shown = flow.version;
    renderIfChanged(versionsBox, [versions, shown], () =>
      h(
        "ul",
        { class: "version-list" },
        versions.versions.map((version) =>
          h(
            "li",
            { dataset: { version } },
            h("a", {
              href: `#/flows/${encodeURIComponent(flowId)}?version=${encodeURIComponent(version)}`,
              "aria-current": version === shown ? "true" : undefined,
              text: `v${version}`,
              onclick: (event) => {
                event.preventDefault();
                chosen = version;
                history.replaceState(null, "", `#/flows/${encodeURIComponent(flowId)}?version=${encodeURIComponent(version)}`);
                refresh();
              },
            }),
            version === versions.latest_version ? h("span", { class: "badge latest", text: "latest" }) : null,
          ),
        ),
      ),
    );
    meta.textContent = `Version ${shown}, ${whose(flow)}, fingerprint ${flow.fingerprint.slice(0, 12)}…`;
    renderIfChanged(graphBox, [shown, flow.fingerprint], () => flowGraph(flow.graph, flow.document?.start, NO_MARKS));
    renderIfChanged(documentBox, [shown, flow.fingerprint], () => jsonView(flow.document, { label: `Definition of ${flowId} v${shown}`, openDepth: 1 }));
  }
  return { root, refresh };
}

function registerForm(ctx, onRegistered) {
  const documentText = h("textarea", {
    name: "document",
    rows: 10,
    spellcheck: "false",
    class: "mono",
    placeholder: '{"flow_id": "hello", "version": "1", "start": "done", "nodes": [{"id": "done", "type": "end"}]}',
  });
  const file = h("input", { name: "file", type: "file", accept: ".json,application/json" });
  const shared = h("input", { name: "shared", type: "checkbox" });
  const status = h("p", { class: "form-status", role: "status" });
  const form = h(
    "form",
    { class: "card register-form", novalidate: true, "aria-label": "Register a flow" },
    h("h2", { text: "Register a flow" }),
    h("p", {
      class: "muted",
      text: "Paste a definition or choose its file. A registered version never changes: register an edit under a new version.",
    }),
    field("Definition (JSON)", documentText),
    field("Or a file", file),
    h("label", { class: "checkbox" }, shared, " Shared by every tenant (needs an admin of every tenant)"),
    errorRegion(),
    h("div", { class: "buttons" }, h("button", { type: "submit", text: "Register" })),
    status,
  );
  file.addEventListener("change", async () => {
    const [chosen] = file.files;
    if (chosen) documentText.value = await chosen.text();
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    status.textContent = "";
    let definition;
    try {
      definition = JSON.parse(documentText.value);
    } catch (error) {
      setFieldError(documentText, `Not valid JSON: ${error.message}`);
      documentText.focus();
      return;
    }
    if (definition === null || typeof definition !== "object" || Array.isArray(definition)) {
      setFieldError(documentText, "A flow definition is a JSON object.");
      documentText.focus();
      return;
    }
    setBusy(form, true);
    try {
      const answer = shared.checked
        ? await ctx.api.post("flows", { ...definition, shared: true }, { tenant: false })
        : await ctx.api.post("flows", definition);
      status.textContent =
        `${answer.created ? "Registered" : "Already registered, unchanged:"} ${answer.flow_id} v${answer.version}` +
        (answer.is_latest ? " — now the latest version." : ` — the latest stays v${answer.latest_version}.`);
      onRegistered();
    } catch (error) {
      showError(form, error);
    } finally {
      setBusy(form, false);
    }
  });
  return form;
}
