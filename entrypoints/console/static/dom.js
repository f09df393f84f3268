// Tiny DOM helpers: build elements from plain data, and re-render a region without
// losing the keyboard focus a user had inside it (the page re-renders every 2 s).

const SVG_NS = "http://www.w3.org/2000/svg";

function apply(element, attrs) {
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") element.textContent = String(value);
    else if (key === "dataset") Object.assign(element.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      element.addEventListener(key.slice(2), value);
    } else if (value === true) element.setAttribute(key, "");
    else element.setAttribute(key, String(value));
  }
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  apply(element, attrs);
  append(element, children);
  return element;
}

export function svg(tag, attrs, ...children) {
  const element = document.createElementNS(SVG_NS, tag);
  apply(element, attrs);
  append(element, children);
  return element;
}

// Replaces a region's children; the element that had the focus is found again by its
// data-focus-key so polling never yanks the focus away from a keyboard user.
export function swap(container, ...nodes) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.dataset?.focusKey : undefined;
  container.replaceChildren();
  append(container, nodes);
  if (key) {
    container.querySelector(`[data-focus-key="${CSS.escape(key)}"]`)?.focus({ preventScroll: true });
  }
}

// Re-renders a region only when the data it shows changed.
export function renderIfChanged(container, data, render) {
  const key = JSON.stringify(data);
  if (container.dataset.renderedKey === key) return;
  container.dataset.renderedKey = key;
  swap(container, render());
}
