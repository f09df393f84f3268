// The publish-event form: used on the Events page and, prefilled, on an execution's page.

import { h } from "./dom.js";
import {
  clearErrors,
  errorRegion,
  field,
  jsonTextarea,
  readJsonObject,
  setBusy,
  setFieldError,
  showError,
} from "./forms.js";

export function publishForm(ctx, { correlationId = "", eventType = "", onPublished } = {}) {
  const type = h("input", { name: "event_type", type: "text", required: true, autocomplete: "off" });
  type.value = eventType;
  const correlation = h("input", { name: "correlation_id", type: "text", autocomplete: "off" });
  correlation.value = correlationId;
  const data = jsonTextarea("data", "{}");
  const tenant = h("input", { name: "tenant", type: "text", required: true, autocomplete: "off" });
  tenant.value = ctx.session.tenant;
  const status = h("p", { class: "form-status", role: "status" });

  const form = h(
    "form",
    { class: "card publish-form", novalidate: true, "aria-label": "Publish an event" },
    h("h2", { text: "Publish an event" }),
    h(
      "div",
      { class: "grid-2" },
      field("Event type", type),
      field("Correlation id", correlation, "Usually the execution id that waits for the event."),
    ),
    field("Data (JSON object)", data),
    field("Tenant", tenant),
    errorRegion(),
    h("div", { class: "buttons" }, h("button", { type: "submit", text: "Publish event" })),
    status,
  );

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    status.textContent = "";
    let valid = true;
    if (!type.value.trim()) {
      setFieldError(type, "Name the event type, for example approval_decision.");
      valid = false;
    }
    const parsed = readJsonObject(data);
    if (!valid || !parsed.ok) {
      form.querySelector("[aria-invalid]")?.focus();
      return;
    }
    setBusy(form, true);
    try {
      const published = await ctx.api.post("events", {
        event_type: type.value.trim(),
        correlation_id: correlation.value.trim() || undefined,
        data: parsed.value ?? {},
        source: "console",
        tenant: tenant.value.trim() || ctx.session.tenant,
      });
      status.textContent = `Published ${published.event_type} as ${published.event_id}.`;
      onPublished?.(published);
    } catch (error) {
      showError(form, error);
    } finally {
      setBusy(form, false);
    }
  });
  return form;
}
