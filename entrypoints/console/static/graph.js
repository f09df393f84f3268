// The flow drawn as a graph: a deterministic layered layout (BFS layers from the start
// node, left to right, discovery order within a layer), current node highlighted and
// visited nodes marked.

import { svg } from "./dom.js";

const NODE_WIDTH = 156;
const NODE_HEIGHT = 46;
const GAP_X = 58;
const GAP_Y = 24;
const PAD = 18;
const BACK_EDGE_ROOM = 44;

export function layoutGraph(graph, startId) {
  const ids = graph.nodes.map((node) => node.id);
  const outgoing = new Map(ids.map((id) => [id, []]));
  for (const edge of graph.edges) {
    if (outgoing.has(edge.from) && outgoing.has(edge.to)) outgoing.get(edge.from).push(edge.to);
  }
  const targets = new Set(graph.edges.map((edge) => edge.to));
  const start = outgoing.has(startId) ? startId : (ids.find((id) => !targets.has(id)) ?? ids[0]);

  const layerOf = new Map();
  const layers = [];
  const place = (id, layer) => {
    layerOf.set(id, layer);
    (layers[layer] ??= []).push(id);
  };
  if (start !== undefined) {
    place(start, 0);
    const queue = [start];
    while (queue.length) {
      const id = queue.shift();
      for (const next of outgoing.get(id)) {
        if (!layerOf.has(next)) {
          place(next, layerOf.get(id) + 1);
          queue.push(next);
        }
      }
    }
  }
  // Nodes no path reaches still show, in one last layer, in document order.
  const unreached = ids.filter((id) => !layerOf.has(id));
  const lastLayer = layers.length;
  for (const id of unreached) place(id, lastLayer);

  const tallest = Math.max(1, ...layers.map((layer) => layer.length));
  const positions = new Map();
  layers.forEach((layer, column) => {
    const offset = ((tallest - layer.length) * (NODE_HEIGHT + GAP_Y)) / 2;
    layer.forEach((id, row) => {
      positions.set(id, {
        x: PAD + column * (NODE_WIDTH + GAP_X),
        y: PAD + offset + row * (NODE_HEIGHT + GAP_Y),
        layer: column,
        row,
      });
    });
  });
  const backEdges = graph.edges.some(
    (edge) =>
      positions.has(edge.from) &&
      positions.has(edge.to) &&
      positions.get(edge.to).layer < positions.get(edge.from).layer,
  );
  const bottom = PAD + tallest * (NODE_HEIGHT + GAP_Y) - GAP_Y;
  return {
    start,
    layers,
    positions,
    width: PAD * 2 + Math.max(1, layers.length) * (NODE_WIDTH + GAP_X) - GAP_X,
    bottom,
    height: bottom + PAD + (backEdges ? BACK_EDGE_ROOM : 0),
  };
}

function bezierPoint(p0, p1, p2, p3, t) {
  const u = 1 - t;
  return u * u * u * p0 + 3 * u * u * t * p1 + 3 * u * t * t * p2 + t * t * t * p3;
}

function edgePath(from, to, bottom) {
  if (to.layer > from.layer) {
    const sx = from.x + NODE_WIDTH;
    const sy = from.y + NODE_HEIGHT / 2;
    const ex = to.x;
    const ey = to.y + NODE_HEIGHT / 2;
    const dx = (ex - sx) / 2;
    return { xs: [sx, sx + dx, ex - dx, ex], ys: [sy, sy, ey, ey] };
  }
  if (to.layer === from.layer && Math.abs(to.row - from.row) === 1) {
    // Stacked neighbours in one layer: a short vertical arrow.
    const x = from.x + NODE_WIDTH / 2;
    const down = to.row > from.row;
    const sy = down ? from.y + NODE_HEIGHT : from.y;
    const ey = down ? to.y : to.y + NODE_HEIGHT;
    return { xs: [x, x, x, x], ys: [sy, sy, ey, ey] };
  }
  if (to.layer === from.layer) {
    // Further apart in one layer: a bracket on the layer's right side.
    const sx = from.x + NODE_WIDTH;
    const bend = sx + GAP_X * 0.6;
    const sy = from.y + NODE_HEIGHT / 2;
    const ey = to.y + NODE_HEIGHT / 2;
    return { xs: [sx, bend, bend, sx], ys: [sy, sy, ey, ey] };
  }
  // A loop back to an earlier layer runs under every node.
  const sx = from.x + NODE_WIDTH / 2;
  const sy = from.y + NODE_HEIGHT;
  const ex = to.x + NODE_WIDTH / 2;
  const ey = to.y + NODE_HEIGHT;
  const low = bottom + BACK_EDGE_ROOM;
  return { xs: [sx, sx, ex, ex], ys: [sy, low, low, ey] };
}

// What fits under a node's id: "examples.handlers:create_request" reads as its function,
// "wait for approval_decision" as the event type; the full label is in the tooltip.
function briefLabel(type, label) {
  if (type === "task" && label.includes(":")) return label.split(":").at(-1);
  if (CHILD_TYPES.has(type)) return label.replace(/ \(.*\)$/, "");
  if (type === "event") return label.replace(/^wait for /, "");
  if (type === "end") return "";
  return label;
}

// A third line under a map's label: how many of its children run at once.
function extraLine(type, label) {
  return type === "map" ? (label.match(/ \((.*)\)$/)?.[1] ?? "") : "";
}

// Nodes that start child executions: their label names the child flow ("subflow → kyc",
// "map × per_item (10 at a time)") and reads without the type in front of it.
const CHILD_TYPES = new Set(["subflow", "map"]);

// What the node's shape adds to its rectangle: a subflow's inner bars (a process defined
// elsewhere), a map's stack of cards behind it (one child per item).
function childShape(type) {
  if (type === "subflow") {
    return [
      svg("line", { class: "node-bar", x1: 5, y1: 0, x2: 5, y2: NODE_HEIGHT }),
      svg("line", { class: "node-bar", x1: NODE_WIDTH - 5, y1: 0, x2: NODE_WIDTH - 5, y2: NODE_HEIGHT }),
    ];
  }
  return null;
}

function stackBehind(type) {
  if (type !== "map") return null;
  return [8, 4].map((offset) =>
    svg("rect", { class: "node-stack", x: offset, y: -offset, width: NODE_WIDTH, height: NODE_HEIGHT, rx: 8 }),
  );
}

function shorten(text, max = 18) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

// marks: {current: id|null, visited: Set, failed: Set}
export function flowGraph(graph, startId, marks) {
  const layout = layoutGraph(graph, startId);
  const { positions } = layout;
  const edges = graph.edges
    .filter((edge) => positions.has(edge.from) && positions.has(edge.to))
    .map((edge) => {
      const { xs, ys } = edgePath(positions.get(edge.from), positions.get(edge.to), layout.bottom);
      const d = `M${xs[0]},${ys[0]} C${xs[1]},${ys[1]} ${xs[2]},${ys[2]} ${xs[3]},${ys[3]}`;
      const walked = marks.visited.has(edge.from) && marks.visited.has(edge.to);
      return svg(
        "g",
        // A parallel node's edge to its join is where its branches meet, not a path: dashed.
        { class: `edge${walked ? " walked" : ""}${edge.label === "join" ? " join" : ""}` },
        svg("path", { d, "marker-end": walked ? "url(#arrow-walked)" : "url(#arrow)" }),
        edge.label && edge.label !== "next"
          ? svg("text", {
              class: "edge-label",
              x: bezierPoint(...xs, 0.5),
              y: bezierPoint(...ys, 0.5) - 5,
              "text-anchor": "middle",
              text: edge.label,
            })
          : null,
      );
    });

  const nodes = graph.nodes.map((node) => {
    const { x, y } = positions.get(node.id);
    const states = [];
    if (node.id === marks.current) states.push("current");
    if (marks.failed.has(node.id)) states.push("failed");
    else if (marks.visited.has(node.id)) states.push("visited");
    const detail = node.label && node.label !== node.id ? node.label : node.type;
    const brief = briefLabel(node.type, detail);
    const extra = extraLine(node.type, detail);
    const start = node.id === layout.start ? "start, " : "";
    const description =
      `${node.id} (${start}${node.type}: ${detail})` +
      (states.length ? `: ${states.join(", ")}` : ": not reached");
    return svg(
      "g",
      {
        class: ["node", `type-${node.type}`, ...states].join(" "),
        tabindex: 0,
        role: "listitem",
        "aria-label": description,
        dataset: { focusKey: `node-${node.id}`, node: node.id },
        transform: `translate(${x},${y})`,
      },
      svg("title", { text: description }),
      stackBehind(node.type),
      svg("rect", { width: NODE_WIDTH, height: NODE_HEIGHT, rx: node.type === "end" ? NODE_HEIGHT / 2 : 8 }),
      childShape(node.type),
      svg("text", {
        class: "node-label",
        x: NODE_WIDTH / 2,
        y: extra ? 15 : 20,
        "text-anchor": "middle",
        text: shorten(node.id, 19),
      }),
      svg("text", {
        class: "node-type",
        x: NODE_WIDTH / 2,
        y: extra ? 29 : 36,
        "text-anchor": "middle",
        text: CHILD_TYPES.has(node.type) ? shorten(brief, 24) : shorten(brief ? `${node.type} · ${brief}` : node.type, 24),
      }),
      extra
        ? svg("text", { class: "node-type node-extra", x: NODE_WIDTH / 2, y: 41, "text-anchor": "middle", text: shorten(extra, 26) })
        : null,
      marks.visited.has(node.id) && !marks.failed.has(node.id)
        ? svg("text", {
            class: "node-mark",
            x: NODE_WIDTH - 8,
            y: 14,
            "text-anchor": "end",
            "aria-hidden": "true",
            text: "✓",
          })
        : null,
      node.id === layout.start
        ? svg("text", { class: "node-start", x: 8, y: 14, "aria-hidden": "true", text: "▶" })
        : null,
    );
  });

  const marker = (id) =>
    svg(
      "marker",
      {
        id,
        viewBox: "0 0 10 10",
        refX: 9,
        refY: 5,
        markerWidth: 7,
        markerHeight: 7,
        orient: "auto-start-reverse",
      },
      svg("path", { d: "M0,0 L10,5 L0,10 z" }),
    );
  return svg(
    "svg",
    {
      class: "graph",
      viewBox: `0 0 ${layout.width} ${layout.height}`,
      width: layout.width,
      height: layout.height,
      style: `max-width: ${layout.width}px; min-width: ${Math.min(layout.width, 720)}px`,
      role: "list",
      "aria-label": `Flow graph, ${graph.nodes.length} nodes`,
    },
    svg("defs", {}, marker("arrow"), marker("arrow-walked")),
    edges,
    nodes,
  );
}
