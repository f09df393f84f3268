// The Gantt-like node timeline: one bar per node run, from started_at_ms to ended_at_ms
// (a running node's bar grows to "now"); hover or focus a bar to read its durations.

import { svg } from "./dom.js";
import { formatDuration } from "./format.js";

const LABEL_WIDTH = 160;
const CHART_WIDTH = 850;
const RIGHT_PAD = 90;
const ROW_HEIGHT = 28;
const BAR_HEIGHT = 16;
const TOP = 6;
const AXIS_HEIGHT = 26;
const TICKS = 4;

const timed = (entry) => entry.started_at_ms !== null && entry.started_at_ms !== undefined;

export function describeEntry(entry, t0, nowMs) {
  if (!timed(entry)) return `${entry.node_id}: ${entry.status} (no timing recorded)`;
  const end = entry.ended_at_ms ?? nowMs;
  const open = entry.ended_at_ms === null || entry.ended_at_ms === undefined;
  const duration = formatDuration(end - entry.started_at_ms);
  return (
    `${entry.node_id}: ${entry.status}, ${duration}${open ? " so far" : ""}, ` +
    `started ${formatDuration(entry.started_at_ms - t0)} after the first node`
  );
}

// Checkpoints older than per-node timings give no times: such rows show without a bar.
export function timelineChart(entries, nowMs, onDetail) {
  const times = entries.filter(timed);
  const t0 = times.length ? Math.min(...times.map((e) => e.started_at_ms)) : nowMs;
  const t1 = Math.max(...times.map((e) => e.ended_at_ms ?? nowMs), t0 + 1);
  const span = t1 - t0;
  const width = LABEL_WIDTH + CHART_WIDTH + RIGHT_PAD;
  const height = TOP + entries.length * ROW_HEIGHT + AXIS_HEIGHT;
  const xOf = (ms) => LABEL_WIDTH + ((ms - t0) / span) * CHART_WIDTH;

  const ticks = [];
  for (let i = 0; times.length && i <= TICKS; i += 1) {
    const x = LABEL_WIDTH + (i / TICKS) * CHART_WIDTH;
    const y = TOP + entries.length * ROW_HEIGHT;
    ticks.push(
      svg("line", { class: "grid", x1: x, x2: x, y1: TOP, y2: y }),
      svg("text", {
        class: "tick",
        x,
        y: y + 18,
        "text-anchor": i === 0 ? "start" : i === TICKS ? "end" : "middle",
        text: `+${formatDuration((i / TICKS) * span)}`,
      }),
    );
  }

  const rows = entries.map((entry, index) => {
    const y = TOP + index * ROW_HEIGHT;
    const text = describeEntry(entry, t0, nowMs);
    const show = () => onDetail(text);
    const group = (...children) =>
      svg(
        "g",
        {
          class: `bar status-${entry.status}`,
          tabindex: 0,
          role: "listitem",
          "aria-label": text,
          dataset: { focusKey: `timeline-${index}`, node: entry.node_id },
          // A focused bar keeps the caption; a re-render under a resting pointer must not steal it.
          onmouseenter: (event) => {
            if (!event.currentTarget.ownerSVGElement.contains(document.activeElement)) show();
          },
          onfocus: show,
        },
        svg("title", { text }),
        svg("rect", { class: "row-hit", x: 0, y, width, height: ROW_HEIGHT }),
        svg("text", {
          class: "label",
          x: LABEL_WIDTH - 10,
          y: y + ROW_HEIGHT / 2 + 4,
          "text-anchor": "end",
          text: entry.node_id,
        }),
        ...children,
      );
    if (!timed(entry)) {
      return group(
        svg("text", {
          class: "duration",
          x: LABEL_WIDTH,
          y: y + ROW_HEIGHT / 2 + 4,
          text: `${entry.status}, no timing recorded`,
        }),
      );
    }
    const end = entry.ended_at_ms ?? nowMs;
    const x = xOf(entry.started_at_ms);
    const barWidth = Math.max(3, xOf(end) - x);
    return group(
      svg("rect", {
        class: "fill",
        x,
        y: y + (ROW_HEIGHT - BAR_HEIGHT) / 2,
        width: barWidth,
        height: BAR_HEIGHT,
        rx: 3,
      }),
      svg("text", {
        class: "duration",
        x: x + barWidth + 6,
        y: y + ROW_HEIGHT / 2 + 4,
        text: formatDuration(end - entry.started_at_ms),
      }),
    );
  });

  return svg(
    "svg",
    {
      class: "timeline",
      viewBox: `0 0 ${width} ${height}`,
      width,
      height,
      style: `max-width: ${width}px; min-width: 640px`,
      role: "list",
      "aria-label": "Node timeline",
    },
    ticks,
    rows,
  );
}
