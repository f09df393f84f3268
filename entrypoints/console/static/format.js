// How times, durations and JSON read on the page.

export function formatDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const minutes = Math.floor(ms / 60_000);
  const seconds = Math.round((ms % 60_000) / 1000);
  if (minutes < 60) return `${minutes} min ${seconds} s`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

export function formatAge(ms, nowMs = Date.now()) {
  if (!ms) return "—";
  const age = nowMs - ms;
  if (age < 0) return `in ${formatDuration(-age)}`;
  if (age < 1000) return "just now";
  return `${formatDuration(age).replace(/\.\d+ s$/, " s")} ago`;
}

export function formatTime(ms) {
  if (!ms) return "—";
  return new Date(ms).toLocaleString(undefined, {
    year: "numeric",
    month: "short",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
  });
}

export function isoTime(ms) {
  return ms ? new Date(ms).toISOString() : "";
}

export function formatJson(value) {
  return value === undefined ? "" : JSON.stringify(value, null, 2);
}

export const TERMINAL = new Set(["completed", "error", "cancelled"]);
