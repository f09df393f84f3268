// Form plumbing: labelled fields, inline errors from the API next to the form they belong
// to (never alert()), JSON textareas validated as the user types, and a confirm dialog.

import { h, swap } from "./dom.js";

let fieldCounter = 0;

// A labelled input, select or textarea with a slot for its own error message.
export function field(label, control, hint) {
  fieldCounter += 1;
  const id = control.id || `field-${fieldCounter}`;
  control.id = id;
  const errorId = `${id}-error`;
  const hintId = hint ? `${id}-hint` : null;
  control.setAttribute("aria-describedby", [hintId, errorId].filter(Boolean).join(" "));
  return h(
    "div",
    { class: "field" },
    h("label", { for: id, text: label }),
    control,
    hint ? h("p", { class: "hint", id: hintId, text: hint }) : null,
    h("p", { class: "field-error", id: errorId, hidden: true }),
  );
}

export function errorRegion() {
  return h("div", { class: "form-error", role: "alert", hidden: true });
}

export function setFieldError(control, message) {
  const slot = document.getElementById(`${control.id}-error`);
  if (message) {
    control.setAttribute("aria-invalid", "true");
    if (slot) {
      slot.textContent = message;
      slot.hidden = false;
    }
  } else {
    control.removeAttribute("aria-invalid");
    if (slot) {
      slot.textContent = "";
      slot.hidden = true;
    }
  }
}

export function clearErrors(form) {
  for (const control of form.querySelectorAll("[aria-invalid]")) setFieldError(control, "");
  for (const region of form.querySelectorAll(".form-error")) {
    region.hidden = true;
    region.replaceChildren();
  }
}

// Shows an ApiError inside `form`: each field error beside its field (matched by the
// last name in `loc`), the rest and the message in the form's error region.
export function showError(form, error) {
  const region = form.querySelector(".form-error");
  const unmatched = [];
  for (const item of error.fieldErrors ?? []) {
    const names = (item.loc ?? []).filter((part) => typeof part === "string" && part !== "body");
    const control = names.length ? form.elements.namedItem(names.at(-1)) : null;
    if (control instanceof Element) setFieldError(control, item.msg);
    else unmatched.push(`${(item.loc ?? []).join(".")}: ${item.msg}`);
  }
  if (!region) return;
  swap(
    region,
    h("strong", { text: error.error ? `${error.error}: ` : "" }),
    error.message,
    unmatched.length
      ? h(
          "ul",
          {},
          unmatched.map((text) => h("li", { text })),
        )
      : null,
  );
  region.hidden = false;
}

// Parses a JSON textarea that must hold an object; marks it invalid inline when not.
export function readJsonObject(control, { required = false } = {}) {
  const text = control.value.trim();
  if (!text) {
    if (required) {
      setFieldError(control, "Enter a JSON object, for example {}.");
      return { ok: false };
    }
    setFieldError(control, "");
    return { ok: true, value: undefined };
  }
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    setFieldError(control, `Not valid JSON: ${error.message}`);
    return { ok: false };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    setFieldError(control, 'Must be a JSON object, for example {"amount": 5000}.');
    return { ok: false };
  }
  setFieldError(control, "");
  return { ok: true, value };
}

export function jsonTextarea(name, value) {
  const control = h("textarea", {
    name,
    rows: 5,
    spellcheck: "false",
    autocomplete: "off",
    class: "code",
  });
  control.value = value;
  control.addEventListener("input", () => readJsonObject(control));
  return control;
}

export function setBusy(form, busy) {
  for (const button of form.querySelectorAll("button")) button.disabled = busy;
  form.setAttribute("aria-busy", busy ? "true" : "false");
}

// A modal confirmation; Escape or "Cancel" answers no. Resolves {confirmed, reason}.
export function confirmAction({ title, message, confirmLabel, askReason = false }) {
  const reason = h("input", { name: "reason", type: "text", autocomplete: "off" });
  const dialog = h(
    "dialog",
    { class: "dialog", "aria-labelledby": "confirm-title" },
    h(
      "form",
      { method: "dialog" },
      h("h2", { id: "confirm-title", text: title }),
      h("p", { text: message }),
      askReason ? field("Reason (recorded with the deletion)", reason) : null,
      h(
        "div",
        { class: "buttons" },
        h("button", { type: "submit", value: "cancel", class: "secondary", text: "Cancel" }),
        h("button", { type: "submit", value: "confirm", class: "danger", text: confirmLabel }),
      ),
    ),
  );
  document.body.append(dialog);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      resolve({ confirmed: dialog.returnValue === "confirm", reason: reason.value.trim() });
      dialog.remove();
    });
    dialog.showModal();
    (askReason ? reason : dialog.querySelector("button.secondary")).focus();
  });
}
