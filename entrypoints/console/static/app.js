// plaita console: a hash-routed single page over the console API. No build step: the
// browser loads these modules as they are.

import { Api, Session } from "./api.js";
import { h, swap } from "./dom.js";
import { executionView } from "./execution.js";
import { executionsView } from "./executions.js";
import { flowView, flowsView } from "./flows.js";
import { clearErrors, errorRegion, field, setBusy, showError } from "./forms.js";
import { dlqView, eventsView, queueStrip, workersView } from "./ops.js";
import { scheduleView, schedulesView } from "./schedules.js";
import { tenantsView } from "./tenants.js";

const POLL_MS = 2000;
const ROLES = ["viewer", "operator", "admin"];

const session = new Session();
const main = document.getElementById("main");
const live = document.getElementById("live");
const flashBox = document.getElementById("flash");
const sessionBox = document.getElementById("session");
const whoami = document.getElementById("whoami");
const tenantInput = document.getElementById("tenant");

let identity = null; // {name, role, tenants} when the API tells; null = unknown
let current = null;
let timer = null;
let chain = 0;
let firstRoute = true;
let pendingFlash = "";
let signingIn = false;
const flowCache = new Map();

const api = new Api(session, {
  onUnauthorized: (error) => {
    if (!session.token || signingIn) return;
    session.token = "";
    showSignIn(`${error.message} Sign in again.`);
  },
});

const ctx = {
  api,
  session,
  navigate(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  },
  flash(message) {
    pendingFlash = message;
  },
  can(role) {
    if (!identity?.role) return true; // the API will answer 403 if not
    return ROLES.indexOf(identity.role) >= ROLES.indexOf(role);
  },
  // An admin of every tenant ("*"): what the deployment's own settings need.
  canForEveryTenant() {
    return ctx.can("admin") && (!identity || (identity.tenants ?? []).includes("*"));
  },
  flows(flowId, version) {
    const key = `${session.tenant}\u0000${flowId}\u0000${version ?? ""}`;
    if (!flowCache.has(key)) {
      const request = api.get(`flows/${encodeURIComponent(flowId)}`, { version });
      request.catch(() => flowCache.delete(key));
      flowCache.set(key, request);
    }
    return flowCache.get(key);
  },
};

const refreshQueue = queueStrip(ctx, document.getElementById("queue-stats"));

// --- polling: every 2 s while the tab is visible ----------------------------------------

async function tick(mine) {
  if (mine !== chain || document.hidden || !session.token || !current) return;
  const view = current;
  await Promise.allSettled([view.refresh(), refreshQueue()]);
  if (mine !== chain) return;
  live.textContent = `Live · updated ${new Date().toLocaleTimeString()}`;
  live.dataset.state = "live";
  timer = setTimeout(() => tick(mine), POLL_MS);
}

function restartPolling() {
  chain += 1;
  clearTimeout(timer);
  tick(chain);
}

document.addEventListener("visibilitychange", () => {
  if (document.hidden) {
    chain += 1;
    clearTimeout(timer);
    live.textContent = "Paused while the tab is hidden";
    live.dataset.state = "paused";
  } else {
    restartPolling();
  }
});

// --- routing -----------------------------------------------------------------------------

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, search = ""] = raw.split("?");
  return {
    parts: path.split("/").filter(Boolean).map(decodeURIComponent),
    query: new URLSearchParams(search),
  };
}

function viewFor({ parts, query }) {
  const [section, id] = parts;
  if (section === "executions" && id) return ["executions", executionView(ctx, id)];
  if (section === "flows" && id) return ["flows", flowView(ctx, id, query)];
  if (section === "flows") return ["flows", flowsView(ctx)];
  if (section === "schedules" && id) return ["schedules", scheduleView(ctx, id)];
  if (section === "schedules") return ["schedules", schedulesView(ctx)];
  if (section === "tenants") return ["tenants", tenantsView(ctx)];
  if (section === "dlq") return ["dlq", dlqView(ctx)];
  if (section === "workers") return ["workers", workersView(ctx)];
  if (section === "events") return ["events", eventsView(ctx, query)];
  return ["executions", executionsView(ctx, query)];
}

function route() {
  if (!session.token) {
    showSignIn();
    return;
  }
  const parsed = parseHash();
  if (!parsed.parts.length) {
    history.replaceState(null, "", "#/executions");
    parsed.parts = ["executions"];
  }
  const [section, view] = viewFor(parsed);
  for (const link of document.querySelectorAll("nav a[data-route]")) {
    if (link.dataset.route === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  current = view;
  main.replaceChildren(view.root);
  showFlash();
  if (!firstRoute) main.querySelector("h1")?.focus();
  firstRoute = false;
  restartPolling();
}

function showFlash() {
  if (!pendingFlash) {
    flashBox.hidden = true;
    return;
  }
  flashBox.replaceChildren(
    h("span", { text: pendingFlash }),
    h("button", {
      type: "button",
      class: "secondary small",
      "aria-label": "Dismiss message",
      text: "Dismiss",
      onclick: () => {
        flashBox.hidden = true;
      },
    }),
  );
  flashBox.hidden = false;
  pendingFlash = "";
}

window.addEventListener("hashchange", route);

// --- signing in --------------------------------------------------------------------------

async function loadIdentity() {
  // The API may say who the token is; without such an endpoint every control shows and
  // the API's 403 answers for what the role may not do.
  try {
    const me = await api.get("whoami");
    identity = { name: me.name, role: me.role, tenants: me.tenants ?? [] };
  } catch (error) {
    if (error.status === 401) throw error;
    identity = null;
    await api.get("flows"); // still proves the token before the page trusts it
  }
}

function renderSession() {
  sessionBox.hidden = !session.token;
  tenantInput.value = session.tenant;
  const tenants = new Set(["default", session.tenant, ...(identity?.tenants ?? []).filter((t) => t !== "*")]);
  document.getElementById("tenants").replaceChildren(...[...tenants].map((t) => h("option", { value: t })));
  swap(
    whoami,
    identity
      ? [
          h("span", { class: "who", text: identity.name ?? "signed in" }),
          " ",
          h("span", { class: "badge role", text: identity.role }),
          h("span", { class: "muted", text: ` tenants: ${(identity.tenants ?? []).join(", ") || "—"}` }),
        ]
      : h("span", { class: "who", text: `signed in (token …${session.token.slice(-4)})` }),
  );
  for (const link of document.querySelectorAll("nav a[data-role]")) {
    link.parentElement.hidden = !ctx.can(link.dataset.role);
  }
}

function showSignIn(message) {
  chain += 1;
  clearTimeout(timer);
  current = null;
  identity = null;
  renderSession();
  live.textContent = "";
  document.getElementById("queue-stats").replaceChildren();
  const token = h("input", {
    name: "token",
    type: "password",
    autocomplete: "off",
    required: true,
    spellcheck: "false",
  });
  const form = h(
    "form",
    { class: "card sign-in", novalidate: true, "aria-labelledby": "view-title" },
    h("h1", { id: "view-title", tabindex: -1, text: "Sign in" }),
    h("p", {
      text: "The console API needs a bearer token. It is kept in this tab only (sessionStorage) until you sign out.",
    }),
    field(
      "API token",
      token,
      "plaita dev prints an admin token; other tokens come from PLAITA_CONSOLE_TOKENS or --tokens-file.",
    ),
    errorRegion(),
    h("div", { class: "buttons" }, h("button", { type: "submit", text: "Sign in" })),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    const value = token.value.trim();
    if (!value) {
      showError(form, {
        error: "",
        message: "Paste a token first.",
        fieldErrors: [{ loc: ["token"], msg: "Required." }],
      });
      token.focus();
      return;
    }
    setBusy(form, true);
    session.token = value;
    signingIn = true;
    try {
      await loadIdentity();
    } catch (error) {
      session.token = "";
      setBusy(form, false);
      showError(
        form,
        error.status === 401
          ? { ...error, error: error.error, message: "This console does not know that token." }
          : error,
      );
      token.focus();
      return;
    } finally {
      signingIn = false;
    }
    setBusy(form, false);
    renderSession();
    route();
  });
  main.replaceChildren(form);
  if (message) showError(form, { error: "", message });
  token.focus();
}

document.getElementById("sign-out").addEventListener("click", () => {
  session.token = "";
  flowCache.clear();
  showSignIn("Signed out.");
});

document.getElementById("tenant-form").addEventListener("submit", (event) => {
  event.preventDefault();
  tenantInput.blur();
});
tenantInput.addEventListener("change", () => {
  session.tenant = tenantInput.value.trim();
  tenantInput.value = session.tenant;
  route();
});

document.querySelector(".skip-link").addEventListener("click", (event) => {
  event.preventDefault();
  (main.querySelector("h1") ?? main).focus();
});

async function boot() {
  if (!session.token) {
    showSignIn();
    return;
  }
  try {
    await loadIdentity();
  } catch (error) {
    if (error.status !== 401) showSignIn(error.message);
    return;
  }
  renderSession();
  route();
}

boot();
