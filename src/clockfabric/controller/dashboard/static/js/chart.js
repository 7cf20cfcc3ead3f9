// Time series drawn as SVG panels stacked on one time axis, so a drop in one panel lines up
// with a rise in another. More than MAX_GAP nulls in a row break a line: no readings, not zero
// (a single missed second, a push landing in the next one, does not).
import { clock, el, svg } from "./dom.js";

const MAX_GAP = 3;
const WIDTH = 1200, PANEL = 150, LEFT = 70, RIGHT = 10, GAP = 28, TICKS = 6;
export const COLOURS = ["#1f6feb", "#d62d20", "#2e9e4f", "#f28c18", "#8250df", "#0a8a8a", "#bf3989", "#6e7781"];

// panels: [{ label, unit, scale, lines: [{ name, values, colour, emphasis }] }], every values list on tNs
export function chart(tNs, panels, label) {
  const height = panels.length * (PANEL + GAP) + 20;
  const [t0, t1] = [tNs[0], tNs[tNs.length - 1]];
  const x = (t) => LEFT + (t1 > t0 ? ((t - t0) / (t1 - t0)) * (WIDTH - LEFT - RIGHT) : 0);
  const parts = [];
  panels.forEach((panel, i) => {
    const top = i * (PANEL + GAP) + 14;
    const values = panel.lines.flatMap((l) => l.values.filter((v) => v !== null));
    const max = Math.max(...values, 0) * 1.1 || 1;
    const y = (v) => top + PANEL - (v / max) * PANEL;
    parts.push(svg("text", { class: "panel", x: LEFT, y: top - 4 }, panel.label),
      svg("line", { class: "axis", x1: LEFT, y1: top + PANEL, x2: WIDTH - RIGHT, y2: top + PANEL }),
      svg("text", { class: "tick", x: LEFT - 6, y: top + 6, "text-anchor": "end" },
        `${Number((max / panel.scale).toPrecision(3))} ${panel.unit}`),
      svg("text", { class: "tick", x: LEFT - 6, y: top + PANEL, "text-anchor": "end" }, "0"));
    for (const line of panel.lines) {
      for (const run of runs(line.values)) {
        const points = run.map((j) => `${x(tNs[j]).toFixed(1)},${y(line.values[j]).toFixed(1)}`).join(" ");
        parts.push(svg("polyline", { class: `series${line.emphasis ? " emphasis" : ""}`, points,
          stroke: line.colour, "data-series": line.name }, svg("title", {}, line.name)));
      }
    }
  });
  const bottom = panels.length * (PANEL + GAP) - GAP + 14;
  for (let k = 0; k < TICKS && tNs.length; k += 1) {
    const t = t0 + ((t1 - t0) * k) / (TICKS - 1);
    parts.push(svg("text", { class: "tick", x: x(t), y: bottom + 16, "text-anchor": "middle" }, clock(t).slice(0, 8)));
  }
  return svg("svg", { class: "chart", viewBox: `0 0 ${WIDTH} ${height + 10}`, role: "img", "aria-label": label }, parts);
}

// Indices of the non-null values, split where more than MAX_GAP nulls come in a row.
function runs(values) {
  const out = [];
  let current = [];
  values.forEach((v, j) => {
    if (v === null) return;
    if (current.length && j - current[current.length - 1] > MAX_GAP + 1) { out.push(current); current = []; }
    current.push(j);
  });
  if (current.length) out.push(current);
  return out;
}

export function legend(lines) {
  return el("p", { class: "legend" }, lines.map((l) =>
    el("span", {}, el("i", { style: `background: ${l.colour}` }), l.name)));
}
